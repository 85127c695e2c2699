"""`mpicluster doctor` against a real 3-node local cluster: first as `local up` left it
(up never ran), then provisioned (install: packages) with one thing broken at a time
on node2. Each time doctor must name exactly that node and that check, with a fix,
and pass again once the break is undone. The proof by launch (the `launch` check)
runs MPI each time: it must put the failure on node2 too, explained by what it saw,
and find the breaks no other check names.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.nodes import podman, podman_exec
from tests.conftest import LocalCluster, inventory_with, mpicluster, start_local_cluster

pytestmark = pytest.mark.cluster

NAME, SUBNET = "doctor", "192.168.65.0/24"
NODES = ["node1", "node2", "node3"]
BROKEN = "node2"
BLOCK_PATH = 'PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"'


@pytest.fixture(scope="module")
def raw(tmp_path_factory) -> Iterator[LocalCluster]:
    """The cluster as `local up` leaves it: sshd and a user, nothing of mpicluster's."""
    inventory = tmp_path_factory.mktemp("doctor") / "raw.yaml"
    mpicluster("local", "down", "--name", NAME, check=False)  # leftovers of a killed run
    yield start_local_cluster(NAME, len(NODES), SUBNET, inventory)
    mpicluster("local", "down", "--name", NAME, check=False)


@pytest.fixture(scope="module")
def inventory(raw) -> Path:
    return inventory_with(
        raw.inventory, raw.inventory.parent / "packages.yaml", stack={"install": "packages"}
    )


@pytest.fixture(scope="module")
def provisioned(raw, inventory) -> LocalCluster:
    mpicluster("up", str(inventory), timeout=1800)
    return raw


def doctor(inventory: Path, *args: str) -> tuple[int, dict]:
    done = mpicluster("doctor", str(inventory), "--json", *args, check=False, timeout=600)
    assert done.returncode in (0, 5, 6), done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def problems(report: dict) -> set[tuple[str, str | None, str]]:
    """(check, node, status) of every result that is not a pass."""
    return {
        (check["name"], result["node"], result["status"])
        for check in report["checks"]
        for result in check["results"]
        if result["status"] != "pass"
    }


def results(report: dict, name: str, node: str) -> list[dict]:
    check = next(c for c in report["checks"] if c["name"] == name)
    return [r for r in check["results"] if r["node"] == node and r["status"] != "pass"]


def assert_healthy(inventory: Path) -> dict:
    code, report = doctor(inventory)
    assert (code, problems(report)) == (0, set()), json.dumps(report, indent=1)[-6000:]
    return report


def wait_for_ssh(inventory: Path, seconds: float = 90) -> None:
    """Until doctor's ssh check reaches every node (sshd restarting, a node booting)."""
    deadline = time.monotonic() + seconds
    while True:
        code, report = doctor(inventory, "--check", "ssh", "--timeout", "5")
        if code == 0 or time.monotonic() > deadline:
            assert code == 0, problems(report)
            return
        time.sleep(1)


def test_cluster_up_never_touched_says_what_up_would_fix(raw, inventory):
    code, report = doctor(inventory)
    assert code == 5
    found = problems(report)
    failing_checks = {check for check, _, status in found if status == "fail"}
    assert {"env", "mesh", "hostfile", "versions"} <= failing_checks, found
    assert not results(report, "ssh", "node1")  # the control connection itself works
    for check in report["checks"]:
        for result in check["results"]:
            if result["status"] != "pass":
                assert "mpicluster up" in result["fix"], result
    env = " ".join(r["evidence"] for r in results(report, "env", "node1"))
    assert "no mpicluster block" in env


