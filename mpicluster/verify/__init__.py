"""The smoke test that proves a provisioned cluster works (`up` ends with it, `mpicluster
smoke` runs it alone): ssh between nodes, the MPI allreduce, Horovod, PyTorch, the GPU
path with nccl-tests."""

from mpicluster.verify.smoke import SmokeReport, run_smoke

__all__ = ["SmokeReport", "run_smoke"]
