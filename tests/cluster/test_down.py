"""`mpicluster down` and `up` under faults on a real 3-node local cluster (install:
packages). Down: every file `up` touched is byte for byte as before `up`, on every node,
with users' lines kept; `up` works again after it; `down --node` takes one node out and
`up` adds it back; a node that cannot be reached is reported, and `down` run again
finishes it. Faults: a second `up` or `down` while one runs refuses at once; `up`
interrupted (Ctrl-C, `kill`) at several points leaves no playbook running, no lock and
no half-written file, and the next `up` succeeds; a node killed during the trust and
environment steps is named with its step while the others finish.

The source stack's part (the prefix, the dynamic linker's entry) is tested on the built
cluster at the end of test_stack_run.py.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from mpicluster.cluster.state import cluster_dir
from tests.cluster.nodes import (
    Started,
    half_written,
    playbooks_running,
    podman,
    podman_exec,
    stock,
    wait_for_ssh,
)
from tests.conftest import LocalCluster, inventory_with, mpicluster, start_local_cluster

pytestmark = pytest.mark.cluster

NAME, SUBNET = "pytest-down", "192.168.68.0/24"
NODES = ["node1", "node2", "node3"]
HOME = "/home/vagrant"
#: What users have before `up`: files without a final newline, a second key, a mode of
#: their own, an ssh config and a hosts line of their own.
SEED = rf"""
printf 'LANG="C.UTF-8"\nEDITOR=vi' > /etc/environment
printf '\nssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDummyKeyForTestsOnly000000000000000000 me' \
    >> {HOME}/.ssh/authorized_keys
chmod 644 {HOME}/.ssh/authorized_keys
printf 'Host github.com\n  User git' > {HOME}/.ssh/config
chown vagrant:vagrant {HOME}/.ssh/config && chmod 644 {HOME}/.ssh/config
echo '10.1.2.3 printer' >> /etc/hosts
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    generated = tmp_path_factory.mktemp("down") / "generated.yaml"
    mpicluster("local", "down", "--name", NAME, check=False)  # leftovers of a killed run
    yield start_local_cluster(NAME, len(NODES), SUBNET, generated)
    mpicluster("local", "down", "--name", NAME, check=False)


@pytest.fixture(scope="module")
def inventory(cluster) -> Path:
    return inventory_with(
        cluster.inventory, cluster.inventory.parent / "packages.yaml", stack={"install": "packages"}
    )


@pytest.fixture(scope="module")
def before(cluster, inventory) -> dict[str, dict]:
    """Every node's files as users had them before `up` ever ran."""
    podman_exec(cluster, "node1", SEED)
    return stock(cluster, inventory, NODES)


def run_json(*args: str) -> tuple[int, dict]:
    done = mpicluster(*args, "--json", check=False)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def up(inventory: Path) -> dict:
    code, result = run_json("up", str(inventory))
    assert code == 0, json.dumps(result, indent=1)[-4000:]
    assert result["smoke"]["ok"]
    return result


def keys_of_cluster(cluster: LocalCluster, node: str) -> str:
    return podman_exec(cluster, node, f"grep -h 'mpicluster:' {HOME}/.ssh/* || true").stdout


def test_down_gives_every_file_back_byte_for_byte(cluster, inventory, before):
    up(inventory)
    during = stock(cluster, inventory, NODES)
    for node in NODES:
        changed = {p for p in before[node] if before[node][p] != during[node].get(p)}
        assert {"/etc/environment", f"{HOME}/.ssh/authorized_keys", "/etc/mpicluster"} <= changed
    # a user's line added after up, outside the block: down keeps it
    podman_exec(cluster, "node3", "echo 'ADDED_AFTER_UP=1' >> /etc/environment")

    code, result = run_json("down", str(inventory))
    assert code == 0, result
    assert result["state"] == "removed"
    assert {h["status"] for h in result["hosts"].values()} == {"changed"}
    assert "/etc/environment" in result["hosts"]["node1"]["actions"]

    after = stock(cluster, inventory, NODES)
    environment = podman_exec(cluster, "node3", "cat /etc/environment").stdout
    assert environment.endswith("ADDED_AFTER_UP=1\n") and "mpicluster" not in environment
    after["node3"].pop("/etc/environment")
    expected = {node: dict(before[node]) for node in NODES}
    expected["node3"].pop("/etc/environment")
    assert after == expected
    for node in NODES:
        assert keys_of_cluster(cluster, node) == ""
        linker = podman_exec(cluster, node, "ldconfig -p; cat /etc/ld.so.conf.d/*").stdout
        assert "mpicluster" not in linker
    assert not cluster_dir(NAME).exists()


def test_down_node_takes_it_out_and_up_adds_it_back(cluster, inventory, before):
    podman_exec(cluster, "node3", "sed -i '/^ADDED_AFTER_UP=1$/d' /etc/environment")
    up(inventory)  # up after down
    code, result = run_json("down", str(inventory), "--nodes", "node3")
    assert code == 0, json.dumps(result, indent=1)[-4000:]
    rest = result["rest"]
    assert sorted(rest["hosts"]) == ["node1", "node2"] and rest["smoke"]["ok"]
    assert result["state"] == "kept" and cluster_dir(NAME).exists()
    assert stock(cluster, inventory, ["node3"])["node3"] == before["node3"]
    for node in ("node1", "node2"):
        hostfile = podman_exec(cluster, node, "cat /etc/mpicluster/hostfile").stdout
        assert "node3" not in hostfile and "node2" in hostfile
        known = podman_exec(cluster, node, "cat /etc/ssh/ssh_known_hosts").stdout
        assert "node3" not in known and "192.168.68.13" not in known
        trusted = keys_of_cluster(cluster, node)
        assert "192.168.68.13" not in trusted and "192.168.68.12" in trusted
        config = podman_exec(cluster, node, f"cat {HOME}/.ssh/config").stdout
        assert "node3" not in config
    # node3 can no longer log in to the others with the cluster key: it has none
    assert keys_of_cluster(cluster, "node3") == ""

    result = up(inventory)
    assert sorted(result["hosts"]) == NODES
    assert len(result["smoke"]["pairs"]) == 9


