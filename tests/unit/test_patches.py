"""mpicluster's patches to pinned releases: pinned with their sha256 in the lockfile,
checked before any node sees them, part of the stack's fingerprint, and applying
cleanly (and only once) to the very sdist the lockfile pins."""

from __future__ import annotations

import os
import subprocess
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from mpicluster.cluster.lockfile import Patch, _pinned, resolve
from mpicluster.stack import sources
from mpicluster.stack.fingerprint import fingerprint, platform_of
from mpicluster.util.errors import MpiclusterError
from mpicluster.util.paths import data_path
from tests.seed import pypi_sdist
from tests.unit.test_stack import FACTS, _inventory

HOROVOD_TASKS = "roles/stack_build/tasks/horovod.yml"


def test_horovod_0_28_1_carries_its_patches_pinned_by_sha256_in_order():
    horovod = resolve("horovod", "0.28.1", None, None)
    gcc13, no_debug_info = horovod.patches
    assert gcc13.file == "horovod-0.28.1-gcc13.patch"
    assert "GCC 13" in gcc13.path.read_text().splitlines()[0]
    assert no_debug_info.file == "horovod-0.28.1-no-debug-info.patch"
    assert "without debug information" in no_debug_info.path.read_text().splitlines()[1]
    for patch in horovod.patches:
        assert patch.verified() == patch.path and patch.path.is_file()
    # a release the user brings (url + sha256) gets none of mpicluster's patches
    assert resolve("horovod", "0.28.0", "https://example.invalid/h.tar.gz", "0" * 64).patches == ()


def test_a_patch_that_is_not_the_pinned_one_is_refused_before_any_node_sees_it():
    pinned = resolve("horovod", "0.28.1", None, None).patches[0]
    changed = Patch(pinned.file, "f" * 64)
    with pytest.raises(MpiclusterError, match=r"is not the lockfile's f{64}") as refused:
        changed.verified()
    assert refused.value.hint and "restore it" in refused.value.hint


def test_the_patch_enters_the_fingerprint():
    inv = _inventory()
    platform = platform_of(FACTS, inv, 0)
    needed = sources.needed(inv)
    fp, document = fingerprint(platform, needed, inv, "w", "r")
    horovod = next(s for s in needed if s.component == "horovod")
    assert document["sources"]["horovod"]["patches"] == [p.sha256 for p in horovod.patches]
    assert "patches" not in document["sources"]["mpi4py"]
    unpatched = [replace(s, patches=()) for s in needed]
    assert fingerprint(platform, unpatched, inv, "w", "r")[0] != fp


def test_the_patches_apply_to_the_pinned_sdist_in_order_once(tmp_path: Path):
    """The stack build's own step (horovod.yml's shell, run as Ansible runs it, once per
    patch in the lockfile's order) on the very sdist the lockfile pins: it patches a
    fresh tree, then leaves a patched one alone."""
    tasks = yaml.safe_load((data_path("playbooks") / HOROVOD_TASKS).read_text())
    (step,) = [t for t in tasks if t["name"] == "Apply mpicluster's patches to Horovod"]
    script = step["ansible.builtin.shell"]["cmd"]
    with tarfile.open(pypi_sdist("horovod", "0.28.1")) as sdist:
        sdist.extractall(tmp_path, filter="data")
    tree = tmp_path / "horovod-0.28.1"
    patches = [str(p.verified()) for p in resolve("horovod", "0.28.1", None, None).patches]

    def apply(patch: str) -> str:
        done = subprocess.run(
            ["bash", "-c", script], cwd=tree, env={**os.environ, "PATCH": patch},
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        return done.stdout

    for patch in patches:
        assert "already applied" not in apply(patch)
    common = (tree / "horovod/common/common.h").read_text()
    assert "#include <stdexcept>" in common
    span = (tree / "third_party/flatbuffers/include/flatbuffers/stl_emulation.h").read_text()
    assert "count_ = other.count_;" not in span
    cmake = (tree / "CMakeLists.txt").read_text()
    assert 'string(REGEX REPLACE "(^| )-g( |$)" " " CMAKE_${lang}_FLAGS_RELWITHDEBINFO' in cmake
    for patch in patches:
        assert apply(patch).strip() == "already applied"
    assert (tree / "horovod/common/common.h").read_text() == common  # not applied twice
    assert (tree / "CMakeLists.txt").read_text() == cmake


def test_without_debug_information_horovods_flags_keep_o3_and_ndebug(tmp_path: Path):
    """CMake itself runs the patched lines on the flags its GNU rules give RelWithDebInfo
    (what Horovod's setup.py builds): -g goes, Horovod's -O3 and NDEBUG stay."""
    patch = resolve("horovod", "0.28.1", None, None).patches[1].verified()
    added = [
        line[1:]
        for line in patch.read_text().splitlines()
        if line.startswith("+") and not line.startswith("+++")
    ]
    script = tmp_path / "flags.cmake"
    flags = [f"CMAKE_{lang}_FLAGS_RELWITHDEBINFO" for lang in ("C", "CXX", "CUDA")]
    lines = [f'set({name} "-O2 -g -DNDEBUG")' for name in flags]
    lines.append(f'string(REPLACE "-O2" "-O3" {flags[1]} "${{{flags[1]}}}")')
    lines += added
    lines.append('message("' + "|".join(f"${{{name}}}" for name in flags) + '")')
    script.write_text("\n".join(lines) + "\n")
    done = subprocess.run(["cmake", "-P", str(script)], capture_output=True, text=True, check=True)
    c, cxx, cuda = (flags.split() for flags in done.stderr.strip().split("|"))
    assert cxx == ["-O3", "-DNDEBUG"]
    assert c == cuda == ["-O2", "-DNDEBUG"]


def test_a_patch_pinned_for_a_build_that_applies_none_is_a_lockfile_error():
    with pytest.raises(ValueError, match=r"only \('horovod',\) builds apply patches"):
        _pinned(
            "mpi4py",
            "4.1.2",
            {
                "pypi": "mpi4py==4.1.2",
                "filename": "m.tar.gz",
                "sha256": "0" * 64,
                "patches": [{"file": "x", "sha256": "1"}],
            },
        )
