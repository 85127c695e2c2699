"""How much free space a node needs under the install prefix's parent for its stack: what
the preflight role asks for before anything changes (estimates from measured stacks).

A node installing a stack holds the new tree beside the one in use until the switch, and
the pack it unpacks: twice the installed size. The builder also compiles under its
scratch folder (by default /var/tmp, most often the same filesystem).
"""

from __future__ import annotations

from typing import Any

GIB = 1024 * 1024  # KiB
#: Installed sizes (GiB), rounded up from the stacks measured on the local cluster: Open
#: MPI, mpi4py and the venv's build tools (0.4); UCX (0.1); NCCL and nccl-tests per GPU
#: architecture (0.3); PyTorch's CUDA build with its CUDA libraries (about 5 GB) or its
#: CPU build (0.9); Horovod (0.2).
INSTALLED = {
    "mpi": 0.5,
    "ucx": 0.1,
    "ucc": 0.1,
    "nccl_arch": 0.3,
    "torch_cuda": 5.5,
    "torch_cpu": 1.0,
}
HOROVOD = 0.2
#: The builder's object files: Open MPI's tree (1.2 GiB built), NCCL's per architecture.
BUILD = {"openmpi": 1.5, "nccl_arch": 1.0}
#: Never less than the preflight's old floor.
FLOOR_GIB = 1.0


def installed_gib(spec: dict[str, Any]) -> float:
    """The installed size of one fingerprint's stack (its build spec)."""
    size = INSTALLED["mpi"]
    for part in ("ucx", "ucc"):
        if spec.get(part):
            size += INSTALLED[part]
    archs = len((spec.get("nccl") or {}).get("archs") or [])
    size += INSTALLED["nccl_arch"] * archs
    torch = spec.get("pytorch")
    if torch:
        size += INSTALLED["torch_cuda"] if torch.get("cuda") else INSTALLED["torch_cpu"]
    if spec.get("horovod"):
        size += HOROVOD
    return size


def needed_kib(spec: dict[str, Any], *, builder: bool) -> int:
    """Free KiB a node needs: twice the stack, and the build's object files on the builder."""
    gib = 2 * installed_gib(spec)
    if builder:
        archs = len((spec.get("nccl") or {}).get("archs") or [])
        gib += BUILD["openmpi"] + BUILD["nccl_arch"] * archs
    return int(max(gib, FLOOR_GIB) * GIB)