def test_a_node_down_cannot_reach_is_reported_and_down_again_finishes(cluster, inventory, before):
    podman(cluster, "node3", "stop", "-t", "1")
    try:
        code, result = run_json("down", str(inventory))
        assert code == 4, result
        assert result["hosts"]["node3"]["status"] == "unreachable"
        assert result["hosts"]["node1"]["status"] == "changed"
        assert result["state"] == "kept" and cluster_dir(NAME).exists()
    finally:
        podman(cluster, "node3", "start")
    wait_for_ssh(cluster, "node3")
    code, result = run_json("down", str(inventory))
    assert code == 0, result
    assert result["hosts"]["node1"]["changed"] == 0
    assert result["hosts"]["node3"]["status"] == "changed"
    assert result["state"] == "removed"
    after = stock(cluster, inventory, NODES)
    # Podman writes a restarted container's /etc/hosts itself
    after["node3"].pop("/etc/hosts")
    expected = {node: dict(before[node]) for node in NODES}
    expected["node3"].pop("/etc/hosts")
    assert after == expected
    code, result = run_json("down", str(inventory))
    assert code == 0
    assert {h["changed"] for h in result["hosts"].values()} == {0}  # nothing left to do


def test_down_node_not_in_the_inventory_is_one_line_and_touches_nothing(inventory):
    done = mpicluster("down", str(inventory), "--nodes", "node9", check=False)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: --nodes 'node9': no such node (one of: node1, node2, node3)"
    ]


#: (what `up` is doing, how it is stopped): Ctrl-C reaches the whole process group; a
#: `kill` reaches mpicluster alone, which must stop its playbook itself.
INTERRUPTIONS = [
    ("[ssh_mesh] Authorize the cluster key", signal.SIGINT, True),
    ("[node_environment] Add /etc/hosts entries", signal.SIGTERM, False),
    ("[hostfiles] Write the hostfiles", signal.SIGTERM, False),
    ("Smoke test: ssh env from every node", signal.SIGINT, True),  # and the allreduce
]


@pytest.mark.faults
def test_up_interrupted_at_several_points_leaves_nothing_half_done(cluster, inventory):
    """Also: while an `up` runs, a second `up` or `down` refuses at once."""
    assert mpicluster("down", str(inventory), check=False).returncode == 0
    for where, sig, group in INTERRUPTIONS:
        # --full: an earlier `up` of the loop may have finished (and left its record)
        run = Started("up", str(inventory), "--full")
        run.wait_for(where)
        if where == INTERRUPTIONS[0][0]:
            for command in ("up", "down"):
                started = time.monotonic()
                done = mpicluster(command, str(inventory), check=False)
                assert time.monotonic() - started < 15
                assert done.returncode == 1, done.stderr
                assert (
                    f"another mpicluster up or down is running for cluster {NAME} "
                    f"(pid {run.proc.pid}: mpicluster up)"
                ) in done.stderr
        run.interrupt(sig, group=group)
        assert run.finish(120) == 130, f"{where}: {run.stderr[-3000:]}"
        assert "interrupted" in run.stderr.splitlines()[-1]
        assert playbooks_running(NAME) == [], where
        for node in NODES:
            assert half_written(cluster, node) == [], (where, node)
    up_result = up(inventory)  # no lock left behind, and what was half done is finished
    assert len(up_result["smoke"]["pairs"]) == 9


@pytest.mark.faults
def test_a_node_killed_during_trust_and_environment_is_named_and_the_others_finish(
    cluster, inventory
):
    assert mpicluster("down", str(inventory), check=False).returncode == 0
    run = Started("up", str(inventory), "--json")
    run.wait_for("[ssh_mesh] Install the cluster's private key")
    podman(cluster, "node3", "kill")
    try:
        assert run.finish() == 4, run.stderr[-3000:]
        result = json.loads(run.stdout)
        dead = result["hosts"]["node3"]
        assert dead["status"] == "unreachable"
        stage = dead["failures"][0].split(":")[0]
        assert stage in ("ssh_mesh", "node_environment", "hostfiles"), dead
        for node in ("node1", "node2"):
            assert result["hosts"][node]["status"] == "changed", result["hosts"][node]
            hostfile = podman_exec(cluster, node, "cat /etc/mpicluster/hostfile").stdout
            assert "node3" in hostfile  # they went on to the end
        assert result["smoke"] is None
    finally:
        podman(cluster, "node3", "start")
    wait_for_ssh(cluster, "node3")
    assert half_written(cluster, "node3") == []
    result = up(inventory)
    assert result["hosts"]["node3"]["status"] == "changed"
    assert len(result["smoke"]["pairs"]) == 9
