"""`mpicluster run`: the user's job on the cluster: its command line, the code synced to
every node, the job started from the head node and stopped cleanly, the hang report."""
