"""The node's own health check as `up` installs it on the cluster the session built from
source (tests/cluster/conftest.py's `build`): healthy on every node as root and as the
MPI user; then one break at a time on node2, each named by the check in NHC's manner
and gone once undone (the same judges doctor uses: tests/unit/test_node_health.py);
then node2 cordoned and returned, by hand and by `doctor --cordon`.

Named to run after test_stack_build.py, whose tests need the cluster as `local up`
left it (pytest runs the modules in name order); its `ready` runs `up` first.
"""

from __future__ import annotations

import json
import shlex

import pytest

from tests.cluster.conftest import PREFIX
from tests.conftest import mpicluster

pytestmark = pytest.mark.cluster

HEALTH = "/usr/local/sbin/mpicluster-health"
BROKEN = "node2"


def health(ready, node: str, *args: str, root: bool = True):
    command = shlex.join([HEALTH, *args])
    return ready["cluster"].ssh(node, f"sudo {command}" if root else command, check=False)


#: What the node's check judges on a CPU node of a source-built stack.
CHECKS = {"stack", "disk", "ssh", "env", "rank", "limits"}


def test_every_node_is_healthy_as_root_and_as_the_mpi_user(ready):
    for node in ready["nodes"]:
        for root in (True, False):
            done = health(ready, node, "--json", root=root)
            assert done.returncode == 0, done.stdout + done.stderr
            found = json.loads(done.stdout)
            assert (found["node"], found["healthy"]) == (node, True)
            assert {f["check"] for f in found["findings"]} == CHECKS, found
            assert {f["status"] for f in found["findings"]} == {"pass"}, found
            assert found["seconds"] < 5


def nodes(ready, *args: str) -> tuple[int, dict]:
    done = mpicluster("nodes", str(ready["inventory"]), "--json", *args, check=False)
    assert done.returncode in (0, 5), done.stderr  # 5: a node is not ready
    return done.returncode, json.loads(done.stdout)


def states(report: dict) -> dict[str, str]:
    return {node["name"]: node["state"] for node in report["nodes"]}


def test_tmp_that_the_mpi_user_cannot_write_makes_the_node_unhealthy(ready):
    cluster = ready["cluster"]
    code, report = nodes(ready, "--check")
    assert (code, set(states(report).values())) == (0, {"ready"}), report
    cluster.ssh(BROKEN, "sudo chmod 0755 /tmp")
    try:
        done = health(ready, BROKEN)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "ERROR: mpicluster-health: disk: /tmp is not writable by vagrant (mode 0755, " in (
            done.stdout
        )
        assert f"mpicluster-health: {BROKEN} UNHEALTHY" in done.stdout.splitlines()[-1]
        assert health(ready, "node1").returncode == 0
        # `nodes` shows the result the run as root kept, and when
        code, report = nodes(ready)
        assert code == 5 and states(report)[BROKEN] == "unhealthy"
        (broken,) = [n for n in report["nodes"] if n["name"] == BROKEN]
        assert broken["finding"]["check"] == "disk" and broken["checked_at"]
        assert "/tmp is not writable" in broken["finding"]["evidence"]
    finally:
        cluster.ssh(BROKEN, "sudo chmod 1777 /tmp")
    assert health(ready, BROKEN).returncode == 0
    code, report = nodes(ready, "--check")
    assert (code, states(report)[BROKEN]) == (0, "ready")


def test_a_damaged_stack_makes_the_node_unhealthy(ready):
    cluster = ready["cluster"]
    mpirun = f"{PREFIX}/current/bin/mpirun"
    mode = cluster.ssh(BROKEN, f"stat -L -c %a {mpirun}").stdout.strip()
    cluster.ssh(BROKEN, f"sudo chmod 0700 {mpirun}")
    try:
        done = health(ready, BROKEN)
        assert done.returncode == 1, done.stdout + done.stderr
        (error,) = [line for line in done.stdout.splitlines() if line.startswith("ERROR")]
        assert error.startswith("ERROR: mpicluster-health: stack: ")
        assert f"bin/mpirun changed (mode (0700, was 0{mode}))" in error
    finally:
        cluster.ssh(BROKEN, f"sudo chmod {mode} {mpirun}")
    assert health(ready, BROKEN).returncode == 0


def test_a_nearly_full_dev_shm_makes_the_node_unhealthy(ready):
    cluster = ready["cluster"]
    free = int(cluster.ssh(BROKEN, "df --output=avail -B1 /dev/shm | tail -1").stdout)
    fill = free - (4 << 20)  # 4 MiB left: below the 8 MiB Open MPI and NCCL need at least
    cluster.ssh(BROKEN, f"sudo fallocate -l {fill} /dev/shm/mpicluster-test-fill")
    try:
        done = health(ready, BROKEN)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "ERROR: mpicluster-health: disk: /dev/shm: " in done.stdout
    finally:
        cluster.ssh(BROKEN, "sudo rm -f /dev/shm/mpicluster-test-fill")
    assert health(ready, BROKEN).returncode == 0


def hostfile_hosts(ready) -> dict[str, list[str]]:
    """Each node's /etc/mpicluster/hostfile, as the hosts it lists."""
    found = {}
    for node in ready["nodes"]:
        text = ready["cluster"].ssh(node, "cat /etc/mpicluster/hostfile").stdout
        found[node] = [line.split()[0] for line in text.splitlines() if line.strip()]
    return found


