"""The cluster's users on the real 3-node local cluster (Debian's Open MPI): `up` makes
alice and bob the same on every node, each logs in to every node from the control
machine with her own key, runs `mpirun` across the three nodes through her own mesh, and
cannot log in as the other or as the MPI user, nor read the other's home or the MPI
user's keys (each refusal beside its owner's success, so a refusal is not a broken
setup). Her node keys never leave the nodes and are never logged. doctor's users check
finds them alike and names a home opened to others.

Runs after test_up.py on the session's cluster (pytest runs modules in name order)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from mpicluster.cluster.inventory import load_inventory
from mpicluster.cluster.state import cluster_dir
from tests.conftest import inventory_with, mpicluster

pytestmark = pytest.mark.cluster

NODES = ["node1", "node2", "node3"]
BOB_UID = 2345


@pytest.fixture(scope="module")
def people(cluster, tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("users")
    keys = {}
    for name in ("alice", "bob"):
        key = folder / name
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{name}@laptop", "-f", str(key)],
            check=True,
        )
        keys[name] = key
    users = [
        {"name": "alice", "keys": [str(keys["alice"]) + ".pub"]},
        {
            "name": "bob",
            "uid": BOB_UID,
            "keys": [(folder / "bob.pub").read_text().strip()],
            "groups": ["video"],
            "sudo": True,
        },
    ]
    inventory = inventory_with(
        cluster.inventory, folder / "users.yaml", stack={"install": "packages"}, users=users
    )
    done = mpicluster("up", str(inventory), "--json", check=False)
    result = json.loads(done.stdout)
    assert done.returncode == 0, (done.stderr[-4000:], result.get("hosts"))
    return {"inventory": inventory, "first": inventory, "keys": keys, "result": result}


def login(people, node: str, user: str, command: str, *, key: str | None = None):
    """ssh from the control machine to `node` as `user` with `key`'s private half (the
    user's own by default), host keys checked against the cluster's known_hosts."""
    inv = load_inventory(people["inventory"])
    target = next(n for n in inv.nodes if n.name == node)
    ssh = inv.node_ssh(target)
    argv = [
        "ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
        "-o", f"UserKnownHostsFile={ssh.known_hosts}", "-o", "IdentitiesOnly=yes",
        "-o", "ControlMaster=no", "-i", str(people["keys"][key or user]),
        "-p", str(ssh.port), f"{user}@{ssh.host}", command,
    ]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def test_each_user_logs_in_to_every_node_with_her_key_and_the_same_ids(people):
    ids = {}
    for user in ("alice", "bob"):
        for node in NODES:
            done = login(people, node, user, "id -u; id -g; id -Gn; stat -c %a ~")
            assert done.returncode == 0, (user, node, done.stderr)
            ids[user, node] = done.stdout.split("\n")
    for user in ("alice", "bob"):
        seen = {tuple(ids[user, node][:2]) for node in NODES}
        assert len(seen) == 1, (user, seen)
        assert all(ids[user, node][3] == "700" for node in NODES)
    assert ids["bob", "node1"][:2] == [str(BOB_UID), str(BOB_UID)]
    assert "video" in ids["bob", "node1"][2].split()
    assert int(ids["alice", "node1"][0]) >= 2000


def test_each_users_mpirun_spans_the_nodes_through_her_own_mesh(people):
    for user in ("alice", "bob"):
        done = login(
            people,
            "node1",
            user,
            "mpirun -np 3 --host node1,node2,node3 hostname && ls ~/.ssh",
        )
        assert done.returncode == 0, (user, done.stderr[-2000:])
        lines = done.stdout.split()
        assert sorted(lines[:3]) == NODES, (user, done.stdout)
        assert "mpicluster_pytest" in lines and "mpicluster_pytest.pub" in lines


def test_a_user_cannot_log_in_as_another_or_as_the_mpi_user(people):
    mpi_user = (
        load_inventory(people["inventory"])
        .node_ssh(load_inventory(people["inventory"]).nodes[0])
        .user
    )
    for node in NODES:
        assert login(people, node, "bob", "true", key="alice").returncode == 255
        assert login(people, node, "alice", "true", key="bob").returncode == 255
        assert login(people, node, mpi_user, "true", key="alice").returncode == 255
    # her own node key does not open bob's account either, node to node
    across = login(people, "node1", "alice", "ssh -o BatchMode=yes bob@node2 true; echo exit=$?")
    assert "exit=255" in across.stdout, across


def test_a_user_cannot_read_another_home_nor_the_mpi_users_keys(people, cluster):
    mpi_home = cluster.ssh("node1", "echo ~").stdout.strip()
    for path in ("/home/bob", f"{mpi_home}/.ssh/mpicluster_pytest"):
        refused = login(people, "node2", "alice", f"ls {path} >/dev/null && cat {path}")
        assert refused.returncode != 0 and "Permission denied" in refused.stderr, refused
    assert login(people, "node2", "bob", "ls /home/bob/.ssh").returncode == 0
    assert cluster.ssh("node2", f"cat {mpi_home}/.ssh/mpicluster_pytest >/dev/null").returncode == 0


def test_a_user_cannot_signal_anothers_processes_and_sudo_is_only_where_given(people):
    started = login(people, "node2", "alice", "sleep 300 >/dev/null 2>&1 </dev/null & echo $!")
    pid = started.stdout.strip()
    assert started.returncode == 0 and pid.isdigit(), started
    try:
        refused = login(people, "node2", "bob", f"kill {pid}")
        assert refused.returncode != 0 and "Operation not permitted" in refused.stderr, refused
        assert login(people, "node2", "alice", f"kill -0 {pid}").returncode == 0  # still running
    finally:
        assert login(people, "node2", "alice", f"kill {pid}").returncode == 0
    for node in NODES:  # bob has `sudo: true`, alice not
        assert login(people, node, "bob", "sudo -n true").returncode == 0, node
        denied = login(people, node, "alice", "sudo -n true")
        assert denied.returncode == 1 and "password is required" in denied.stderr, denied


def test_her_node_keys_stay_on_the_nodes_theirs_alone_and_unlogged(people, cluster):
    publics, secrets = {}, {}
    key = "/home/alice/.ssh/mpicluster_pytest"
    for node in NODES:
        owner = cluster.ssh(node, f"sudo stat -c '%U %a' {key}").stdout.strip()
        assert owner == "alice 600", (node, owner)
        publics[node] = cluster.ssh(node, f"sudo cat {key}.pub").stdout.split()[1]
        # the private half's body past its common header (never shown by an assertion)
        body = cluster.ssh(node, f"sudo sed '1,2d;$d' {key}").stdout
        secrets[node] = "".join(body.split())[:48]
    assert len(set(publics.values())) == 3  # one key per node, made there
    logged = "".join(
        p.read_text(errors="replace")
        for p in (cluster_dir("pytest") / "runs").rglob("*")
        if p.is_file()
    )
    leaked = [node for node, secret in secrets.items() if len(secret) == 48 and secret in logged]
    assert all(len(secret) == 48 for secret in secrets.values())
    assert leaked == [], "a node key's private half is in up's run logs"
    state = "".join(p.name for p in cluster_dir("pytest").rglob("*"))
    assert "alice" not in state


def test_a_second_full_up_changes_nothing(people):
    done = mpicluster("up", str(people["inventory"]), "--json", "--full", "--no-smoke")
    result = json.loads(done.stdout)
    assert {n: h["changed"] for n, h in result["hosts"].items()} == dict.fromkeys(NODES, 0)


def doctor_users(people) -> dict:
    """doctor's users check alone, from its JSON report."""
    done = mpicluster("doctor", str(people["inventory"]), "--check", "users", "--json", check=False)
    (found,) = json.loads(done.stdout)["checks"]
    return found


