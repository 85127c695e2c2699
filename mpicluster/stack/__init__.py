"""The MPI stack built from source: pinned sources, the source cache, fingerprints, the
recipe and the build plan. Its face for `up`: prepare_stack() and the StackPlan it
returns; for `run --requirements`: job_packages(), a job's own packages resolved; for
the relay's benchmark: relay_tree() and relay_depth(), the plan the pack travels by."""

from mpicluster.stack.cluster_packages import ClusterPackages
from mpicluster.stack.distribute import depth as relay_depth
from mpicluster.stack.distribute import tree as relay_tree
from mpicluster.stack.prepare import StackPlan, job_packages
from mpicluster.stack.prepare import prepare as prepare_stack

__all__ = [
    "ClusterPackages",
    "StackPlan",
    "job_packages",
    "prepare_stack",
    "relay_depth",
    "relay_tree",
]