def test_healthy_cluster_passes_every_check(provisioned, inventory):
    report = assert_healthy(inventory)
    assert [c["name"] for c in report["checks"]] == [
        "ssh",
        "mesh",
        "env",
        "rank",
        "names",
        "ports",
        "interfaces",
        "fabric",
        "versions",
        "stack",
        "gpus",
        "clock",
        "disk",
        "limits",
        "hostfile",
        "users",
        "launch",
        "slurm",
    ]
    assert all(c["not_checked"] == [] for c in report["checks"])
    slurm = next(c for c in report["checks"] if c["name"] == "slurm")
    assert [r["evidence"] for r in slurm["results"]] == [
        "no scheduler in the inventory: nothing to check"
    ]
    users = next(c for c in report["checks"] if c["name"] == "users")
    assert [r["evidence"] for r in users["results"]] == [
        "the inventory lists no users: nothing to check"
    ]
    launch = next(c for c in report["checks"] if c["name"] == "launch")
    assert {r["node"] for r in launch["results"]} == {*NODES, None}
    across, shared = [r for r in launch["results"] if r["node"] is None]
    assert "one rank on each of 3 nodes: allreduce exact, Open MPI" in across["evidence"]
    assert "2 ranks on each of node1 and node2: allreduce exact" in shared["evidence"]
    # 1 and 2 ranks on each node alone, then all, then 2 ranks on each of two nodes
    assert len(launch["details"]) == 8
    assert all(d["ok"] and d["mpi"] for d in launch["details"])
    mesh = next(c for c in report["checks"] if c["name"] == "mesh")
    assert {r["node"] for r in mesh["results"]} == set(NODES)
    assert all("2 of 2 peers" in r["evidence"] for r in mesh["results"])
    # no RDMA device on these nodes; Debian's Open MPI (read by its ompi_info) has UCX
    check = next(c for c in report["checks"] if c["name"] == "fabric")
    fabric = {r["node"]: r["evidence"] for r in check["results"]}
    assert set(fabric) == set(NODES)
    assert all(
        e.startswith("no RDMA devices: MPI and NCCL use TCP sockets (Open MPI has ")
        and "pml:ucx" in e
        for e in fabric.values()
    ), fabric

    table = mpicluster("doctor", str(inventory), timeout=600)
    for name in ("ssh", "mesh", "env", "names", "ports", "versions", "hostfile"):
        assert name in table.stdout
    assert "0 fail" in table.stdout


def test_check_option_runs_only_those_checks(provisioned, inventory):
    code, report = doctor(inventory, "--check", "names", "--check", "ssh")
    assert code == 0
    assert [c["name"] for c in report["checks"]] == ["ssh", "names"]


def test_broken_path_in_etc_environment(provisioned, inventory):
    cluster = provisioned
    sed = r"/^# BEGIN mpicluster/,/^# END mpicluster/ s|^PATH=.*|PATH=\"/nonexistent\"|"
    cluster.ssh(BROKEN, f"sudo sed -i '{sed}' /etc/environment")
    try:
        code, report = doctor(inventory)
        assert code == 5
        assert problems(report) == {("env", BROKEN, "fail"), ("launch", BROKEN, "fail")}
        (result,) = results(report, "env", BROKEN)
        assert "/nonexistent" in result["evidence"]
        assert "/etc/environment" in result["fix"] and "mpicluster up" in result["fix"]
        (launch,) = results(report, "launch", BROKEN)
        assert "no mpirun on this node's non-interactive PATH" in launch["evidence"]
        assert "the env check saw:" in launch["evidence"]
        assert launch["fix"] == result["fix"]
    finally:
        # absolute paths: this node's PATH is the broken thing
        restore = rf"/^# BEGIN mpicluster/,/^# END mpicluster/ s|^PATH=.*|{BLOCK_PATH}|"
        cluster.ssh(BROKEN, f"/usr/bin/sudo /usr/bin/sed -i '{restore}' /etc/environment")
    assert_healthy(inventory)


def test_removed_authorized_key(provisioned, inventory):
    cluster = provisioned
    keys = "~/.ssh/authorized_keys"
    cluster.ssh(
        BROKEN,
        f"cp {keys} ~/authorized_keys.doctor && grep -v ' mpicluster:{NAME}$' "
        f"~/authorized_keys.doctor > {keys}.new && cat {keys}.new > {keys}",
    )
    try:
        code, report = doctor(inventory)
        assert code == 5
        assert problems(report) == {("mesh", BROKEN, "fail"), ("launch", BROKEN, "fail")}
        (result,) = results(report, "mesh", BROKEN)
        assert f"into {BROKEN}" in result["evidence"]
        assert "Permission denied" in result["evidence"]
        assert "authorized_keys" in result["fix"] and f"mpicluster:{NAME}" in result["fix"]
        (launch,) = results(report, "launch", BROKEN)
        assert launch["peer"] == "node1"  # the pair launch from the head failed
        assert "Permission denied (publickey)" in launch["evidence"]
        assert f"{BROKEN} refused the MPI user's ssh login from node1" in launch["evidence"]
        assert "authorized_keys" in launch["fix"]
    finally:
        cluster.ssh(BROKEN, f"cat ~/authorized_keys.doctor > {keys}")
    assert_healthy(inventory)


