"""The MPI stack: pinned sources, the source cache, fingerprints and the build plan."""
