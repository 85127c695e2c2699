"""sources.autogen: control: a tag archive's configure made on this machine.

The real run: UCC 1.8.0's tag archive from ../shared/sources (the pinned bytes), its
autogen.sh run here, the result packed beside it; then the cache's copy is used again.
"""

from __future__ import annotations

import io
import sys
import tarfile
import time
from pathlib import Path

import pytest

from mpicluster.cluster.lockfile import resolve
from mpicluster.stack import autogen
from mpicluster.util.errors import MpiclusterError
from tests.seed import seed_shared


def _archive(path: Path, names: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as packed:
        for name in names:
            data = b"#!/bin/sh\n"
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755
            packed.addfile(info, io.BytesIO(data))
    return path


def test_an_archive_with_configure_is_shipped_as_it_is(tmp_path):
    ucx = resolve("ucx", "1.22.0", None, None)
    with_configure = _archive(
        tmp_path / ucx.filename, ["ucx-1.22.0/configure.ac", "ucx-1.22.0/configure"]
    )
    assert autogen.has_configure(with_configure, ucx)
    files = {"ucx": with_configure, "openmpi": tmp_path / "o.tar.xz"}
    assert autogen.apply(files, [ucx], make=False) == files
    # without configure, and none made before: a dry run (make=False) keeps the archive
    tree = _archive(tmp_path / "t" / ucx.filename, ["ucx-1.22.0/configure.ac"])
    assert not autogen.has_configure(tree, ucx)
    assert autogen.apply({"ucx": tree}, [ucx], make=False) == {"ucx": tree}
    # the made archive is named by the pin's sha256, so another pin makes another
    assert autogen.generated_name(ucx) == "ucx-1.22.0-configure-675ed3c923ca.tar.gz"


def test_without_autotools_here_it_says_what_to_install(tmp_path, monkeypatch):
    ucx = resolve("ucx", "1.22.0", None, None)
    tree = _archive(tmp_path / ucx.filename, ["ucx-1.22.0/configure.ac"])
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(MpiclusterError) as raised:
        autogen.apply({"ucx": tree}, [ucx])
    assert "no autoreconf, autoconf, automake, libtoolize" in raised.value.message
    assert "sources.autogen: builder" in raised.value.hint
    assert sorted(p.name for p in tmp_path.iterdir()) == [ucx.filename]  # nothing left


def test_ucc_tag_archive_gets_its_configure_here_once(tmp_path):
    ucc = resolve("ucc", None, None, None)
    (original,) = seed_shared(tmp_path, ("ucc",))
    started = time.monotonic()
    files = autogen.apply({"ucc": original}, [ucc])
    made = files["ucc"]
    assert made.name == "ucc-1.8.0-configure-1fc0b7c5d6e5.tar.gz"
    assert autogen.has_configure(made, ucc)
    with tarfile.open(made) as archive:
        names = set(archive.getnames())
    assert {
        "ucc-1.8.0/configure",
        "ucc-1.8.0/Makefile.in",
        "ucc-1.8.0/ltmain.sh",
    } <= names
    # no scratch folder left beside it; the second time the cache's copy is used
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([original.name, made.name])
    mtime = made.stat().st_mtime_ns
    assert autogen.apply({"ucc": original}, [ucc])["ucc"] == made
    assert made.stat().st_mtime_ns == mtime
    sys.stdout.write(f"autogen.sh of UCC 1.8.0 here: {time.monotonic() - started:.1f} s\n")


def test_the_plan_carries_where_configure_is_made():
    from tests.unit.plans import plan_of

    text = "cluster: t\nnodes:\n  - {name: a}\n"
    assert plan_of(text).sources.autogen == "builder"
    assert plan_of(text + "sources: {autogen: control}\n").sources.autogen == "control"
