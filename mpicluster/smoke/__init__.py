"""The smoke test that proves a provisioned cluster works (`up` ends with it, `mpicluster
smoke` runs it alone): ssh between nodes, the MPI allreduce, Horovod, PyTorch, the GPU
path with nccl-tests."""

from mpicluster.smoke.nccl_tests import OK as NCCL_TESTS_OK
from mpicluster.smoke.nccl_tests import exit_meaning as nccl_tests_exit_meaning
from mpicluster.smoke.nccl_tests import parse as parse_nccl_tests
from mpicluster.smoke.steps import (
    PML_CHATTER,
    PML_VERBOSE,
    SmokeReport,
    gpu_placement,
    run_smoke,
    selected_pmls,
)

__all__ = [
    "NCCL_TESTS_OK",
    "PML_CHATTER",
    "PML_VERBOSE",
    "SmokeReport",
    "gpu_placement",
    "nccl_tests_exit_meaning",
    "parse_nccl_tests",
    "run_smoke",
    "selected_pmls",
]
