"""`mpicluster run --setup` and `--collect` on the session's 3-node local cluster
(Debian's Open MPI: install = packages): a setup on every node before the job, one that
fails on one node and stops the job before any rank starts, and a failing job's files
brought back from every node (and from the head only)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, inventory_with, mpicluster

pytestmark = pytest.mark.cluster

NODES = ["node1", "node2", "node3"]


@pytest.fixture(scope="module")
def inventory(cluster, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("steps") / "packages.yaml"
    inventory_with(cluster.inventory, path, stack={"install": "packages"})
    mpicluster("up", str(path), timeout=900)
    return path


def run(inventory: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mpicluster", "run", str(inventory), "--json", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        check=False,
    )


def test_setup_runs_on_every_node_before_the_job(cluster, inventory):
    for node in NODES:
        cluster.ssh(node, "rm -f setup-was-here")
    done = run(
        inventory,
        "--setup",
        "hostname > setup-was-here && echo ready on $(hostname)",
        "--",
        "cat",
        "setup-was-here",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for node in NODES:
        assert f"[{node}] ready on {node}" in done.stderr
    result = json.loads(done.stdout)
    assert result["ok"] and result["ranks"] >= 3
    # every rank read what the setup wrote on its own node, before it started (with
    # --json the job's lines go to stderr)
    read = {line for line in done.stderr.splitlines() if line in NODES}
    assert read == set(NODES), done.stderr[-2000:]


def test_a_setup_failing_on_one_node_stops_the_job_before_any_rank(cluster, inventory):
    for node in NODES:
        cluster.ssh(node, "rm -f job-ran")
    done = run(
        inventory,
        "--setup",
        'test "$(hostname)" != node2 || { echo "no dataset here" >&2; exit 3; }',
        "--",
        "touch",
        "job-ran",
    )
    assert done.returncode == 3, done.stderr[-3000:]
    result = json.loads(done.stdout)
    assert (result["ok"], result["setup"]["failed"]) == (False, ["node2"]), result
    assert result["setup"]["exits"] == {"node1": 0, "node2": 3, "node3": 0}
    assert "[node2] no dataset here" in done.stderr
    for node in NODES:  # no rank started anywhere
        assert cluster.ssh(node, "test -e job-ran", check=False).returncode == 1, node


def test_collect_brings_back_every_nodes_files_after_a_failing_job(cluster, inventory):
    for node in NODES:
        cluster.ssh(node, "rm -rf out")
    # every rank writes its node's log; node2's fails after the others have written
    program = (
        'mkdir -p out && echo "log of $(hostname)" > out/log.txt && '
        'if [ "$(hostname)" = node2 ]; then sleep 2; exit 7; fi'
    )
    done = run(inventory, "--collect", "out", "--", "sh", "-c", program)
    result = json.loads(done.stdout)
    try:
        assert done.returncode != 0 and not result["ok"], done.stderr[-3000:]
        collected = result["collect"]
        into = Path(collected["into"])
        assert into.name == result["job_id"] and into.parent.name == "jobs"
        for node in NODES:
            assert collected["nodes"][node]["ok"], collected
            assert (into / node / "out" / "log.txt").read_text() == f"log of {node}\n"
        # rank 0's node only; a path that is not there is said, not an error
        done = run(inventory, "--collect", "out", "--collect-from", "head", "--", "true")
        head = json.loads(done.stdout)
        assert done.returncode == 0, done.stderr[-3000:]
        assert list(head["collect"]["nodes"]) == ["node1"]
        assert (Path(head["collect"]["into"]) / "node1" / "out" / "log.txt").is_file()
        done = run(inventory, "--collect", "nothing-here", "--", "true")
        gone = json.loads(done.stdout)["collect"]["nodes"]
        assert done.returncode == 0 and all(n["missing"] for n in gone.values()), gone
    finally:
        shutil.rmtree(Path(result["collect"]["into"]).parent, ignore_errors=True)
