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


def test_horovod_0_28_1_carries_its_gcc13_patch_pinned_by_sha256():
    horovod = resolve("horovod", "0.28.1", None, None)
    (patch,) = horovod.patches
    assert patch.file == "horovod-0.28.1-gcc13.patch"
    assert patch.verified() == patch.path and patch.path.is_file()
    assert "GCC 13" in patch.path.read_text().splitlines()[0]
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
    assert document["sources"]["horovod"]["patches"] == [horovod.patches[0].sha256]
    assert "patches" not in document["sources"]["mpi4py"]
    unpatched = [replace(s, patches=()) for s in needed]
    assert fingerprint(platform, unpatched, inv, "w", "r")[0] != fp


def test_the_patch_applies_to_the_pinned_sdist_once(tmp_path: Path):
    """The stack build's own step (horovod.yml's shell, run as Ansible runs it) on the
    very sdist the lockfile pins: it patches a fresh tree, then leaves a patched one alone."""
    tasks = yaml.safe_load((data_path("playbooks") / HOROVOD_TASKS).read_text())
    (step,) = [t for t in tasks if t["name"] == "Apply mpicluster's patches to Horovod"]
    script = step["ansible.builtin.shell"]["cmd"]
    with tarfile.open(pypi_sdist("horovod", "0.28.1")) as sdist:
        sdist.extractall(tmp_path, filter="data")
    tree = tmp_path / "horovod-0.28.1"
    patch = str(resolve("horovod", "0.28.1", None, None).patches[0].verified())

    def apply() -> str:
        done = subprocess.run(
            ["bash", "-c", script], cwd=tree, env={**os.environ, "PATCH": patch},
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        return done.stdout

    assert "already applied" not in apply()
    common = (tree / "horovod/common/common.h").read_text()
    assert "#include <stdexcept>" in common
    span = (tree / "third_party/flatbuffers/include/flatbuffers/stl_emulation.h").read_text()
    assert "count_ = other.count_;" not in span
    assert apply().strip() == "already applied"
    assert (tree / "horovod/common/common.h").read_text() == common  # not applied twice


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
