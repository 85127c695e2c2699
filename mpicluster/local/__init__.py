"""The local cluster: Vagrant machines (Podman containers by default) to try mpicluster on."""