def _reload_sshd(cluster: LocalCluster, node: str, commands: str) -> None:
    # sshd is the only child of the node's init; SIGHUP makes it re-exec with the keys
    cluster.ssh(node, f"sudo sh -c '{commands} && pkill -HUP -o -x sshd'")


def test_changed_host_key(provisioned, inventory):
    cluster = provisioned
    _reload_sshd(
        cluster,
        BROKEN,
        "mkdir -p /root/doctor-keys && cp -a /etc/ssh/ssh_host_* /root/doctor-keys/ "
        "&& rm /etc/ssh/ssh_host_* && ssh-keygen -A >/dev/null",
    )
    try:
        code, report = doctor(inventory)
        assert code == 5
        assert problems(report) == {("ssh", BROKEN, "fail"), ("mesh", BROKEN, "fail")}
        (result,) = results(report, "ssh", BROKEN)
        assert "CHANGED" in result["evidence"]
        assert result["evidence"].count("SHA256:") == 2  # the known key and the offered one
        assert "ssh-keygen -R" in result["fix"]
        (mesh,) = results(report, "mesh", BROKEN)
        assert "host key" in mesh["evidence"]
        skipped = {c["name"] for c in report["checks"] if BROKEN in c["not_checked"]}
        assert {"env", "names", "versions", "hostfile"} <= skipped
    finally:
        # the control connection refuses the new key: restore through Podman
        _podman_exec(
            BROKEN,
            "rm -f /etc/ssh/ssh_host_* && cp -a /root/doctor-keys/* /etc/ssh/ "
            "&& pkill -HUP -o -x sshd",
        )
    wait_for_ssh(inventory)
    assert_healthy(inventory)


def test_hostname_resolving_to_loopback(provisioned, inventory):
    cluster = provisioned
    # /etc/hosts is bind-mounted by Podman: rewrite it in place, never rename onto it
    cluster.ssh(
        BROKEN,
        "cp /etc/hosts ~/hosts.doctor && { echo '127.0.1.1 node2'; cat ~/hosts.doctor; } "
        "> ~/hosts.new && sudo sh -c 'cat ~vagrant/hosts.new > /etc/hosts'",
    )
    try:
        code, report = doctor(inventory)
        assert code == 5
        found = problems(report)
        assert ("names", BROKEN, "fail") in found
        assert found <= {("names", BROKEN, "fail"), ("launch", BROKEN, "fail")}, found
        for launch in results(report, "launch", BROKEN):  # if the launch failed too
            assert "the names check saw:" in launch["evidence"], launch
        (result,) = results(report, "names", BROKEN)
        assert "127.0.1.1" in result["evidence"] and "loopback" in result["evidence"]
        assert "127.0.1.1 node2" in result["fix"] and "/etc/hosts" in result["fix"]
    finally:
        cluster.ssh(BROKEN, "sudo sh -c 'cat ~vagrant/hosts.doctor > /etc/hosts'")
    assert_healthy(inventory)


def test_firewall_blocking_high_ports(provisioned, inventory):
    cluster = provisioned
    rule = "INPUT -p tcp --dport 1024:65535 -j DROP"
    cluster.ssh(BROKEN, f"sudo iptables -I {rule}")
    try:
        code, report = doctor(inventory)
        assert code == 5
        found = problems(report)
        assert ("ports", BROKEN, "fail") in found
        # a DROP on INPUT also eats the replies to node2's own ssh: the mesh may say so,
        # about node2 and no other node
        allowed = {("ports", BROKEN, "fail"), ("mesh", BROKEN, "fail"), ("launch", BROKEN, "fail")}
        assert ("launch", BROKEN, "fail") in found and found <= allowed, found
        (result,) = results(report, "ports", BROKEN)
        assert "timed out" in result["evidence"] and "iptables" in result["fix"]
        (launch,) = results(report, "launch", BROKEN)
        assert "the ports check saw:" in launch["evidence"], launch
        assert "iptables" in launch["fix"]
    finally:
        cluster.ssh(BROKEN, f"sudo iptables -D {rule}")
    assert_healthy(inventory)


