"""What the cluster is, decided on the control machine before any node is reached: the
inventory and its validation, the pinned stack versions (lockfile), the layout on the
nodes, the MPI settings that follow from the network, the hostfiles, and the cluster's
folder and keys on the control machine."""