def test_a_cordoned_node_is_left_out_of_hostfiles_run_and_up_until_returned(ready):
    inventory, nodes_ = str(ready["inventory"]), ready["nodes"]
    rest = [n for n in nodes_ if n != BROKEN]
    bad = mpicluster("cordon", inventory, "node9", "--reason", "x", check=False)
    # the nodes of the inventory now (test_stack_build.py added node4 to it)
    assert bad.returncode == 2 and f"'node9': no such node (one of: {', '.join(nodes_)})" in (
        bad.stderr
    )
    two = mpicluster("cordon", inventory, BROKEN, "--reason", "a\nb", check=False)
    assert two.returncode == 2 and "one line of text" in two.stderr
    done = mpicluster("cordon", inventory, BROKEN, "--reason", "disk errors (test)")
    assert f"{BROKEN} cordoned (disk errors (test))" in done.stdout
    try:
        assert hostfile_hosts(ready) == dict.fromkeys(nodes_, rest)
        code, report = nodes(ready)
        assert states(report)[BROKEN] == "cordoned" and code == 5
        (entry,) = [n for n in report["nodes"] if n["name"] == BROKEN]
        assert (entry["cordon"]["reason"], entry["cordon"]["by"]) == (
            "disk errors (test)",
            "operator",
        )
        ran = mpicluster("run", inventory, "--", "hostname", check=False)
        assert ran.returncode == 0, ran.stderr
        assert sorted(ran.stdout.split()) == sorted(rest)
        assert f"{BROKEN} is cordoned (disk errors (test); by operator): left out" in ran.stderr
        named = mpicluster("run", inventory, "--nodes", BROKEN, "--", "hostname", check=False)
        assert named.returncode == 2 and "`mpicluster uncordon` returns it" in named.stderr
        # up keeps it out: the hostfiles, and the smoke test
        up = mpicluster("up", inventory, timeout=1800)
        assert f"{BROKEN} is cordoned (disk errors (test); by operator): left out of the smoke" in (
            up.stderr + up.stdout
        )
        assert hostfile_hosts(ready) == dict.fromkeys(nodes_, rest)
    finally:
        back = mpicluster("uncordon", inventory, BROKEN)
    assert f"{BROKEN} returned" in back.stdout
    assert hostfile_hosts(ready) == dict.fromkeys(nodes_, nodes_)
    ran = mpicluster("run", inventory, "--", "hostname")
    assert sorted(ran.stdout.split()) == sorted(nodes_)
    again = mpicluster("uncordon", inventory, BROKEN)
    assert f"{BROKEN} is not cordoned" in again.stdout


#: The checks `doctor --cordon` runs here: the break (disk), and every node's hostfiles
#: as the cordon wrote them (hostfile), in seconds.
CORDON_CHECKS = ("--check", "ssh", "--check", "disk", "--check", "hostfile")


def doctor_cordon(ready) -> tuple[int, dict]:
    done = mpicluster(
        "doctor", str(ready["inventory"]), "--json", "--cordon", *CORDON_CHECKS, check=False
    )
    assert done.returncode in (0, 5, 6), done.stderr
    return done.returncode, json.loads(done.stdout)


def test_doctor_cordon_cordons_the_node_it_fails_and_returns_it_once_it_passes(ready):
    cluster, inventory, nodes_ = ready["cluster"], str(ready["inventory"]), ready["nodes"]
    rest = [n for n in nodes_ if n != BROKEN]
    code, report = doctor_cordon(ready)
    assert code in (0, 6) and report["cordons"]["cordoned"] == {}, report  # healthy: none
    try:
        cluster.ssh(BROKEN, "sudo chmod 0755 /tmp")
        try:
            code, report = doctor_cordon(ready)
            assert code == 5, report  # the report's exit code, cordoning or not
            (reason,) = report["cordons"]["cordoned"].values()
            assert list(report["cordons"]["cordoned"]) == [BROKEN], report["cordons"]
            assert reason.startswith("doctor: disk: /tmp is not writable by vagrant (mode 0755")
            assert sorted(report["cordons"]["written"]) == sorted(nodes_)
            _, states_now = nodes(ready)
            (entry,) = [n for n in states_now["nodes"] if n["name"] == BROKEN]
            assert (entry["state"], entry["cordon"]["by"]) == ("cordoned", "doctor")
            assert entry["cordon"]["reason"] == reason
            assert hostfile_hosts(ready) == dict.fromkeys(nodes_, rest)
            ran = mpicluster("run", inventory, "--", "hostname", check=False)
            assert ran.returncode == 0, ran.stderr
            assert sorted(ran.stdout.split()) == sorted(rest)
            assert f"{BROKEN} is cordoned (doctor: disk: " in ran.stderr
            # still broken: it stays cordoned, nothing else changes
            code, report = doctor_cordon(ready)
            assert code == 5 and not report["cordons"]["cordoned"], report["cordons"]
            assert not report["cordons"]["returned"]
        finally:
            cluster.ssh(BROKEN, "sudo chmod 1777 /tmp")
        code, report = doctor_cordon(ready)
        assert code in (0, 6) and report["cordons"]["returned"] == [BROKEN], report
        assert hostfile_hosts(ready) == dict.fromkeys(nodes_, nodes_)
        ran = mpicluster("run", inventory, "--", "hostname")
        assert sorted(ran.stdout.split()) == sorted(nodes_)
    finally:
        # whatever failed above: the node back in jobs for the modules after this one
        mpicluster("uncordon", inventory, BROKEN, check=False)
