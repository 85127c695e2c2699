"""`mpicluster up`: probe the nodes, run the playbooks (or prove they would change
nothing), then prove the cluster works."""

from mpicluster.up.provision import UpResult, provision

__all__ = ["UpResult", "provision"]