def test_doctor_finds_the_users_alike_and_names_a_home_opened_to_others(people, cluster):
    found = doctor_users(people)
    assert found["status"] == "pass", found
    assert [r["node"] for r in found["results"]] == [*NODES, None, None]
    assert f"bob (uid {BOB_UID}, gid {BOB_UID}, home 0700)" in found["results"][0]["evidence"]
    for user, result in zip(("alice", "bob"), found["results"][3:], strict=True):
        assert result["evidence"].startswith(
            f"{user}'s own mpirun from node1: a rank on each of node1, node2, node3 ("
        ), result
    cluster.ssh("node2", "sudo chmod 0755 /home/alice")
    try:
        found = doctor_users(people)
    finally:
        cluster.ssh("node2", "sudo chmod 0700 /home/alice")
    bad = [
        (r["node"], r["status"], r["evidence"]) for r in found["results"] if r["status"] != "pass"
    ]
    assert bad == [
        (
            "node2",
            "fail",
            "alice's home /home/alice on node2 is mode 0755: others can read it "
            "(mpicluster keeps homes 0700, at most 0750 with the user's own group)",
        )
    ]


def test_doctor_proves_her_mesh_by_a_launch_as_her_and_names_the_node_refusing_her(people, cluster):
    keys = "/home/alice/.ssh/authorized_keys"
    cluster.ssh("node3", f"sudo sed -i '/ alice@node1 /d' {keys}")
    try:
        found = doctor_users(people)
    finally:
        mended = mpicluster("up", str(people["inventory"]), "--full", "--no-smoke", check=False)
    failing = [r for r in found["results"] if r["status"] != "pass"]
    assert [(r["node"], r["status"]) for r in failing] == [("node3", "fail")], failing
    evidence = failing[0]["evidence"]
    assert evidence.startswith("alice's own mpirun from node1 across node1, node2, node3: ")
    assert "ssh to node3 failed: alice@" in evidence and "Permission denied" in evidence
    assert "`mpicluster up --full`" in failing[0]["fix"]
    assert mended.returncode == 0, mended.stderr[-3000:]
    assert doctor_users(people)["status"] == "pass"


