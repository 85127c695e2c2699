"""The node's own health check (remote/health.py) as `up` installs it: the composed
program run on this machine's /usr/bin/python3, isolated (-I: no mpicluster, no
site-packages), on a record and a stack made here; and its judgement, doctor's judges
shipped with it, on facts recorded on a real H200 and doctored ones."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import pytest

from mpicluster import remote
from tests.shipped import load
from tests.unit.test_gpu_health import H200_XML, changed, health, probe  # noqa: F401
from tests.unit.test_stack_manifest import tree  # noqa: F401 (a fixture)

PYTHON = "/usr/bin/python3"
NODE = socket.gethostname()


def record(tmp_path: Path, prefix: Path, **node) -> Path:
    path = tmp_path / "health.json"
    entry = {"user": None, "gpus": 0, "slots": 2, **node}
    path.write_text(
        json.dumps(
            {
                "cluster": "t",
                "layout": {"prefix": str(prefix), "install": "source"},
                "gpus_present": True,
                "nodes": {NODE: entry, "other": {"user": None, "gpus": 0, "slots": 2}},
            }
        )
    )
    return path


def check(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    program = tmp_path / "mpicluster-health"
    program.write_text(f"#!{PYTHON}\n" + remote.script("health"))
    return subprocess.run(
        [PYTHON, "-I", str(program), *args], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.fixture
def prefix(tmp_path, tree):  # noqa: F811 (the fixture)
    """An install prefix whose active stack is `tree`, as `up` leaves it."""
    root = tmp_path / "opt"
    root.mkdir()
    (root / "current").symlink_to(tree)
    return root


def test_a_healthy_node_passes_in_well_under_a_second_on_the_nodes_python(tmp_path, prefix):
    config = record(tmp_path, prefix)
    done = check(tmp_path, "--config", str(config))
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    assert line.startswith(f"mpicluster-health: {NODE} healthy (disk, stack; ")
    found = json.loads(check(tmp_path, "--config", str(config), "--json").stdout)
    assert (found["schema"], found["node"], found["healthy"]) == (1, NODE, True)
    assert {f["check"]: f["status"] for f in found["findings"]} == {"stack": "pass", "disk": "pass"}
    assert found["seconds"] < 1.0


def test_a_damaged_stack_makes_the_node_unhealthy_in_nhc_lines(tmp_path, prefix, tree):  # noqa: F811
    (tree / "bin/prted").chmod(0o700)
    done = check(tmp_path, "--config", str(record(tmp_path, prefix)))
    assert done.returncode == 1
    error, fix, state = done.stdout.splitlines()
    assert error.startswith(f"ERROR: mpicluster-health: stack: {tree}: 1 changed of 10 files")
    assert "bin/prted changed (mode (0700, was 0755))" in error
    assert fix.startswith("  fix: run `mpicluster up`: it installs")
    assert state.startswith(f"mpicluster-health: {NODE} UNHEALTHY (disk, stack; ")


def test_what_it_cannot_judge_is_one_line_and_exit_2(tmp_path, prefix):
    config = record(tmp_path, prefix)
    missing = check(tmp_path, "--config", str(tmp_path / "none.json"))
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.startswith("mpicluster-health: no record of the cluster at ")
    assert len(missing.stderr.splitlines()) == 1
    other = check(tmp_path, "--config", str(config), "--node", "node9")
    assert (other.returncode, other.stderr) == (
        2,
        "mpicluster-health: --node node9: not a node of cluster t\n",
    )
    odd = check(tmp_path, "--config", str(config), "--fast")
    assert odd.returncode == 2 and "unknown argument '--fast'" in odd.stderr
    named = check(tmp_path, "--config", str(config), "--node", "other", "--json")
    assert json.loads(named.stdout)["node"] == "other"


@pytest.fixture(scope="module")
def program():
    return load("health")


def gpu_facts(probe, xml: str = H200_XML, count: int = 1, **parts) -> dict:  # noqa: F811
    return {
        "env": {"USER": "mpi"},
        "disk": {},
        "gpus": {"ok": True, "count": count},
        "gpu_health": health(probe, xml, **parts),
    }


GPU_RECORD = {
    "cluster": "g",
    "layout": {"prefix": "/opt/mpicluster", "install": "packages"},
    "nodes": {"g1": {"user": "mpi", "gpus": 1, "slots": 1}},
}


def findings(program, facts: dict) -> list[tuple[str, str, str]]:
    found = program.judge(GPU_RECORD, "g1", facts)
    return [(check, str(r.status), r.evidence) for check, r in found if r.status != "pass"]


def test_the_recorded_h200_is_healthy_and_a_doctored_one_is_not(program, probe):  # noqa: F811
    assert findings(program, gpu_facts(probe)) == []
    xid = {"xid": 79, "bus": "0000:00:06", "age_s": 30, "text": "fallen off the bus"}
    ((check, status, evidence),) = findings(program, gpu_facts(probe, xids=[xid]))
    assert (check, status) == ("gpus", "fail")
    assert "Xid 79 30 s ago: the GPU has fallen off the bus" in evidence
    pending = changed(remapped_rows__remapped_row_pending="Yes")
    ((check, status, evidence),) = findings(program, gpu_facts(probe, pending))
    assert (check, status) == ("gpus", "fail") and "row remap" in evidence
    ((check, status, evidence),) = findings(program, gpu_facts(probe, count=0))
    assert (check, status) == ("gpus", "fail")
    assert evidence == "nvidia-smi shows 0 GPUs on g1, the inventory says 1"


def test_a_doctored_h200_is_drained_with_its_finding_as_the_reason(program, probe):  # noqa: F811
    """The node's result as Slurm's step reads it: an Xid 79, or a pending row remap, on
    the recorded H200 is a drain whose reason is that finding."""
    from mpicluster.health.drain_rules import SlurmNode, decide, reason_of

    xid = {"xid": 79, "bus": "0000:00:06", "age_s": 30, "text": "fallen off the bus"}
    pending = changed(remapped_rows__remapped_row_pending="Yes")
    for facts, said in (
        (gpu_facts(probe, xids=[xid]), "Xid 79 30 s ago: the GPU has fallen off the bus"),
        (gpu_facts(probe, pending), "a row remap or page retirement waits for a GPU reset"),
    ):
        result = program.report(GPU_RECORD, "g1", program.judge(GPU_RECORD, "g1", facts), 0.1)
        first = program.first_failure(result)
        reason = reason_of(first["check"], first["evidence"])
        step = decide(result["healthy"], reason, SlurmNode(frozenset({"IDLE"})), None, nodes=4)
        assert step.action == "drain"
        assert reason.startswith("mpicluster: gpus: g1 GPU 0 (00000000:00:06.0")
        assert said in reason
    healthy = program.report(GPU_RECORD, "g1", program.judge(GPU_RECORD, "g1", gpu_facts(probe)), 0)
    assert healthy["healthy"] and program.first_failure(healthy) is None
