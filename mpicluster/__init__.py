"""mpicluster: turn SSH-reachable Linux machines into a verified MPI/GPU cluster."""

__version__ = "0.1.0"
