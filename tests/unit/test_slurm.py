"""scheduler: slurm's pure logic: the inventory's partitions, what `up` passes the slurm
role, the munge key, the smoke test's judges and doctor's slurm check on recorded facts."""

from __future__ import annotations

import json

import pytest

from mpicluster import remote, slurm
from mpicluster.cluster.inventory import InventoryError
from mpicluster.doctor.checks import slurm as slurm_check
from mpicluster.slurm import smoke_steps as slurm_smoke
from mpicluster.slurm.facts import SlurmFacts, SlurmNode, parse_node, parse_node_lines
from mpicluster.util.errors import MpiclusterError
from tests.unit.plans import plan_of

NODES = "nodes: [{name: a, address: 10.0.0.1, gpus: 2}, {name: b, address: 10.0.0.2}]\n"


def inv(scheduler: str, extra: str = ""):
    return plan_of(f"cluster: c\n{NODES}{extra}scheduler: {scheduler}\n")


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("MPICLUSTER_HOME", str(tmp_path))


def test_no_scheduler_means_none_passed_and_nothing_in_the_footprint():
    plain = plan_of(f"cluster: c\n{NODES}")
    assert plain.scheduler is None and plain.controller is None and plain.partitions() == []
    assert slurm.scheduler_vars(plain) == {"mpicluster_scheduler": None}
    paths = {e["path"] for e in plain.layout.footprint("c")}
    assert slurm.SLURM_CONF not in paths


def test_defaults_one_partition_of_every_node_on_the_head():
    cluster = inv("{type: slurm}")
    assert cluster.controller.name == "a"
    (main,) = cluster.partitions()
    assert (main.name, main.nodes, main.default) == ("main", ["a", "b"], True)
    given = slurm.scheduler_vars(cluster)["mpicluster_scheduler"]
    assert given["controller"] == "a"
    assert given["partitions"] == [
        {
            "name": "main",
            "nodes": ["a", "b"],
            "default": True,
            "max_time": "UNLIMITED",
            "default_time": "",
        }
    ]
    assert given["gres"] == {"a": 2}
    footprint = cluster.layout.footprint("c")
    assert {"path": slurm.SLURM_CONF, "kind": "file"} in footprint
    key = next(e for e in footprint if e["path"] == slurm.MUNGE_KEY)
    assert key["unwatched"]


def test_partitions_take_the_clusters_default_time_and_name_one_default():
    cluster = inv(
        "{type: slurm, controller: b, default_time: '1:00:00', partitions: "
        "[{name: cpu, nodes: [b]}, {name: all, default: true, max_time: 2-00:00:00}]}"
    )
    cpu, every = cluster.partitions()
    assert cluster.controller.name == "b"
    assert (cpu.nodes, cpu.default, cpu.default_time) == (["b"], False, "1:00:00")
    assert (every.nodes, every.default, every.max_time) == (["a", "b"], True, "2-00:00:00")


def test_gpus_that_are_not_there_get_no_gres():
    cluster = inv("{type: slurm}", "stack: {gpus_present: false, nccl: {cuda_archs: ['9.0']}}\n")
    assert slurm.scheduler_vars(cluster)["mpicluster_scheduler"]["gres"] == {}


@pytest.mark.parametrize(
    ("scheduler", "message"),
    [
        ("{type: pbs}", "must be one of 'slurm'"),
        ("{type: slurm, controller: z}", "'z' is not a node (a, b)"),
        ("{type: slurm, default_time: 2h}", "not a Slurm time limit"),
        ("{type: slurm, partitions: [{name: 9x}]}", "not a partition name"),
        ("{type: slurm, partitions: [{name: x, nodes: [a]}]}", "node b is in no partition"),
        ("{type: slurm, partitions: [{name: x}, {name: X}]}", "duplicate partition 'X'"),
        (
            "{type: slurm, partitions: [{name: x, default: true}, {name: y, default: true}]}",
            "a second default partition",
        ),
        ("{type: slurm, partitions: [{name: x, nodes: [q]}]}", "'q' is not a node"),
        ("{type: slurm, queue: x}", "unknown key"),
    ],
)
def test_bad_schedulers_are_one_line_errors(scheduler, message):
    with pytest.raises(InventoryError) as caught:
        inv(scheduler)
    assert any(message in line for line in caught.value.lines()), caught.value.lines()


