"""Seed a source cache from what these machines can reach (never anything else).

Open MPI's upstream tree as Debian ships it (the lockfile's Debian alternate: 5.0.7
from trixie, 4.1.4 from bookworm; fetched with `apt-get source` from the Debian mirror
this machine's apt uses, or MPICLUSTER_DEBIAN_MIRROR); mpi4py and Horovod sdists with
`pip download` through pip's own configuration. Both go through mpicluster's own source
cache code, so they are the very files the lockfile pins, verified; they are kept in
MPICLUSTER_TEST_DOWNLOADS for the next run.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from mpicluster.cluster.lockfile import Debian, Source, resolve
from mpicluster.stack.cache import SourceCache

DOWNLOADS = Path(
    os.environ.get("MPICLUSTER_TEST_DOWNLOADS", Path.home() / ".cache" / "mpicluster-tests")
)
SDISTS = (("mpi4py", "4.1.2"), ("horovod", "0.28.1"))
#: Upstream archives no reachable registry carries (NCCL, nccl-tests, UCX), kept beside the
#: checkout by these machines and CI; never copied into the repository.
SHARED_SOURCES = Path(__file__).resolve().parents[2] / "shared" / "sources"


def _progress(message: str) -> None:
    pass


def openmpi_orig(version: str, downloads: Path = DOWNLOADS) -> tuple[Source, Path]:
    """Debian's openmpi_<version>.orig.tar.xz (the upstream tree) and its pin."""
    pinned = resolve("openmpi", version, None, None)
    debian = next(v for v in pinned.alternates if isinstance(v.origin, Debian))
    # the alternate alone: download.open-mpi.org is not reachable from these machines
    return debian, SourceCache(downloads).ensure(debian, _progress).path


def debian_orig(component: str, version: str, downloads: Path = DOWNLOADS) -> dict[str, str]:
    """A component's Debian orig tarball (the lockfile's Debian alternate; the upstream
    release file is not reachable from these machines), as the inventory's override."""
    pinned = resolve(component, version, None, None)
    debian = next(v for v in pinned.alternates if isinstance(v.origin, Debian))
    path = SourceCache(downloads).ensure(debian, _progress).path
    return {"version": version, "url": str(path), "sha256": debian.sha256}


def pypi_sdist(name: str, version: str, downloads: Path = DOWNLOADS) -> Path:
    return SourceCache(downloads).ensure(resolve(name, version, None, None), _progress).path


def seed_cache(cache: Path, openmpi: str, downloads: Path = DOWNLOADS) -> dict[str, str]:
    """Fill `cache` with the sources; return the inventory lines for Open MPI's override."""
    cache.mkdir(parents=True, exist_ok=True)
    for name, version in SDISTS:
        path = pypi_sdist(name, version, downloads)
        shutil.copyfile(path, cache / path.name)
    pin, orig = openmpi_orig(openmpi, downloads)
    return {"version": openmpi, "url": str(orig), "sha256": pin.sha256}


def seed_shared(
    cache: Path, components: tuple[str, ...], shared: Path = SHARED_SOURCES
) -> list[Path]:
    """Copy the lockfile's default archives of `components` from ../shared/sources into
    `cache` (their sha256 is checked by `up` like any cached file)."""
    cache.mkdir(parents=True, exist_ok=True)
    copied = []
    for component in components:
        name = resolve(component, None, None, None).filename
        shutil.copyfile(shared / name, cache / name)
        copied.append(cache / name)
    return copied


def seed_gpu_sources(cache: Path, shared: Path = SHARED_SOURCES) -> list[Path]:
    """The pinned NCCL and nccl-tests archives, and UCX's and UCC's (built beside a
    CUDA-aware MPI)."""
    return seed_shared(cache, ("nccl", "nccl_tests", "ucx", "ucc"), shared)