def test_a_clash_is_refused_before_any_change(people, cluster, tmp_path: Path):
    cluster.ssh("node3", f"sudo useradd -M -u {BOB_UID + 1} carol")
    try:
        pub = (Path(str(people["keys"]["alice"]) + ".pub")).read_text().strip()
        clashing = inventory_with(
            people["inventory"],
            tmp_path / "clash.yaml",
            users=[{"name": "dave", "uid": BOB_UID + 1, "keys": [pub]}],
        )
        done = mpicluster("up", str(clashing), check=False)
        assert done.returncode == 2, done.stderr
        assert f"dave: uid {BOB_UID + 1} is taken by the account 'carol' on node3" in done.stderr
        assert cluster.ssh("node1", "getent passwd dave", check=False).returncode == 2
    finally:
        cluster.ssh("node3", "sudo userdel carol")


def test_a_user_taken_out_of_the_inventory_can_no_longer_log_in_and_keeps_his_files(
    people, cluster, tmp_path_factory
):
    assert login(people, "node1", "bob", "echo 42 > ~/results.txt").returncode == 0
    pub = Path(str(people["keys"]["alice"]) + ".pub").read_text().strip()
    without_bob = inventory_with(
        people["inventory"],
        tmp_path_factory.mktemp("left") / "without-bob.yaml",
        users=[{"name": "alice", "keys": [pub]}],
    )
    done = mpicluster("up", str(without_bob), "--json", "--no-smoke", check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    people["inventory"] = without_bob
    for node in NODES:
        assert login(people, node, "bob", "true").returncode == 255
        assert login(people, node, "alice", "true").returncode == 0
        shell = cluster.ssh(node, "getent passwd bob | cut -d: -f7").stdout.strip()
        assert shell == "/usr/sbin/nologin", (node, shell)
        # bob was the one with sudo: nobody is given it now
        assert cluster.ssh(node, "test -e /etc/sudoers.d/mpicluster-users", check=False).returncode
    assert cluster.ssh("node1", "sudo cat /home/bob/results.txt").stdout == "42\n"
    again = json.loads(mpicluster("up", str(without_bob), "--json", "--full", "--no-smoke").stdout)
    assert {n: h["changed"] for n, h in again["hosts"].items()} == dict.fromkeys(NODES, 0)


def test_down_removes_the_accounts_it_made_and_keeps_a_home_with_files(people, cluster):
    done = mpicluster("down", str(people["inventory"]), "--json", check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout)
    for node in NODES:
        assert cluster.ssh(node, "getent passwd alice", check=False).returncode == 2
        assert cluster.ssh(node, "test -e /home/alice", check=False).returncode == 1
    # bob's home on node1 holds his results: kept, his account locked (its uid his still)
    kept = cluster.ssh("node1", "getent passwd bob | cut -d: -f3,7").stdout.strip()
    assert kept == f"{BOB_UID}:/usr/sbin/nologin"
    assert cluster.ssh("node1", "sudo cat /home/bob/results.txt").stdout == "42\n"
    assert "bob: account locked, home kept" in result["hosts"]["node1"]["actions"]["/home/bob"]
    for node in ("node2", "node3"):  # nothing of his there: removed
        assert cluster.ssh(node, "getent passwd bob", check=False).returncode == 2


def test_a_user_listed_again_after_down_logs_in_to_his_kept_home(people, cluster):
    try:
        done = mpicluster("up", str(people["first"]), "--no-smoke", check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        assert login(people, "node1", "bob", "cat ~/results.txt").stdout == "42\n"
        for node in NODES:
            assert login(people, node, "bob", "true").returncode == 0, node
        entry = cluster.ssh("node1", "getent passwd bob | cut -d: -f3,5,7").stdout.strip()
        assert entry == f"{BOB_UID}::/bin/bash"
        # his kept account is mpicluster's again: down with --purge-homes takes it too
        gone = mpicluster("down", str(people["first"]), "--purge-homes", check=False)
        assert gone.returncode == 0, gone.stderr[-3000:]
        for node in NODES:
            assert cluster.ssh(node, "getent passwd bob", check=False).returncode == 2, node
            assert cluster.ssh(node, "test -e /home/bob", check=False).returncode == 1, node
    finally:
        cluster.ssh("node1", "sudo userdel --remove bob 2>/dev/null; true")