def test_munge_key_is_made_once_0600_and_refused_when_open(tmp_path):
    path = slurm.ensure_munge_key("c")
    data = path.read_bytes()
    assert len(data) == 1024 and path.stat().st_mode & 0o777 == 0o600
    assert slurm.ensure_munge_key("c").read_bytes() == data
    path.chmod(0o644)
    with pytest.raises(MpiclusterError, match="readable by others"):
        slurm.ensure_munge_key("c")


def report(ranks: int, exact: bool = True) -> str:
    return json.dumps({"ranks": ranks, "results": [{"elements": 1, "exact": exact}]})


def test_the_world_is_one_of_n_ranks_and_singletons_are_named():
    assert slurm_smoke.judge_world(report(3), 3) == ("", "")
    problem, cause = slurm_smoke.judge_world("\n".join([report(1)] * 3), 3)
    assert "3 ranks started as singletons" in problem and "PMIx" in cause
    assert "a world of 2 ranks, expected 3" in slurm_smoke.judge_world(report(2), 3)[0]
    assert "wrong allreduce result" in slurm_smoke.judge_world(report(3, False), 3)[0]
    assert slurm_smoke.judge_world("srun: error: ...", 3) == slurm_smoke.NO_REPORT


def test_sinfo_states_and_what_is_not_ready():
    states = slurm_smoke.parse_sinfo("a|idle\nb|down*\nb|down*\nc|mixed\nd|drained\n")
    assert slurm_smoke.not_ready(states, ["a", "b", "c", "d", "e"]) == {
        "b": "down*",
        "d": "drained",
        "e": "not in sinfo",
    }
    cause = slurm_smoke.nodes_cause({"b": "down*"}, {})
    assert "slurmd is not running" in cause and "state=resume" in cause
    assert "scontrol update nodename=d" in slurm_smoke.nodes_cause({"d": "drained"}, {})


@pytest.mark.parametrize(
    ("said", "wanted"),
    [
        ("unmunge: Error: Invalid credential", "munge keys differ"),
        ("unmunge: Error: Rewound credential", "clocks differ"),
        ('unmunge: Error: Unable to access "/run/munge/munge.socket.2"', "munged is not running"),
    ],
)
def test_munge_failures_say_their_cause(said, wanted):
    assert wanted in slurm_smoke.munge_cause(said)


CONF = """# Written by mpicluster up
NodeName=node1 NodeHostname=node1 NodeAddr=10.0.0.1 CPUs=2 Boards=1 SocketsPerBoard=1 \
CoresPerSocket=2 ThreadsPerCore=1 RealMemory=22899 State=UNKNOWN
NodeName=node2 NodeHostname=node2 NodeAddr=10.0.0.2 CPUs=4 Boards=1 SocketsPerBoard=1 \
CoresPerSocket=4 ThreadsPerCore=1 RealMemory=30000 State=UNKNOWN
"""
HW = (
    "NodeName=x CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 "
    "RealMemory=24105"
)


def facts(**changes) -> SlurmFacts:
    up = "daemon.munged=up\ndaemon.slurmd=up\ndaemon.slurmctld={}\nconf=abc\nhardware=" + HW
    up += "\nmunge=STATUS: Success (0)\n"
    found = SlurmFacts(
        "node1",
        nodes={"node1": parse_node(up.format("up")), "node2": parse_node(up.format("down"))},
        ping="Slurmctld(primary) at node1 is UP",
        ping_ok=True,
        configured=parse_node_lines(CONF),
        states={"node1": "idle", "node2": "idle"},
        launch_ok=True,
    )
    for key, value in changes.items():
        setattr(found, key, value)
    return found


def failures(found: SlurmFacts) -> list:
    return [r for r in slurm_check.judge(found) if r.status != "pass"]


def test_doctor_reads_a_node_line_that_does_not_match_slurmd():
    bad = failures(facts())
    assert [r.node for r in bad] == ["node2"]
    assert "CPUs 4 (slurmd -C: 2)" in bad[0].evidence
    assert "RealMemory 30000 MiB > the 24105 MiB" in bad[0].evidence


