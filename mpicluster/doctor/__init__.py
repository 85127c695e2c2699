"""mpicluster doctor: fast parallel checks for what breaks MPI clusters."""