def test_different_mpi_build(provisioned, inventory):
    cluster = provisioned
    cluster.ssh(
        BROKEN,
        "sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "
        "mpich >/dev/null && sudo update-alternatives --set mpirun /usr/bin/mpirun.mpich "
        "&& sudo update-alternatives --set mpi /usr/bin/mpicc.mpich",
    )
    try:
        code, report = doctor(inventory)
        assert code == 5
        assert problems(report) == {("versions", BROKEN, "fail"), ("launch", BROKEN, "fail")}
        (result,) = results(report, "versions", BROKEN)
        assert "MPICH" in result["evidence"] and "Open MPI" in result["evidence"]
        assert "update-alternatives" in result["fix"]
        (launch,) = results(report, "launch", BROKEN)
        assert "is not Open MPI's mpirun" in launch["evidence"]
        assert "update-alternatives" in launch["fix"]
    finally:
        cluster.ssh(
            BROKEN,
            "sudo update-alternatives --auto mpirun && sudo update-alternatives --auto mpi "
            "&& sudo env DEBIAN_FRONTEND=noninteractive apt-get purge -y mpich >/dev/null",
        )
    assert_healthy(inventory)


def _podman(*args: str) -> None:
    """`podman ARGS <node2's container>`."""
    podman(NAME, BROKEN, *args)


def _podman_exec(node: str, command: str) -> None:
    podman_exec(NAME, node, command)


def test_stopped_node_costs_one_timeout(provisioned, inventory):
    timeout = 6
    _podman("stop", "-t", "1")
    try:
        code, report = doctor(inventory, "--timeout", str(timeout), "--no-launch")
        assert code == 5
        assert problems(report) == {("ssh", BROKEN, "fail")}
        (result,) = results(report, "ssh", BROKEN)
        assert "192.168.65.12" in result["evidence"]
        assert f"is {BROKEN} up?" in result["fix"]
        skipped = {c["name"] for c in report["checks"] if BROKEN in c["not_checked"]}
        assert skipped >= {"mesh", "env", "names", "ports", "versions", "clock", "hostfile"}
        # one connect timeout, not one per check or per peer
        assert report["seconds"] < 2 * timeout, report["seconds"]
    finally:
        _podman("start")
    wait_for_ssh(inventory)
    # Podman rewrote the restarted node's /etc/hosts; doctor says so, and up repairs it
    code, report = doctor(inventory)
    assert problems(report) <= {("names", BROKEN, "fail")}
    mpicluster("up", str(inventory), timeout=1800)
    assert_healthy(inventory)


def test_mpi4py_missing_on_one_node_is_found_by_the_launch(provisioned, inventory):
    """node2's Python loses mpi4py: it still runs ranks alone (without MPI), but a job
    across nodes fails; the launch puts it on node2 and names the Python."""
    aside = "/usr/lib/python3/dist-packages/mpi4py"
    _podman_exec(BROKEN, f"mv {aside} /root/mpi4py.aside")
    try:
        code, report = doctor(inventory)
        assert code == 5
        found = problems(report)
        launches = next(c for c in report["checks"] if c["name"] == "launch")
        assert ("launch", BROKEN, "fail") in found, json.dumps(launches, indent=1)[-6000:]
        assert ("rank", BROKEN, "fail") in found  # a login's python3 cannot import it
        allowed = {("launch", BROKEN, "fail"), ("versions", BROKEN, "fail")}
        assert found <= allowed | {("rank", BROKEN, "fail")}, found
        (launch,) = results(report, "launch", BROKEN)
        assert "no mpi4py in /usr/bin/python3 on node2" in launch["evidence"], launch
        assert "the rank check saw: `import mpi4py`" in launch["evidence"], launch
        assert "apt-get install --reinstall python3-mpi4py" in launch["fix"]
    finally:
        _podman_exec(BROKEN, f"mv /root/mpi4py.aside {aside}")
    assert_healthy(inventory)


