"""Helpers every room may use: atomic file writes, local processes, the state folder's
paths, picking the telling line of an output, the Debian mirror apt uses. They import no
other part of mpicluster but errors."""
