"""Seed a source cache from what these machines can reach (never anything else).

Open MPI 4.1.4's upstream tree as Debian ships it (`apt-get source`, with a private
deb-src list so the system's apt setup is untouched); mpi4py and Horovod sdists from
PyPI (`pip download`), which are the very files mpicluster's lockfile pins.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

OPENMPI_ORIG = "openmpi_4.1.4.orig.tar.xz"
MIRROR = os.environ.get("MPICLUSTER_DEBIAN_MIRROR", "http://deb.debian.org/debian")
DOWNLOADS = Path(
    os.environ.get("MPICLUSTER_TEST_DOWNLOADS", Path.home() / ".cache" / "mpicluster-tests")
)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def openmpi_orig() -> Path:
    """Debian's openmpi_4.1.4.orig.tar.xz (the upstream 4.1.4 tree)."""
    target = DOWNLOADS / OPENMPI_ORIG
    if target.exists():
        return target
    apt = DOWNLOADS / "apt"
    (apt / "lists" / "partial").mkdir(parents=True, exist_ok=True)
    (apt / "cache" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
    (apt / "sources.list").write_text(f"deb-src {MIRROR} bookworm main\n")
    options = [
        "-o",
        f"Dir::Etc::SourceList={apt / 'sources.list'}",
        "-o",
        "Dir::Etc::SourceParts=/nonexistent",
        "-o",
        f"Dir::State::Lists={apt / 'lists'}",
        "-o",
        f"Dir::Cache={apt / 'cache'}",
    ]
    subprocess.run(["apt-get", *options, "-qq", "update"], check=True)
    subprocess.run(
        ["apt-get", *options, "-qq", "source", "--download-only", "openmpi=4.1.4-3"],
        cwd=DOWNLOADS,
        check=True,
    )
    return target


def pypi_sdist(requirement: str) -> Path:
    name = requirement.split("==")[0]
    found = sorted(DOWNLOADS.glob(f"{name}-*.tar.gz"))
    if found:
        return found[-1]
    DOWNLOADS.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--dest",
            str(DOWNLOADS),
            requirement,
        ],
        check=True,
        capture_output=True,
    )
    return sorted(DOWNLOADS.glob(f"{name}-*.tar.gz"))[-1]


def seed_cache(cache: Path) -> dict[str, str]:
    """Fill `cache` with the sources; return the inventory lines for Open MPI's override."""
    cache.mkdir(parents=True, exist_ok=True)
    for path in (pypi_sdist("mpi4py==4.1.2"), pypi_sdist("horovod==0.28.1")):
        shutil.copyfile(path, cache / path.name)
    orig = openmpi_orig()
    return {"version": "4.1.4", "url": str(orig), "sha256": sha256(orig)}
