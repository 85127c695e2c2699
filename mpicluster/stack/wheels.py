"""The wheelhouse: the Python packages nodes install offline (`pip --no-index`).

`pip download` runs on the control machine, for the nodes' platform (their Python
version and architecture, not the control machine's), into a folder of the source
cache. A manifest records each file's sha256; its digest enters the fingerprint.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mpicluster import proc
from mpicluster.errors import MpiclusterError
from mpicluster.stack.cache import sha256_of
from mpicluster.stack.fingerprint import Platform

Progress = Callable[[str], None]

#: What building mpi4py and Horovod offline needs, and Horovod's own dependencies
#: (numpy: horovod.torch's allgather_object and broadcast_object need it at run time).
BUILD_REQUIREMENTS = ["setuptools>=64,<81", "wheel", "packaging", "cython>=3.0.1"]
HOROVOD_REQUIREMENTS = ["cloudpickle", "psutil", "pyyaml", "cffi>=1.4.0", "numpy"]
MANYLINUX = ["manylinux_2_28", "manylinux_2_17", "manylinux2014", "manylinux_2_5", "manylinux1"]


@dataclass(frozen=True)
class Wheelhouse:
    path: Path
    requirements: tuple[str, ...]
    files: dict[str, str]  # file name -> sha256

    @property
    def digest(self) -> str:
        canonical = json.dumps(
            {"requirements": self.requirements, "files": self.files}, sort_keys=True
        )
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def requirements(horovod: bool, pytorch_version: str | None) -> list[str]:
    wanted = list(BUILD_REQUIREMENTS)
    if horovod:
        wanted += HOROVOD_REQUIREMENTS
    if pytorch_version:
        wanted.append(f"torch=={pytorch_version}")
    return wanted


def ensure_wheelhouse(
    cache_root: Path,
    platform: Platform,
    wanted: list[str],
    progress: Progress,
    *,
    offline: bool = False,
) -> Wheelhouse:
    folder = cache_root / "wheels" / platform.wheel_target
    manifest = folder / "manifest.json"
    if manifest.exists():
        recorded = json.loads(manifest.read_text())
        if recorded.get("requirements") == wanted and all(
            (folder / name).is_file() for name in recorded["files"]
        ):
            return Wheelhouse(folder, tuple(wanted), recorded["files"])
    if offline:
        raise MpiclusterError(
            f"the wheelhouse for {platform.wheel_target} is missing or stale in {folder}",
            hint="run `mpicluster fetch INVENTORY` where PyPI (or your index) is reachable",
        )
    folder.mkdir(parents=True, exist_ok=True)
    progress(f"Downloading Python wheels for {platform.wheel_target}: {', '.join(wanted)}")
    argv = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--dest",
        str(folder),
        "--only-binary=:all:",
        "--implementation",
        "cp",
        "--python-version",
        platform.python,
        "--progress-bar",
        "off",
    ]
    for tag in MANYLINUX:
        argv += ["--platform", f"{tag}_{platform.arch}"]
    proc.run(
        [*argv, *wanted],
        hint="pip could not download the wheels the nodes need; "
        "check your index (PIP_INDEX_URL) or pre-seed the folder",
    )
    files = {p.name: sha256_of(p) for p in sorted(folder.glob("*.whl"))}
    manifest.write_text(json.dumps({"requirements": wanted, "files": files}, indent=2) + "\n")
    return Wheelhouse(folder, tuple(wanted), files)


def torch_has_cuda(house: Wheelhouse) -> bool:
    """Whether the wheelhouse's PyTorch is a CUDA build: a `+cpu` local version is not
    (PyPI's Linux wheels without a label, and `+cuXXX` ones, are)."""
    return any(
        name.startswith("torch-") and "+cpu" not in name.split("-")[1] for name in house.files
    )
