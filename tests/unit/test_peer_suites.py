"""The runner of the peers' own suites (tests/peer_suites.py): its pins, what it leaves
out at which world size, and its reading of real JUnit XML written by a real pytest."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mpicluster.cluster.lockfile import LockfileError, Url, suite_files
from tests import peer_suites


def test_the_horovod_suite_is_pinned_file_by_file_at_its_tag():
    files = suite_files("horovod", "0.28.1")
    assert set(files) == {"test/parallel/test_torch.py", "test/utils/common.py", "test/conftest.py"}
    for path, source in files.items():
        assert isinstance(source.origin, Url)
        assert source.url.endswith(f"/horovod/horovod/v0.28.1/{path}")
        assert len(source.sha256) == 64 and int(source.sha256, 16) >= 0
    assert len({s.filename for s in files.values()}) == 3  # one cache name each
    with pytest.raises(LockfileError, match=r"no pinned test suite for horovod 0\.27\.0"):
        suite_files("horovod", "0.27.0")


def test_what_is_left_out_depends_on_the_world_size():
    def names(size: int) -> set[str]:
        return {entry.test for entry in peer_suites.left_out(size)}

    muon = {"test_broadcast_state", "test_broadcast_state_options", "test_force_allreduce"}
    assert names(2) == muon  # Horovod's own CI shape: only PyTorch's newer optimizer
    assert "test_horovod_broadcast_grad_process_sets" in names(3)
    assert "test_horovod_broadcast_grad_process_sets" not in names(6)  # equal sets, no drift
    assert "test_horovod_join_allgather" in names(6)  # any 3+ ranks: names drift
    assert "test_horovod_reducescatter_prescale" in names(3)  # threshold 0 up to 3 ranks
    assert "test_horovod_reducescatter_prescale" in names(6)  # float16 against 1e-4 at 6
    assert "test_horovod_join_allreduce" not in names(6)  # threshold 0 only up to 3
    for entry in peer_suites.HOROVOD_LEFT_OUT:
        assert len(entry.why) > 30, entry.test  # every one says why


def test_the_command_deselects_exactly_those_tests():
    command = peer_suites.pytest_command(3)
    deselected = [word for word in command if word.startswith("--leave-out=")]
    assert len(deselected) == len(peer_suites.left_out(3))
    assert f"--leave-out={peer_suites.CASE}test_horovod_join_allgather" in deselected
    assert command[:5] == ["python", "-m", "pytest", "-p", "mpicluster_suite"]


SUITE = """
import pytest

def test_fine():
    pass

def test_broken():
    assert 1 == 2, "one is not two"

def test_elsewhere():
    pytest.skip("needs a GPU")
"""


def junit(tmp_path: Path, text: str, name: str) -> Path:
    """A real JUnit XML from a real pytest run of `text`."""
    (tmp_path / "test_it.py").write_text(text)
    xml = tmp_path / name
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junit-xml={xml}"],
        cwd=tmp_path,
        capture_output=True,
        check=False,
    )
    return xml


def test_a_ranks_junit_is_read_and_a_new_failure_is_named_a_regression(tmp_path):
    outcome = peer_suites.read_junit(junit(tmp_path, SUITE, "now.xml"))
    assert outcome.passed == ["test_it.test_fine"]
    assert "one is not two" in outcome.failed["test_it.test_broken"]
    assert outcome.skipped == {"test_it.test_elsewhere": "needs a GPU"}

    before, now = tmp_path / "fp-old", tmp_path / "fp-new"
    before.mkdir()
    now.mkdir()
    fixed = SUITE.replace("1 == 2", "1 == 1")
    junit(tmp_path, fixed, "fp-old/rank-0.xml")
    junit(tmp_path, SUITE, "fp-new/rank-0.xml")
    assert peer_suites.regressions(before, now) == ["test_it.test_broken"]
    assert peer_suites.regressions(now, before) == []
    assert peer_suites.regressions(tmp_path / "never", now) == []

    # kept as suites/<fingerprint>/<shape>: a new stack's run names what an earlier broke
    suites = tmp_path / "suites"
    for fingerprint, folder in (("aaa", before), ("bbb", now)):
        (suites / fingerprint).mkdir(parents=True)
        folder.rename(suites / fingerprint / "horovod-3x1")
    found = peer_suites.earlier_regressions(suites / "bbb" / "horovod-3x1")
    assert found == {"aaa": ["test_it.test_broken"]}
    assert peer_suites.earlier_regressions(suites / "aaa" / "horovod-3x1") == {}


def test_the_runners_plugin_leaves_out_exactly_the_test_named_and_writes_each_ranks_xml(
    tmp_path,
):
    """pytest's --deselect takes every id starting with the one given; --leave-out only it."""
    (tmp_path / "mpicluster_suite.py").write_text(peer_suites.PLUGIN)
    (tmp_path / "test_it.py").write_text("def test_a():\n    pass\n\ndef test_a_b():\n    pass\n")
    pytest_run = [sys.executable, "-m", "pytest", "-q", "-p", "mpicluster_suite"]
    done = subprocess.run(
        [*pytest_run, "-p", "no:cacheprovider", "--leave-out=test_it.py::test_a", "test_it.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path), "OMPI_COMM_WORLD_RANK": "4"},
    )
    assert "1 passed, 1 deselected" in done.stdout, done.stdout + done.stderr
    outcome = peer_suites.read_junit(tmp_path / "results" / "rank-4.xml")
    assert outcome.passed == ["test_it.test_a_b"]
    log = (tmp_path / "results" / "rank-4.log").read_text()
    assert "start test_it.py::test_a_b" in log and "call passed test_it.py::test_a_b" in log
