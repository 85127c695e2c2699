"""`mpicluster down`: take back, on every node, exactly what `up` added."""
