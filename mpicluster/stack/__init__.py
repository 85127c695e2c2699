"""The MPI stack built from source: pinned sources, the source cache, fingerprints, the
recipe and the build plan. Its face for `up`: prepare_stack() and the StackPlan it
returns."""

from mpicluster.stack.prepare import StackPlan
from mpicluster.stack.prepare import prepare as prepare_stack

__all__ = ["StackPlan", "prepare_stack"]
