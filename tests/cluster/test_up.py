"""`mpicluster up` on the real 3-node local cluster (Debian's Open MPI: install = packages)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from mpicluster.cluster.inventory import load_inventory
from mpicluster.util.paths import state_dir
from tests.conftest import inventory_with, mpicluster
from tests.unit.test_no_trust_bypass import bypasses

pytestmark = pytest.mark.cluster

NODES = ["node1", "node2", "node3"]
ENV_SEED = 'LANG="C.UTF-8"\n# kept: a comment with $HOME in it\nPATH="/custom/bin:/usr/bin:/bin"\n'
KEY_SEED = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDummyKeyForTestsOnly0000000000000000000 someone\n"


@pytest.fixture(scope="module")
def inventory(cluster, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("up") / "packages.yaml"
    return inventory_with(cluster.inventory, path, stack={"install": "packages"})


def up_json(inventory: Path, *options: str, check: bool = True) -> tuple[int, dict]:
    done = mpicluster("up", str(inventory), "--json", *options, check=False)
    if check:
        assert done.returncode == 0, done.stderr[-4000:]
    return done.returncode, json.loads(done.stdout)


def test_up_provisions_and_verifies_keeping_unrelated_lines(cluster, inventory):
    # Seed the files up manages with lines it must keep byte for byte.
    home = "/home/vagrant"
    auth_before = cluster.ssh("node1", f"cat {home}/.ssh/authorized_keys").stdout
    cluster.ssh("node1", f"printf '%s' '{ENV_SEED}' | sudo tee /etc/environment >/dev/null")
    cluster.ssh("node1", f"printf '%s' '{KEY_SEED}' >> {home}/.ssh/authorized_keys")

    code, result = up_json(inventory)
    assert code == 0
    assert {h["status"] for h in result["hosts"].values()} <= {"ok", "changed"}
    smoke = result["smoke"]
    assert smoke["ok"] and smoke["matrix_ok"]
    assert len(smoke["pairs"]) == 9
    run = smoke["allreduce"]
    assert run["ranks"] == 3 and sorted(set(run["hosts"])) == NODES
    assert [r["exact"] for r in run["sizes"]] == [True] * 4
    # the ranks said which PML carried it: Debian's Open MPI has UCX's, which declines
    # without an RDMA device, so Open MPI's own ob1 (over TCP between these nodes)
    assert run["details"]["pml"] == "ob1", run

    environment = cluster.ssh("node1", "cat /etc/environment").stdout
    assert environment.startswith(ENV_SEED)
    block = environment[len(ENV_SEED) :]
    assert block.startswith("# BEGIN mpicluster") and block.endswith("# END mpicluster\n")
    assert 'PATH="/custom/bin:/usr/bin:/bin"' in block  # the user's PATH, kept
    assert 'OMPI_MCA_btl_tcp_if_include="192.168.63.0/24"' in block

    authorized = cluster.ssh("node1", f"cat {home}/.ssh/authorized_keys").stdout
    assert authorized.startswith(auth_before + KEY_SEED)
    ours = authorized[len(auth_before + KEY_SEED) :].splitlines()
    assert len(ours) == 1 and ours[0].endswith(" mpicluster:pytest")
    assert ours[0].startswith('from="192.168.63.11,192.168.63.12,192.168.63.13" ssh-ed25519 ')


def test_second_up_changes_nothing(inventory):
    _, result = up_json(inventory, "--full")  # every task runs, none changes anything
    assert (result["path"], result["why"]) == ("full", "--full")
    assert {name: h["changed"] for name, h in result["hosts"].items()} == dict.fromkeys(NODES, 0)
    assert result["smoke"]["ok"]


def test_an_unchanged_cluster_skips_the_playbooks_until_a_node_changes(cluster, inventory):
    _, result = up_json(inventory)
    assert (result["path"], result["hosts"]) == ("unchanged", {}), result["why"]
    assert result["smoke"]["ok"] and result["smoke"]["allreduce"]["ok"]
    # A line of the user's own beside the managed block is not up's to judge.
    cluster.ssh("node3", "echo EDITOR=vi | sudo tee -a /etc/environment >/dev/null")
    _, result = up_json(inventory)
    assert result["path"] == "unchanged", result["why"]
    # A managed file changed on one node: every task runs, and only that node changes.
    cluster.ssh("node3", "sudo chmod 0600 /etc/mpicluster/hostfile")
    _, result = up_json(inventory)
    assert result["path"] == "full"
    assert result["why"] == "node3: /etc/mpicluster changed since the last up"
    assert {n: h["changed"] > 0 for n, h in result["hosts"].items()} == {
        "node1": False,
        "node2": False,
        "node3": True,
    }
    assert cluster.ssh("node3", "stat -c %a /etc/mpicluster/hostfile").stdout.strip() == "644"
    assert "EDITOR=vi" in cluster.ssh("node3", "cat /etc/environment").stdout
    # A node whose names resolve differently (a line in /etc/hosts outside the block).
    cluster.ssh("node2", "echo '10.9.9.9 elsewhere' | sudo tee -a /etc/hosts >/dev/null")
    _, result = up_json(inventory, "--no-smoke")
    assert result["why"] == "node2: /etc/hosts changed since the last up"
    assert result["smoke"] is None
    _, result = up_json(inventory, "--no-smoke")
    assert (result["path"], result["smoke"]) == ("unchanged", None)


#: What a dry run could touch on a node: every file's path, size, mode, owner and time,
#: and the content of the files up writes.
SNAPSHOT = (
    "sudo find /etc /opt /home /root /usr/local /var/lib /tmp -xdev "
    "-printf '%p %s %m %U %T@\\n' 2>/dev/null | sort; "
    "sudo sh -c 'sha256sum /etc/environment /etc/hosts /etc/mpicluster/* "
    "/home/vagrant/.ssh/* 2>/dev/null; true'"
)


def test_a_dry_run_says_what_up_would_do_and_changes_nothing(cluster, inventory):
    # something for it to find: node3's block and hostfile edited by hand
    cluster.ssh(
        "node3",
        "sudo sed -i 's/^OMPI_MCA_btl_tcp_if_include=.*/OMPI_MCA_btl_tcp_if_include=\"lo\"/' "
        "/etc/environment && echo '# edited' | sudo tee -a /etc/mpicluster/hostfile >/dev/null",
    )
    before = {name: cluster.ssh(name, SNAPSHOT).stdout for name in NODES}
    done = mpicluster("up", str(inventory), "--dry-run", "--json")
    text = mpicluster("up", str(inventory), "--dry-run")
    after = {name: cluster.ssh(name, SNAPSHOT).stdout for name in NODES}
    for name in NODES:
        assert before[name] == after[name], f"{name} changed by a dry run"
    found = json.loads(done.stdout)
    assert found["dry_run"] and found["exit_code"] == 0 and found["runs_playbooks"]
    assert found["why"] == "node3: /etc/environment changed since the last up (and 1 more)"
    nodes = {node["name"]: node for node in found["nodes"]}
    assert nodes["node3"]["files"] == [
        {"path": "/etc/environment", "state": "differs"},
        {"path": "/etc/mpicluster/hostfile", "state": "differs"},
    ]
    assert nodes["node3"]["changed_since"] == ["/etc/environment", "/etc/mpicluster"]
    for name in ("node1", "node2"):
        assert (nodes[name]["files"], nodes[name]["changed_since"]) == ([], [])
        assert nodes[name]["record"] == "matches this run"
    assert "node3: /etc/environment: would be rewritten (its content differs)" in text.stdout
    assert "files would change on 1 of 3 node(s) (dry run, nothing changed)" in text.stdout
    # no secret: the cluster's private key is nowhere in what it printed
    key = (state_dir() / "clusters" / "pytest" / "id_ed25519").read_text()
    body = "".join(key.splitlines()[1:-1])
    for chunk in (body[i : i + 40] for i in range(0, len(body), 40)):
        assert chunk not in done.stdout + done.stderr + text.stdout + text.stderr
    # up puts node3 back; then the dry run finds nothing to do
    up_json(inventory, "--no-smoke")
    found = json.loads(mpicluster("up", str(inventory), "--dry-run", "--json").stdout)
    assert not found["runs_playbooks"], found["why"]
    assert all(node["files"] == [] and not node["changed_since"] for node in found["nodes"])


def test_a_changed_block_reaches_the_next_login_through_a_held_master(cluster, inventory, tmp_path):
    """The mesh's ssh master connections (ControlPersist) keep the environment their login
    began with, and every `ssh node command` between nodes goes through them (horovodrun's,
    pdsh's, a user's): up retires them when it changes a block, so the next login gets the
    new one, while the sessions a running job holds go on."""
    # a job that runs through up: its sessions hold node1's masters to node2 and node3
    held = "for n in node2 node3; do nohup ssh $n sleep 600 >/dev/null 2>&1 & done; sleep 2"
    cluster.ssh("node1", held)
    by_interface = inventory_with(inventory, tmp_path / "eth0.yaml", network={"interface": "eth0"})
    try:
        up_json(by_interface)
        seen = cluster.ssh("node1", "for n in node2 node3; do ssh $n env; done").stdout
        assert seen.count("NCCL_SOCKET_IFNAME=eth0") == 2, seen
        done = mpicluster(
            "run", str(by_interface), "--", "sh", "-c", "echo seen $(hostname) $NCCL_SOCKET_IFNAME"
        )
        ranks = sorted(line.split()[1:] for line in done.stdout.splitlines() if "seen " in line)
        assert ranks == [[node, "eth0"] for node in NODES], done.stdout
        # the running job's sessions were left alone
        assert cluster.ssh("node1", "pgrep -c -f '^ssh node. sleep 600'").stdout.strip() == "2"
    finally:
        cluster.ssh("node1", "pkill -f '^ssh node. sleep 600'; true")
        up_json(inventory)


def test_every_node_reaches_every_node_with_strict_host_keys(cluster, inventory):
    inv = load_inventory(inventory)
    targets = [n.name for n in inv.nodes] + [n.address for n in inv.nodes]
    loop = " ".join(targets)
    for node in NODES:
        out = cluster.ssh(
            node,
            f"for t in {loop}; do ssh -o BatchMode=yes -o StrictHostKeyChecking=yes "
            f"-o ControlMaster=no $t 'echo $(hostname)' || echo FAIL $t; done",
        ).stdout.split()
        assert out == NODES + NODES, f"from {node}: {out}"


def test_keys_are_private_and_never_logged(cluster, inventory):
    from mpicluster.cluster.state import cluster_dir

    key_dir = cluster_dir("pytest")
    private = (key_dir / "id_ed25519").read_text()
    secret = "".join(private.splitlines()[1:-1])
    assert oct((key_dir / "id_ed25519").stat().st_mode & 0o777) == "0o600"
    logged = "".join(
        p.read_text(errors="replace") for p in (key_dir / "runs").rglob("*") if p.is_file()
    )
    assert secret[:40] not in logged
    for node in NODES:
        mode = cluster.ssh(node, "stat -c %a ~/.ssh/mpicluster_pytest").stdout.strip()
        assert mode == "600"


def test_installed_ssh_files_do_not_bypass_host_keys(cluster, inventory):
    for node in NODES:
        files = "~/.ssh/config /etc/ssh/ssh_known_hosts /etc/ssh/ssh_config /etc/ssh/ssh_config.d/*"
        text = cluster.ssh(node, f"cat {files} 2>/dev/null; true").stdout
        assert "StrictHostKeyChecking yes" in text
        assert bypasses(text) == [], node


def test_smoke_names_the_node_whose_path_is_broken(cluster, inventory):
    # Break PATH inside the managed block on node2 only: mpirun's ssh launch would fail there.
    cluster.ssh("node2", r"""sudo sed -i 's|^PATH=.*|PATH="/nonexistent"|' /etc/environment""")
    done = mpicluster("smoke", str(inventory), "--json", check=False)
    assert done.returncode == 5, done.stderr
    report = json.loads(done.stdout)
    failed = {(p["source"], p["target"]) for p in report["pairs"] if not p["ok"]}
    assert failed == {(src, "node2") for src in NODES}
    problems = [p["problem"] for p in report["pairs"] if not p["ok"]]
    assert all("PATH on node2" in p and "/etc/environment" in p for p in problems), problems
    assert report["allreduce"]["ok"] is False

    # up repairs it, and says so by changing exactly that node.
    _, result = up_json(inventory)
    assert result["why"] == "node2: /etc/environment changed since the last up"
    assert {n: h["changed"] > 0 for n, h in result["hosts"].items()} == {
        "node1": False,
        "node2": True,
        "node3": False,
    }
    assert result["smoke"]["ok"]


def test_unreachable_node_stops_up_before_any_change(cluster, inventory, tmp_path):
    import yaml

    from mpicluster.cluster.state import cluster_dir

    data = yaml.safe_load(inventory.read_text())
    data["nodes"].insert(0, {"name": "ghost", "address": "192.168.63.99"})
    bad = tmp_path / "extra.yaml"
    bad.write_text(yaml.safe_dump(data, sort_keys=False))
    runs = cluster_dir("pytest") / "runs"
    before = sorted(runs.iterdir())
    done = mpicluster("up", str(bad), check=False)
    assert done.returncode == 4, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("error: ghost: ")
    assert "nothing was changed on any node" in done.stderr
    assert sorted(runs.iterdir()) == before


def test_a_node_without_apt_is_refused_by_its_facts_before_any_change(cluster, inventory):
    from mpicluster.cluster.state import cluster_dir

    runs = cluster_dir("pytest") / "runs"
    before = sorted(runs.iterdir())
    environment = cluster.ssh("node2", "sha256sum /etc/environment").stdout
    cluster.ssh("node2", "sudo mv /usr/bin/apt-get /usr/bin/apt-get.away")
    try:
        done = mpicluster("up", str(inventory), check=False)
    finally:
        cluster.ssh("node2", "sudo mv /usr/bin/apt-get.away /usr/bin/apt-get")
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: node2: debian 12 has no apt-get, which mpicluster"), last
    assert last.endswith("nothing was changed on any node"), last
    assert sorted(runs.iterdir()) == before
    assert cluster.ssh("node2", "sha256sum /etc/environment").stdout == environment


def test_hostfile_command(inventory, tmp_path):
    assert mpicluster("hostfile", str(inventory), "--format", "mpich").stdout == (
        "node1:1\nnode2:1\nnode3:1\n"
    )
    no_slots = tmp_path / "cores.yaml"
    data = yaml.safe_load(inventory.read_text())
    for node in data["nodes"]:
        del node["slots"]
    no_slots.write_text(yaml.safe_dump(data))
    out = mpicluster("hostfile", str(no_slots)).stdout.splitlines()
    assert [line.split()[0] for line in out] == NODES
    assert all(int(line.split("slots=")[1]) >= 1 for line in out)


def test_a_file_passed_node_to_node_arrives_whole_and_a_lost_node_costs_its_part(
    cluster, inventory
):
    """relay.py, which passes a packed stack on over the cluster's mesh, on real nodes:
    a chain and a tree carry a file whole to every node; a sha256 that does not match
    leaves no file anywhere; a node that cannot be reached is named, the others get it."""
    import shlex

    from mpicluster import remote
    from mpicluster.remote.relay import BOOT
    from mpicluster.stack.distribute import tree

    code = remote.source("relay")
    made = cluster.ssh(
        "node1", "head -c 30000000 /dev/urandom > /tmp/relay-src; sha256sum /tmp/relay-src"
    )
    sha = made.stdout.split()[0]

    def relay(plan: dict, expected: str = sha) -> list[tuple[str, bool, str]]:
        for node in NODES:
            cluster.ssh(node, "rm -rf /tmp/relay-in && mkdir -m 700 /tmp/relay-in")
        argv = [
            "/usr/bin/python3",
            "-c",
            BOOT,
            code,
            "/tmp/relay-in/p",
            expected,
            json.dumps(plan),
            "/tmp/relay-src",
        ]
        done = cluster.ssh("node1", shlex.join(argv))
        return [(r["node"], r["ok"], r["error"]) for r in map(json.loads, done.stdout.splitlines())]

    for fan_out in (1, 2):
        assert relay(tree(NODES, fan_out)) == [(n, True, "") for n in NODES]
        for node in ("node2", "node3"):
            got = cluster.ssh(node, "sha256sum /tmp/relay-in/p; ls -A /tmp/relay-in").stdout.split()
            assert got == [sha, "/tmp/relay-in/p", "p"], node

    reports = relay(tree(NODES), expected="0" * 64)
    assert [ok for _, ok, _ in reports] == [False] * 3
    assert all("damaged on the way" in error for _, _, error in reports), reports
    for node in NODES:
        assert cluster.ssh(node, "ls -A /tmp/relay-in").stdout == "", node

    lost = {
        "node": "node1",
        "children": [
            {"node": "node2", "children": [{"node": "ghost", "children": []}]},
            {"node": "node3", "children": []},
        ],
    }
    reports = relay(lost)
    assert [(n, ok) for n, ok, _ in reports] == [
        ("node1", True),
        ("node2", True),
        ("ghost", False),
        ("node3", True),
    ]
    assert reports[2][2].startswith("nothing from ghost: ssh: Could not resolve hostname ghost"), (
        reports
    )
    for node in NODES:
        cluster.ssh(node, "rm -rf /tmp/relay-in /tmp/relay-src")


def test_every_answer_of_a_node_arrives_whole_however_its_packets_fall(cluster):
    """A command's output, EOF and exit status can reach the control machine between two
    checks of the reading loop; the output still buffered must come back (it was lost
    about once in 300 answers, which `run --requirements` read as a node without a home).
    """
    from mpicluster.cluster.plan import ClusterPlan
    from mpicluster.nodes import transport

    plan = ClusterPlan.load(cluster.inventory)
    command = 'printf "%s\\n" "$HOME"; test -e /nonexistent && echo ready || echo missing'
    lost = []
    for _ in range(100):
        for name, answer in transport.run_everywhere(plan, command).items():
            if not answer.ok or answer.stdout.split("\n")[1:2] != ["missing"]:
                lost.append((name, answer.stdout, answer.error))
    assert lost == []
