"""Whether each GPU node's NVIDIA driver runs the CUDA its stack is built with: the
toolkit at stack.cuda_home (NCCL, nccl-tests, CUDA-aware Open MPI) and the CUDA build
of PyTorch in the wheelhouse. Asked before anything is built.

A driver reports the newest CUDA it runs (nvidia-smi's "CUDA Version", the facts'
gpus.cuda). Within one major release a newer minor runs on it too (CUDA's minor version
compatibility, since 11.0: only PTX compiled by the newer toolkit cannot be loaded); a
newer major does not: the first CUDA call fails with "CUDA driver version is
insufficient for CUDA runtime version", after the whole build.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The oldest Linux driver of each CUDA major release (NVIDIA's CUDA release notes,
#: table 3: "minimum required driver version for CUDA minor version compatibility").
MIN_DRIVER = {11: "450.80.02", 12: "525.60.13", 13: "580.65.06"}
#: CUDA releases PyTorch publishes wheels for on its own index (download.pytorch.org/
#: whl/cuXYZ), for the hint: the newest one a driver runs.
PYTORCH_INDEXES = ((11, 8), (12, 1), (12, 4), (12, 6), (12, 8), (12, 9), (13, 0))
PYTORCH_INDEX = "https://download.pytorch.org/whl/cu{major}{minor}"
#: PyTorch's own index of CPU builds (+cpu): PyPI's Linux wheels are CUDA builds.
PYTORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"

_RELEASE = re.compile(r"^\s*(\d+)\.(\d+)")
_LABEL = re.compile(r"\+cu(\d{2,3})$")
#: The CUDA runtime a PyTorch wheel requires: cuda-toolkit[...]==13.0.3 (CUDA 13 wheels
#: on PyPI), nvidia-cuda-runtime-cu12==12.8.90 (CUDA 12 wheels).
_RUNTIME_PIN = re.compile(
    r"^(?:cuda-toolkit(?:\[[^\]]*\])?|nvidia-cuda-runtime(?:-cu\d+)?)\s*==\s*(\d+\.\d+)"
)


def release(text: str | None) -> tuple[int, int] | None:
    """(major, minor) of "12.8", "13.0.88" or "12.4.1"; None where it is not one."""
    match = _RELEASE.match(text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None


def torch_cuda(version: str, requires: list[str]) -> str | None:
    """The CUDA release a PyTorch wheel is built for ("12.8"): its local label (+cu128,
    PyTorch's own index) or the CUDA runtime its metadata pins (PyPI's wheels); None for
    a CPU build (+cpu) or a wheel that says neither."""
    if version.endswith("+cpu"):
        return None
    if label := _LABEL.search(version):
        digits = label.group(1)
        return f"{digits[:-1]}.{digits[-1]}"
    for line in requires:
        if pin := _RUNTIME_PIN.match(line.strip()):
            return pin.group(1)
    return None


@dataclass(frozen=True)
class Need:
    """One CUDA the stack needs a driver to run: what needs it, at which release."""

    kind: str  # "toolkit" or "pytorch"
    what: str
    cuda: str


def needs(toolkit: str | None, cuda_home: str, torch: tuple[str, str] | None) -> list[Need]:
    """What a GPU node's stack needs of its driver: the toolkit (when it has one) and a
    CUDA build of PyTorch, given as (wheel version, its CUDA release)."""
    wanted = []
    if toolkit:
        wanted.append(Need("toolkit", f"the CUDA toolkit at {cuda_home} ({toolkit})", toolkit))
    if torch:
        version, cuda = torch
        wanted.append(Need("pytorch", f"PyTorch {version} (built for CUDA {cuda})", cuda))
    return wanted


def refusal(driver: str | None, driver_cuda: str | None, wanted: list[Need]) -> str | None:
    """Why this driver cannot run the stack (one line, with the fix), or None."""
    runs = release(driver_cuda)
    if runs is None:
        return None  # nvidia-smi said no CUDA version: the GPU check names that node
    for need in wanted:
        needed = release(need.cuda)
        if needed is None or needed[0] <= runs[0]:
            continue
        if need.kind == "pytorch":
            fix = torch_fix(runs)
        else:
            fix = f"install a CUDA {runs[0]}.x toolkit and point stack.cuda_home at it"
        upgrade = MIN_DRIVER.get(needed[0])
        newer = f"a driver >= {upgrade}" if upgrade else f"a driver for CUDA {needed[0]}"
        return (
            f"driver {driver or '?'} runs CUDA <= {runs[0]}.{runs[1]}; {need.what} needs "
            f"CUDA {needed[0]}: {fix}, or upgrade to {newer}"
        )
    return None


def torch_fix(runs: tuple[int, int]) -> str:
    """The PyTorch index to set for a driver that runs CUDA <= `runs`."""
    fitting = [r for r in PYTORCH_INDEXES if r[0] == runs[0] and r <= runs]
    if not fitting:
        return f"set stack.pytorch.index_url to a PyTorch index for CUDA {runs[0]}.x"
    major, minor = fitting[-1]
    return "set stack.pytorch.index_url: " + PYTORCH_INDEX.format(major=major, minor=minor)


def notes(driver_cuda: str | None, wanted: list[Need]) -> list[str]:
    """What runs under minor version compatibility (a newer minor than the driver's):
    worth a line in the plan, not a refusal."""
    runs = release(driver_cuda)
    found = []
    for need in wanted:
        needed = release(need.cuda)
        if runs and needed and needed[0] == runs[0] and needed > runs:
            found.append(
                f"{need.what} is newer than the driver's CUDA {runs[0]}.{runs[1]}: it runs "
                "under CUDA's minor version compatibility"
            )
    return found
