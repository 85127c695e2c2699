"""The free space the preflight asks of a node, from the stack it installs (pure logic)."""

from __future__ import annotations

from mpicluster.stack.disk_need import GIB, installed_gib, needed_kib

MPI_ONLY = {"ucx": None, "nccl": None, "pytorch": None, "horovod": None}
GPU = {
    "ucx": {"version": "1.13.1"},
    "nccl": {"archs": ["9.0"]},
    "pytorch": {"cuda": True},
    "horovod": {"gpu_operations": True},
}


def test_a_cuda_pytorch_stack_needs_far_more_than_the_old_gigabyte():
    assert installed_gib(MPI_ONLY) == 0.5
    assert needed_kib(MPI_ONLY, builder=False) == GIB  # the floor: the old default
    assert installed_gib(GPU) == 0.5 + 0.1 + 0.3 + 5.5 + 0.2
    assert needed_kib(GPU, builder=False) == int(2 * 6.6 * GIB)
    # the builder compiles Open MPI and NCCL beside it
    assert needed_kib(GPU, builder=True) == int((2 * 6.6 + 1.5 + 1.0) * GIB)
    cpu_torch = {**MPI_ONLY, "pytorch": {"cuda": False}}
    assert installed_gib(cpu_torch) == 1.5
    two_archs = {**GPU, "nccl": {"archs": ["8.0", "9.0"]}}
    assert needed_kib(two_archs, builder=True) > needed_kib(GPU, builder=True)
