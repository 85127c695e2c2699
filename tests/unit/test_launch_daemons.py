"""A stopped launch's daemons on the other nodes are ended by the launch's own node
(mpicluster/remote/launch_proof_node.py): the name PRRTE gives them, and the shell line
that ends them, run here against real processes. The whole path (a node dropping the
launcher's port, doctor, then no prted left there) is tests/cluster/test_stack_build.py's
dropping-firewall test."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mpicluster.remote import launch_proof_node as node

#: A remote daemon's command line as Open MPI 5.0.8's prterun (pid 22369 on host `vm`)
#: started it, read from ps (its ssh agent replaced by a script that kept the line).
PRTED = (
    "/tmp/ompi5/bin/prted --prtemca ess env --prtemca ess_base_nspace prterun-vm-22369@0 "
    "--prtemca ess_base_vpid 2 --prtemca ess_base_num_procs 3 --prtemca prte_hnp_uri "
    "prterun-vm-22369@0.0;tcp://192.0.2.2,192.168.79.1:48889:64,24,24 --prtemca plm ssh "
    "--tree-spawn"
)


def matches(pattern: str, line: str) -> bool:
    return re.search(pattern, line) is not None


def test_the_pattern_names_the_launcher_s_daemons_and_no_other():
    pattern = node.daemons_pattern([22368, 22369], "vm")
    assert matches(pattern, PRTED)
    assert matches(node.daemons_pattern([22369], "vm.example.org"), PRTED)
    fqdn = PRTED.replace("-vm-", "-vm.example.org-")
    assert matches(node.daemons_pattern([22369], "vm"), fqdn)
    assert not matches(node.daemons_pattern([2236], "vm"), PRTED)
    assert not matches(node.daemons_pattern([22369], "v"), PRTED)
    assert not matches(node.daemons_pattern([22369], "node1"), PRTED)
    # a rank, or the login shell that runs pkill with the pattern in its own line
    assert not matches(pattern, "python3 -c ... prterun-vm-22369@1")
    assert not matches(pattern, node.kill_line(pattern))


def test_no_pattern_without_a_launcher_or_for_a_name_a_regex_could_hold():
    assert node.daemons_pattern([], "vm") is None
    assert node.daemons_pattern([1], "vm'; reboot; '") is None
    assert node.daemons_pattern([1], "") is None


@pytest.fixture
def daemon(tmp_path: Path):
    """A process whose command line is a prted's of launcher 4242 on host `nodeA`."""
    program = tmp_path / "prted"
    program.write_text("import time\ntime.sleep(60)\n")
    started = []

    def start(launcher: int) -> subprocess.Popen:
        nspace = f"prterun-nodeA-{launcher}@0"
        child = subprocess.Popen(
            [sys.executable, str(program), "--prtemca", "ess_base_nspace", nspace]
        )
        started.append(child)
        return child

    yield start
    for child in started:
        child.kill()
        child.wait()


def test_the_kill_line_ends_the_launcher_s_daemon_and_leaves_another_s(daemon):
    ours, theirs = daemon(4242), daemon(4243)
    time.sleep(0.3)
    line = node.kill_line(node.daemons_pattern([4241, 4242], "nodeA"))
    done = subprocess.run(["sh", "-c", line], timeout=10)
    assert done.returncode == 0
    assert ours.wait(5) == -15  # SIGTERM
    assert theirs.poll() is None
    # nothing to end: the line still succeeds at once
    started = time.monotonic()
    assert subprocess.run(["sh", "-c", line], timeout=10).returncode == 0
    assert time.monotonic() - started < 1.0


def test_ending_daemons_waits_no_longer_than_its_limit(monkeypatch, tmp_path: Path):
    """A host whose ssh never answers costs CLEANUP seconds at most, and its ssh is
    ended (here `sleep` stands in for an ssh that hangs: its arguments are ignored)."""
    slow = tmp_path / "ssh"
    slow.write_text("#!/bin/sh\nexec sleep 30\n")
    slow.chmod(0o755)
    monkeypatch.setattr(node, "CLEANUP", 0.5)
    started = time.monotonic()
    node.end_daemons(["nodeB", "nodeC"], [4242], "nodeA", ssh=(str(slow),))
    assert time.monotonic() - started < 3.0