def test_tmp_not_writable_fails_every_launch_on_the_node_and_says_why(provisioned, inventory):
    """Open MPI keeps its session directory in /tmp: a /tmp the MPI user cannot write
    (mode 0755) breaks every launch on node2; the disk check reads why on the node."""
    _podman_exec(BROKEN, "chmod 0755 /tmp")
    try:
        code, report = doctor(inventory)
        assert code == 5
        assert problems(report) == {("disk", BROKEN, "fail"), ("launch", BROKEN, "fail")}
        (disk,) = results(report, "disk", BROKEN)
        assert disk["evidence"] == "/tmp is not writable by vagrant (mode 0755, owner root)"
        (launch,) = results(report, "launch", BROKEN)
        assert "on node2 alone" in launch["evidence"], launch
        assert "/tmp" in launch["evidence"], launch
        assert "/tmp" in launch["fix"] and "1777" in launch["fix"], launch
    finally:
        _podman_exec(BROKEN, "chmod 1777 /tmp")
    assert_healthy(inventory)


# --- bench on the same provisioned cluster (Debian's Open MPI and mpi4py) ------------

#: An htb root on a node's cluster interface: every packet out of it at SLOW (a slow
#: node), or only those to one peer (a slow link: a u32 filter on its address). netem
#: is not in this kernel (ENVIRONMENT.md: shaping traffic between local nodes).
SLOW = "500mbit"


def shape(cluster: LocalCluster, node: str, peer_address: str | None = None) -> None:
    rules = ["tc qdisc add dev eth0 root handle 1: htb default 10"]
    if peer_address is None:
        rules.append(f"tc class add dev eth0 parent 1: classid 1:10 htb rate {SLOW}")
    else:
        rules += [
            "tc class add dev eth0 parent 1: classid 1:10 htb rate 40gbit",
            f"tc class add dev eth0 parent 1: classid 1:20 htb rate {SLOW}",
            f"tc filter add dev eth0 parent 1: protocol ip u32 match ip dst {peer_address}/32 "
            "flowid 1:20",
        ]
    for rule in rules:
        cluster.ssh(node, f"sudo {rule}")


def unshape(cluster: LocalCluster, node: str) -> None:
    cluster.ssh(node, "sudo tc qdisc del dev eth0 root", check=False)


def bench(inventory: Path, *args: str) -> tuple[int, dict, str]:
    done = mpicluster("bench", str(inventory), "--json", *args, check=False, timeout=900)
    assert done.returncode in (0, 5), done.stderr[-4000:]
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout), done.stderr


def test_bench_on_a_healthy_cluster_flags_nothing_and_shows_its_figures(provisioned, inventory):
    code, report, _ = bench(inventory)
    assert (code, report["flagged"], report["status"]) == (0, [], "pass"), report
    first = [p for p in report["pairs"] if p["pass"] == 1]
    assert sorted(tuple(p["nodes"]) for p in first) == [
        ("node1", "node2"),
        ("node1", "node3"),
        ("node2", "node3"),
    ]
    # a pair slow once on a busy machine is measured again (pass 2) and then judged by
    # its faster figure: nothing flagged either way (CI's machine did this once)
    assert all(p["pass"] == 2 and not p["slow"] for p in report["pairs"] if p not in first)
    assert all(p["gbs"] > 0.05 and p["latency_us"] > 0 for p in report["pairs"])
    # the baseline: iperf3 (which up installed) on every pair, each node's card found
    assert all(p["network_gbs"] > 0.05 for p in report["pairs"]), report["pairs"]
    assert report["efficiency_basis"] == "baseline" and report["baseline"]["note"] == ""
    assert report["baseline"]["tool"] == "iperf3 --bidir"
    cards = report["baseline"]["nodes"]
    assert sorted(cards) == ["node1", "node2", "node3"]
    assert all(
        c["interface"] == "eth0" and c["address"].startswith("192.168.65.") for c in cards.values()
    )
    sizes = report["allreduce"]
    assert [s["bytes"] for s in sizes] == [8 << (2 * i) for i in range(13)] + [256 << 20]
    assert all(s["exact"] for s in sizes) and sizes[-1]["efficiency"] > 0
    assert "Open MPI" in report["library"]
    table = mpicluster("bench", str(inventory), "--quick", timeout=600)
    assert "bench: 3 pair(s)" in table.stdout and "0 flagged" in table.stdout
    # progress on stderr (--json keeps it quiet): the ring of 3 is all 3 pairs
    assert "Point to point: 3 pair(s) in 3 round(s)" in table.stderr
    assert "round 3/3: " in table.stderr  # live, a line per round


