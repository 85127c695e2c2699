"""The wheelhouse: the Python packages nodes install offline (`pip --no-index`).

`pip download` runs on the control machine, for the nodes' platform (their Python
version and architecture, not the control machine's), into a folder of the source
cache. A manifest records each file's sha256; its digest enters the fingerprint.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

from mpicluster.stack import cuda_compat
from mpicluster.stack.cache import sha256_of
from mpicluster.stack.fingerprint import Platform
from mpicluster.util import proc
from mpicluster.util.errors import MpiclusterError

Progress = Callable[[str], None]

#: What building mpi4py and Horovod offline needs, and Horovod's own dependencies
#: (numpy: horovod.torch's allgather_object and broadcast_object need it at run time).
BUILD_REQUIREMENTS = ["setuptools>=64,<81", "wheel", "packaging", "cython>=3.0.1"]
#: Tools installed into the stack's Python: py-spy reads the ranks' stacks for
#: `mpicluster run`'s hang report.
TOOLS = ["py-spy"]
HOROVOD_REQUIREMENTS = ["cloudpickle", "psutil", "pyyaml", "cffi>=1.4.0", "numpy"]
#: The platform tags asked for: every glibc from 2.28 (the nodes' baseline) down. pip
#: takes only the tags it is given (e.g. NVIDIA's cuDNN wheels are manylinux_2_27).
MANYLINUX = [
    *(f"manylinux_2_{minor}" for minor in range(28, 4, -1)),
    "manylinux2014",
    "manylinux2010",
    "manylinux1",
]


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


def requirements(horovod: bool, torch: str | None) -> list[str]:
    wanted = [*BUILD_REQUIREMENTS, *TOOLS]
    if horovod:
        wanted += HOROVOD_REQUIREMENTS
    if torch:
        wanted.append(torch)
    return wanted


def ensure_wheelhouse(
    cache_root: Path,
    platform: Platform,
    wanted: list[str],
    progress: Progress,
    *,
    offline: bool = False,
    index_url: str | None = None,
) -> Wheelhouse:
    """`index_url`: an index pip asks beside PyPI (stack.pytorch.index_url); each index
    has its own folder, so that one index's wheels never stand in for another's."""
    folder = cache_root / "wheels" / house_name(platform, index_url)
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
    proc.run(
        [*download_argv(folder, platform, index_url), *wanted],
        hint="pip could not download the wheels the nodes need; "
        "check your index (PIP_INDEX_URL) or pre-seed the folder",
    )
    files = {p.name: sha256_of(p) for p in sorted(folder.glob("*.whl"))}
    manifest.write_text(json.dumps({"requirements": wanted, "files": files}, indent=2) + "\n")
    return Wheelhouse(folder, tuple(wanted), files)


def download_argv(folder: Path, platform: Platform, index_url: str | None) -> list[str]:
    """pip download of wheels only, into `folder`, for the nodes' Python and platform
    (not this machine's); `index_url` asked beside PyPI."""
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
    if index_url:
        argv += ["--extra-index-url", index_url]
    return argv


def archive(house: Wheelhouse) -> Path:
    """The wheelhouse's wheels as one tar beside its folder, named by its digest (made
    once, renamed into place): the build pushes one file, where Ansible's copy of the
    folder moved it file by file (20 s for 217 MB on the local cluster, scp 2.6 s).
    Archives of the folder's older digests are removed."""
    return archive_of(house.path, house.files, house.digest)


def archive_of(folder: Path, files: Iterable[str], digest: str) -> Path:
    """`files` of `folder` as one tar beside it, `.<folder>-<digest>.tar` (see archive)."""
    target = folder.parent / f".{folder.name}-{digest}.tar"
    if target.is_file():
        return target
    fd, name = tempfile.mkstemp(dir=folder.parent, prefix=f"{target.name}.", suffix=".part")
    partial = Path(name)
    try:
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w") as tar:
            for wheel in sorted(files):
                tar.add(folder / wheel, arcname=wheel, recursive=False)
        partial.chmod(0o644)
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    mine = re.compile(rf"\.{re.escape(folder.name)}-[0-9a-f]{{16}}\.tar")
    for older in folder.parent.glob(f".{folder.name}-*.tar"):
        if older != target and mine.fullmatch(older.name):  # not another folder's
            older.unlink(missing_ok=True)
            older.with_name(older.name + ".sha256").unlink(missing_ok=True)
    return target


def archive_sha256(archive: Path) -> str:
    """The archive's sha256, taken once and kept beside it (`up` asks on every run, a
    no-op one too: an archive of large wheels is not read again each time)."""
    kept = archive.with_name(archive.name + ".sha256")
    if kept.is_file() and kept.stat().st_mtime >= archive.stat().st_mtime:
        return kept.read_text().strip()
    digest = sha256_of(archive)
    kept.write_text(digest + "\n")
    return digest


def house_name(platform: Platform, index_url: str | None) -> str:
    """The wheelhouse's folder: the platform's wheel target, and the index beside PyPI."""
    if not index_url:
        return platform.wheel_target
    return f"{platform.wheel_target}-{hashlib.sha256(index_url.encode()).hexdigest()[:12]}"


@dataclass(frozen=True)
class TorchWheel:
    """The PyTorch wheel a node's `pip install --no-index` takes from the wheelhouse."""

    filename: str
    version: str
    cuda: bool
    #: the NCCL release its wheel pins (nvidia-nccl-cuXX==V), None for a CPU build
    nccl: str | None
    #: the CUDA release it is built for ("13.0"), None for a CPU build
    cuda_version: str | None = None


def torch_wheel(house: Wheelhouse, requirement: str) -> TorchWheel | None:
    """The wheel pip picks for `requirement`: the highest version that satisfies it
    (a local label such as "+cpu" sorts above the bare version, as in pip)."""
    specifier = Requirement(requirement).specifier
    candidates = []
    for name in house.files:
        if not name.startswith("torch-") or not name.endswith(".whl"):
            continue
        try:
            version = Version(name.split("-")[1])
        except InvalidVersion:
            continue
        if specifier.contains(version, prereleases=True):
            candidates.append((version, name))
    if not candidates:
        return None
    version, name = max(candidates)
    requires = requires_of(house.path / name) if (house.path / name).is_file() else []
    cuda = version.local != "cpu"
    return TorchWheel(
        name,
        str(version),
        cuda,
        nccl_pin(requires),
        cuda_compat.torch_cuda(str(version), requires) if cuda else None,
    )


def requires_of(wheel: Path) -> list[str]:
    """A wheel's Requires-Dist lines (its METADATA), without the field name."""
    with zipfile.ZipFile(wheel) as archive:
        metadata = next((n for n in archive.namelist() if n.endswith(".dist-info/METADATA")), None)
        text = archive.read(metadata).decode("utf-8", "replace") if metadata else ""
    return [
        line.split(":", 1)[1].strip()
        for line in text.splitlines()
        if line.startswith("Requires-Dist:")
    ]


def nccl_pin(requires: list[str]) -> str | None:
    """The NCCL release a PyTorch wheel requires (Requires-Dist: nvidia-nccl-cu13==2.29.7)."""
    for line in requires:
        requirement = Requirement(line)
        if requirement.name.startswith("nvidia-nccl"):
            pins = [s.version for s in requirement.specifier if s.operator == "=="]
            return pins[0] if pins else None
    return None