def test_doctor_names_a_stopped_slurmd_with_the_command_that_starts_it():
    found = facts(configured=parse_node_lines(CONF.replace("CPUs=4", "CPUs=2")))
    found.configured["node2"] = dict(found.configured["node1"])
    found.nodes["node2"].daemons["slurmd"] = False
    found.states["node2"] = "down*"
    found.reasons = {"node2": "Not responding"}
    bad = failures(found)
    assert [(r.node, r.evidence) for r in bad] == [
        ("node2", "slurmd is not running on node2"),
        ("node2", "Slurm state down* (Not responding)"),
    ]
    assert "mpicluster up" in bad[0].fix and "/usr/sbin/slurmd" in bad[0].fix
    assert "state=resume" in bad[0].fix


def test_doctor_finds_keys_that_differ_and_a_launch_of_singletons():
    found = facts()
    found.configured["node2"] = dict(found.configured["node1"])
    found.nodes["node2"].munge = "unmunge: Error: Invalid credential"
    found.nodes["node2"].conf = "def"
    found.launch_ok = False
    found.launch_problem = "3 ranks started as singletons (0 of 1 each), not one world of 2"
    evidence = [r.evidence for r in failures(found)]
    assert evidence[0].startswith("cannot decode the controller's munge credential")
    assert evidence[1] == "slurm.conf differs from the controller's"
    assert evidence[2].startswith("srun --mpi=pmix: 3 ranks started as singletons")


def test_doctor_without_a_controller_does_not_launch():
    found = facts(ping_ok=False, ping="slurm_load_ctl_conf error", launch_ok=None)
    found.configured["node2"] = dict(found.configured["node1"])
    bad = failures(found)
    assert bad[0].evidence.startswith("slurmctld does not answer")
    assert SlurmNode(False).reached is False


def test_the_packages_bookkeeping_files_come_back_as_they_were(tmp_path, monkeypatch):
    """shadow's backups and ucf's rotations, rewritten by adduser/userdel and the purge:
    given back byte for byte with their mode; one made since is removed."""
    import importlib.util

    path = remote.MODULES / "mpicluster_packages.py"
    spec = importlib.util.spec_from_file_location("mpicluster_packages", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    backup, rotated = tmp_path / "passwd-", tmp_path / "hashfile.0"
    backup.write_text("root:x:0:0\n")
    backup.chmod(0o640)
    monkeypatch.setattr(module, "BOOKKEEPING", (str(backup), f"{tmp_path}/hashfile.*"))
    before = module.snapshot()
    backup.write_text("root:x:0:0\nmunge:x:101:102\n")
    backup.chmod(0o644)
    rotated.write_text("new\n")
    module.give_back(before)
    assert backup.read_text() == "root:x:0:0\n" and backup.stat().st_mode & 0o777 == 0o640
    assert not rotated.exists()


#: `apt-cache policy libpmix2 libpmix2t64 munge nosuchpackage` on a Debian 13 node.
TRIXIE_POLICY = """libpmix2:
  Installed: (none)
  Candidate: (none)
  Version table:
libpmix2t64:
  Installed: (none)
  Candidate: 5.0.7-1
  Version table:
     5.0.7-1 500
        500 http://deb.debian.org/debian trixie/main amd64 Packages
munge:
  Installed: (none)
  Candidate: 0.5.16-1.1~deb13u1
  Version table:
     0.5.16-1.1~deb13u1 500
        500 http://deb.debian.org/debian trixie/main amd64 Packages
"""


def test_the_packages_are_installed_by_the_names_the_nodes_apt_offers():
    """(The renamed library on a real Debian 13 node: tests/cluster/test_releases.py.)"""
    import importlib.util

    path = remote.MODULES / "mpicluster_packages.py"
    spec = importlib.util.spec_from_file_location("mpicluster_packages", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.parse_policy(TRIXIE_POLICY) == {
        "libpmix2": None,
        "libpmix2t64": "5.0.7-1",
        "munge": "0.5.16-1.1~deb13u1",
    }
    # this machine's own apt: a name it has stays; one it has under neither name stays
    # too (apt-get then says it cannot find it)
    assert module.apt_names(["apt", "no-such-package-here"]) == ["apt", "no-such-package-here"]