def test_doctor_perf_measures_the_ring_and_names_a_slow_node(provisioned, inventory):
    code, report = doctor(inventory, "--perf")
    assert (code, problems(report)) == (0, set()), json.dumps(report, indent=1)[-4000:]
    perf = next(c for c in report["checks"] if c["name"] == "perf")
    (said,) = perf["results"]
    assert said["evidence"].startswith("3 ring pair(s)"), said  # a re-measure is named apart
    assert "allreduce busbw" in said["evidence"], said
    shape(provisioned, "node2")
    try:
        code, report = doctor(inventory, "--perf", "--check", "launch")
    finally:
        unshape(provisioned, "node2")
    assert code == 5 and problems(report) == {("perf", "node2", "fail")}, problems(report)
    (slow,) = next(c for c in report["checks"] if c["name"] == "perf")["results"]
    assert "slow node node2" in slow["evidence"] and "mpicluster bench" in slow["fix"], slow


def test_bench_names_a_slow_node_as_the_node(provisioned, inventory, tmp_path):
    cluster = provisioned
    shape(cluster, "node3")
    try:
        code, report, _ = bench(inventory, "--report", str(tmp_path), "--compare")
    finally:
        unshape(cluster, "node3")
    assert code == 5, report
    (found,) = report["flagged"]
    assert (found["kind"], found["nodes"]) == ("node", ["node3"]), found
    assert found["measured"] < 0.7 * found["expected"]
    assert found["why"].startswith("every pair with node3 is slow"), found
    assert "the network itself is slow, not MPI" in found["why"], found  # iperf3 says so
    slow = {tuple(p["nodes"]) for p in report["pairs"] if p["slow"]}
    assert slow == {("node1", "node3"), ("node2", "node3")}, report["pairs"]
    # the report's pictures show it (their data, read back from the PNGs)
    from PIL import Image

    with Image.open(tmp_path / "heatmap.png") as image:
        heat = json.loads(image.text["Description"])
    assert heat["flagged_nodes"] == ["node3"], heat
    low = heat["gbs"][heat["nodes"].index("node3")]
    assert max(v for v in low if v is not None) < 0.7 * found["expected"], heat
    with Image.open(tmp_path / "busbw.png") as image:
        assert len(json.loads(image.text["Description"])["bytes"]) == 14
    assert "slow node node3" in (tmp_path / "index.html").read_text()
    # --compare: against the healthy run kept before, the pairs with node3 fell
    changes = {c["what"]: c for c in report["compared"]["changes"]}
    assert report["compared"]["previous"].endswith(".json"), report["compared"]
    assert changes["node1-node3"]["ratio"] < 0.7 and changes["flagged"]["now"] == "slow node node3"


def test_bench_names_a_slow_link_as_the_link_not_either_node(provisioned, inventory):
    cluster = provisioned
    node2 = load_address(inventory, "node2")
    shape(cluster, "node1", peer_address=node2)
    try:
        code, report, _ = bench(inventory)
    finally:
        unshape(cluster, "node1")
    assert code == 5, report
    (found,) = report["flagged"]
    assert (found["kind"], found["nodes"]) == ("link", ["node1", "node2"]), found
    assert "slow only with each other" in found["why"], found


def load_address(inventory: Path, node: str) -> str:
    from mpicluster.cluster.inventory import load_inventory

    inv = load_inventory(inventory)
    return next(n.address for n in inv.nodes if n.name == node)
