"""The stack's manifest (remote/plugins/module_utils/mpicluster_stackfiles.py) and doctor's
stack check, on real trees in a temporary folder."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from mpicluster.doctor.checks import stack_files
from mpicluster.remote.plugins.module_utils import mpicluster_stackfiles as manifest

SITE = "venv/lib/python3.11/site-packages"


@pytest.fixture
def tree(tmp_path) -> Path:
    """A small stack as the build leaves it, its manifest written."""
    root = tmp_path / "stacks" / "fp1"
    files = {
        "bin/mpirun": b"\x7fELF mpirun",
        "bin/prted": b"\x7fELF prted",
        "lib/libmpi.so.40.40.7": b"\x7fELF libmpi" * 100,
        "lib/libnccl.so.2.29.7": b"\x7fELF nccl" * 1000,
        "share/openmpi/help-mpi-api.txt": b"help",
        f"{SITE}/mpi4py/__init__.py": b"# mpi4py",
        f"{SITE}/mpi4py/MPI.cpython-311-x86_64-linux-gnu.so": b"\x7fELF MPI",
        f"{SITE}/mpi4py/bench.py": b"# bench",
        f"{SITE}/numpy/__init__.py": b"# numpy",
        "FINGERPRINT.json": b"{}",
    }
    for relative, data in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    for program in ("bin/mpirun", "bin/prted"):
        (root / program).chmod(0o755)
    (root / "lib/libmpi.so.40").symlink_to("libmpi.so.40.40.7")
    (root / f"{SITE}/numpy/__pycache__").mkdir()
    (root / f"{SITE}/numpy/__pycache__/__init__.cpython-311.pyc").write_bytes(b"pyc")
    assert manifest.write(str(root), "fp1")[0] == 10  # 9 files and the link
    return root


def found(root: Path, **options) -> list[tuple[str, str, str]]:
    report = manifest.verify(str(root), **options)
    return [(p["path"], p["what"], p["how"]) for p in report["problems"]]


def test_an_intact_tree_verifies_and_hashes_only_what_a_launch_loads(tree):
    report = manifest.verify(str(tree))
    assert (report["manifest"], report["fingerprint"], report["problems"]) == (True, "fp1", [])
    assert report["files"] == 10
    # mpirun, prted, libmpi, mpi4py's three files; not NCCL, help text, numpy
    assert report["hashed"] == 6
    assert manifest.verify(str(tree), deep=True)["hashed"] == 9
    assert manifest.verify(str(tree), loaded=False)["hashed"] == 0
    # what Python writes as it runs is not the stack's
    (tree / f"{SITE}/mpi4py/__pycache__").mkdir()
    (tree / f"{SITE}/mpi4py/__pycache__/bench.cpython-311.pyc").write_bytes(b"pyc")
    assert found(tree) == []


def test_the_walk_lists_files_and_links_each_relative_to_its_folder(tree):
    """Every file and link (a link to a folder too, not followed) with its own lstat,
    sorted, without __pycache__ and the build's records: what the manifest lists."""
    (tree / "share/openmpi/current").symlink_to(tree / "lib")
    listed = manifest.walk(str(tree) + "/")
    names = [relative for relative, _ in listed]
    assert names == sorted(names)
    assert "share/openmpi/current" in names and "share/openmpi/current/libmpi.so.40" not in names
    assert not any("__pycache__" in name or name == "FINGERPRINT.json" for name in names)
    for relative, info in listed:
        assert info == os.lstat(tree / relative), relative


def test_each_kind_of_damage_is_named_with_what_changed(tree):
    with (tree / "lib/libmpi.so.40.40.7").open("r+b") as handle:
        handle.truncate(100)
    (tree / "bin/prted").chmod(0o644)
    shutil.rmtree(tree / f"{SITE}/mpi4py")
    (tree / "lib/libextra.so").write_bytes(b"added")
    (tree / "lib/libmpi.so.40").unlink()
    (tree / "lib/libmpi.so.40").symlink_to("libmpi.so.40.40.6")
    assert found(tree) == [
        ("bin/prted", "changed", "mode (0644, was 0755)"),
        ("lib/libmpi.so.40", "changed", "target (libmpi.so.40.40.6, was libmpi.so.40.40.7)"),
        ("lib/libmpi.so.40.40.7", "changed", "size (100 bytes, was 1100)"),
        (f"{SITE}/mpi4py/", "missing", "3 files"),  # one line for the folder
        ("lib/libextra.so", "added", ""),
    ]
    report = manifest.verify(str(tree))
    assert report["counts"] == {"changed": 3, "missing": 3, "added": 1}


def test_same_size_content_is_found_by_its_sha256_where_hashed(tree):
    def rewrite(relative: str, data: bytes) -> None:
        path = tree / relative
        before = path.stat()
        path.write_bytes(data)
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # mtime kept

    rewrite("bin/mpirun", b"\x7fELF MPIRUN")
    rewrite("lib/libnccl.so.2.29.7", b"\x7fELF NCCL" * 1000)
    assert found(tree) == [("bin/mpirun", "changed", "content (sha256)")]
    assert found(tree, deep=True) == [
        ("bin/mpirun", "changed", "content (sha256)"),
        ("lib/libnccl.so.2.29.7", "changed", "content (sha256)"),
    ]
    # touched only (same bytes, a new mtime): as up installed it; its sha256 was taken
    os.utime(tree / "share/openmpi/help-mpi-api.txt", (1, 1))
    assert found(tree) == [("bin/mpirun", "changed", "content (sha256)")]
    assert manifest.verify(str(tree))["hashed"] == 7


def test_a_tree_without_or_with_a_damaged_manifest_says_so(tree):
    (tree / manifest.MANIFEST_NAME).write_bytes(b"not gzip")
    report = manifest.verify(str(tree))
    assert "cannot be read" in report["error"] and not report["manifest"]
    (tree / manifest.MANIFEST_NAME).unlink()
    report = manifest.verify(str(tree))
    assert (report["manifest"], report["error"]) == (False, None)


def test_the_stack_check_names_each_problem_and_the_repair(tree):
    (tree / "bin/prted").chmod(0o700)
    shutil.rmtree(tree / f"{SITE}/mpi4py")
    facts = {"current": {"fingerprint": "fp1"}, "stack_files": manifest.verify(str(tree))}
    (result,) = stack_files.judge("node2", facts)
    assert result.status == "fail"
    assert result.evidence == (
        f"{tree}: 1 changed, 3 missing of 10 files against the manifest (size, mode, mtime; "
        f"sha256 of the 3 files a launch loads): bin/prted changed (mode (0700, was 0755)); "
        f"{SITE}/mpi4py/ missing (3 files)"
    )
    assert "installs node2's stack again from the pack" in result.fix


def test_the_stack_check_passes_warns_on_added_files_and_old_stacks(tree):
    facts = {"current": {"fingerprint": "fp1"}, "stack_files": manifest.verify(str(tree))}
    (result,) = stack_files.judge("node1", facts)
    assert result.status == "pass" and "10 files against the manifest" in result.evidence
    (tree / "bin/mine").write_bytes(b"mine")
    facts["stack_files"] = manifest.verify(str(tree))
    (result,) = stack_files.judge("node1", facts)
    assert result.status == "warn" and "1 added" in result.evidence
    (tree / manifest.MANIFEST_NAME).unlink()
    facts["stack_files"] = manifest.verify(str(tree))
    (result,) = stack_files.judge("node1", facts)
    assert result.status == "warn" and "has no manifest" in result.evidence
    assert stack_files.judge("node1", {"current": None, "stack_files": None}) == []
