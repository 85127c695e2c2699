"""The proof by launch's judgement and schedule, from recorded launches (pure logic: no nodes).

Where a launch failed, the result must sit on the node (or pair) the rounds point at,
and explain from what was seen: mpirun's own words, what the other checks found on
that node. tests/cluster/test_doctor.py launches for real.
"""

from __future__ import annotations

import json

from mpicluster.doctor.checks import launch as launch_check
from mpicluster.doctor.launch_proof import (
    MARK,
    PAIR_TIMEOUT,
    Launch,
    LaunchProof,
    Prover,
    all_timeout,
    build_argv,
    major_version,
    mpi4py_expected,
    mpirun_of,
    same_launch,
    side_by_side,
)
from mpicluster.doctor.model import Status
from mpicluster.doctor.runner import Options
from tests.unit.test_doctor_checks import MPICH, gathered, node_facts
from tests.unit.test_mpi_version import OPEN_MPI_4, OPEN_MPI_5

NODES = ["node1", "node2", "node3"]


def report_line(hosts: list[str], **extra) -> str:
    size = len(hosts)
    body = {"mpi": True, "size": size, "hosts": hosts, "sum": size * (size + 1) // 2}
    return MARK + json.dumps({"library": "Open MPI v4.1.4", **body, **extra})


def launch(kind, head, hosts, *, output=None, rc=0, hung=False, ranks=None) -> Launch:
    ranks = ranks or len(hosts)
    argv = build_argv(
        "/usr/bin/mpirun",
        hosts=None if kind == "alone" else hosts,
        ranks=ranks,
        timeout=15,
        python="/usr/bin/python3",
        root=False,
        network_args=[],
    )
    if output is None:
        output = report_line(hosts * (ranks if kind == "alone" else 1))
    found = Launch(kind, head, hosts, ranks, argv, 15, rc, hung, 0.5, output)
    found.hostnames = {n: n for n in NODES}
    return found


def healthy_alone() -> dict[str, list[Launch]]:
    return {n: [launch("alone", n, [n], ranks=r) for r in (1, 2)] for n in NODES}


def judge(proof: LaunchProof, tweak=None, **fields):
    g = gathered(tweak=tweak, launch=proof, **fields)
    g.options = Options(checks=("mesh", "ports", "launch"), timeout=10)
    return launch_check.check(g)


def failures(report):
    return [r for r in report.results if r.status != Status.PASS]


def test_a_healthy_proof_passes_each_node_and_the_cluster():
    proof = LaunchProof(alone=healthy_alone(), all=launch("all", "node1", NODES))
    report = judge(proof)
    assert failures(report) == []
    assert {r.node for r in report.results} == {*NODES, None}
    whole = next(r for r in report.results if r.node is None)
    assert "one rank on each of 3 nodes: allreduce exact, Open MPI v4.1.4" in whole.evidence
    assert len(report.details) == 7  # every launch, in the JSON report


def test_a_launch_problem_is_what_was_seen():
    assert launch("all", "node1", NODES).ok
    assert launch("all", "node1", NODES, hung=True, rc=-15).problem == "hung: no result in 15 s"
    assert launch("all", "node1", NODES, rc=1).problem == "mpirun exited 1"
    wrong = launch("all", "node1", NODES, output=report_line(NODES, sum=5))
    assert wrong.problem == "the allreduce gave 5, not 6"
    fewer = launch("all", "node1", NODES, output=report_line(["node1", "node3"]))
    assert fewer.problem == "2 ranks started, 3 asked for"
    twice = launch("all", "node1", NODES, output=report_line(["node1", "node1", "node3"]))
    assert twice.problem == "no rank ran on node2"


def test_a_node_refusing_the_login_is_the_one_named_with_the_real_cause():
    refused = (
        "vagrant@node2: Permission denied (publickey).\n"
        "--------------------------------------------------------------------------\n"
        "PRTE has lost communication with a remote daemon.\n"
    )
    proof = LaunchProof(
        alone=healthy_alone(),
        all=launch("all", "node1", NODES, rc=1, output=refused),
        pairs=[
            launch("pair", "node1", ["node1", "node2"], rc=1, output=refused),
            launch("pair", "node1", ["node1", "node3"]),
        ],
    )
    (result,) = failures(judge(proof))
    assert (result.node, result.peer) == ("node2", "node1")
    assert "Permission denied (publickey)" in result.evidence
    assert "node2 refused the MPI user's ssh login from node1" in result.evidence
    assert "authorized_keys" in result.fix and "StrictModes" in result.fix


def test_what_another_check_saw_on_the_node_is_the_evidence():
    """A hang whose output says nothing: the ports check's finding on that node
    explains it, and its fix is the one given."""
    proof = LaunchProof(
        alone=healthy_alone(),
        all=launch("all", "node1", NODES, hung=True, rc=-15, output=""),
        pairs=[
            launch("pair", "node1", ["node1", "node2"]),
            launch("pair", "node1", ["node1", "node3"], hung=True, rc=-15, output=""),
        ],
    )
    blocked = {"ok": False, "error": "timed out", "seconds": 3.0}
    tcp = {}
    for source in NODES:
        for target in NODES:
            if source != target:
                tcp[(source, target)] = {
                    "peer": target,
                    **(
                        blocked if target == "node3" else {"ok": True, "error": "", "seconds": 0.01}
                    ),
                }
    (result,) = failures(judge(proof, tcp_pairs=tcp))
    assert (result.node, result.peer) == ("node3", "node1")
    assert "hung: no result in 15 s" in result.evidence
    assert "the ports check saw:" in result.evidence
    assert "iptables" in result.fix or "firewall" in result.fix


def test_a_hang_nothing_explains_names_both_causes_and_how_to_tell_them_apart():
    proof = LaunchProof(
        alone=healthy_alone(),
        all=launch("all", "node1", NODES, hung=True, rc=-15, output=""),
        pairs=[
            launch("pair", "node1", ["node1", "node2"], hung=True, rc=-15, output=""),
            launch("pair", "node1", ["node1", "node3"]),
        ],
    )
    (result,) = failures(judge(proof))
    assert result.node == "node2"
    assert "saw nothing wrong here" in result.evidence
    assert "two causes" in result.fix and "ip route get" in result.fix


def test_a_head_that_fails_with_everyone_is_the_one_named():
    output = "ssh: connect to host node2 port 22: Connection timed out\n"
    proof = LaunchProof(
        alone=healthy_alone(),
        all=launch("all", "node1", NODES, rc=1, output=output),
        pairs=[
            launch("pair", "node1", ["node1", "node2"], rc=1, output=output),
            launch("pair", "node1", ["node1", "node3"], rc=1, output=output),
            launch("pair", "node2", ["node2", "node3"]),
        ],
    )
    (result,) = failures(judge(proof))
    assert result.node == "node1"
    assert "every launch from node1 with another node failed" in result.evidence
    assert "launches from node2 worked" in result.evidence


def test_mpi4py_missing_on_one_node_is_named_with_its_python():
    missing = MARK + json.dumps(
        {
            "mpi": False,
            "rank": "1",
            "host": "node3",
            "python": "/usr/bin/python3",
            "error": "No module named 'mpi4py'",
        }
    )
    proof = LaunchProof(
        alone=healthy_alone(),
        all=launch("all", "node1", NODES, rc=1, output=missing),
        pairs=[
            launch("pair", "node1", ["node1", "node2"]),
            launch("pair", "node1", ["node1", "node3"], rc=1, output=missing),
        ],
    )
    (result,) = failures(judge(proof))
    assert result.node == "node3"
    assert "no mpi4py in /usr/bin/python3 on node3" in result.evidence
    assert "reinstall mpi4py in /usr/bin/python3 on node3 (apt-get install" in result.fix


def test_a_daemon_missing_from_path_alone_on_a_node():
    output = "bash: line 1: prted: command not found\n"
    alone = healthy_alone()
    alone["node2"][1] = launch("alone", "node2", ["node2"], ranks=2, rc=127, output=output)
    proof = LaunchProof(alone=alone, all=launch("all", "node1", ["node1", "node3"]))
    (result,) = failures(judge(proof))
    assert result.node == "node2" and result.peer is None
    assert "mpirun with 2 rank(s) on node2 alone: mpirun exited 127" in result.evidence
    assert "not on node2's non-interactive PATH" in result.evidence


def test_no_launch_where_mpirun_is_missing_says_what_env_saw():
    def tweak(facts):
        facts["node2"]["which"]["mpirun"] = {"path": None, "real": None}
        facts["node2"]["env"]["PATH"] = "/nonexistent"

    alone = healthy_alone()
    del alone["node2"]
    proof = LaunchProof(
        alone=alone,
        all=launch("all", "node1", ["node1", "node3"]),
        skipped={"node2": "no mpirun on this node's non-interactive PATH"},
    )
    (result,) = failures(judge(proof, tweak=tweak))
    assert result.node == "node2"
    assert "the env check saw:" in result.evidence and "/nonexistent" in result.evidence


def test_an_output_doctor_does_not_know_is_shown_not_guessed_at():
    output = "something odd happened: error 42 in the frobnicator\n"
    proof = LaunchProof(
        alone=healthy_alone(),
        all=launch("all", "node1", NODES, rc=1, output=output),
        pairs=[
            launch("pair", "node1", ["node1", "node2"], rc=1, output=output),
            launch("pair", "node1", ["node1", "node3"]),
        ],
    )
    (result,) = failures(judge(proof))
    assert "error 42 in the frobnicator" in result.evidence
    assert result.fix.startswith("doctor could not tell the cause")


def test_which_mpirun_and_series_from_the_facts():
    facts = node_facts("node1", 0)
    assert mpirun_of(facts) == ("/usr/bin/mpirun", "")
    assert major_version(facts) == 4
    facts["versions"]["mpi"]["version_text"] = MPICH
    path, why = mpirun_of(facts)
    assert path is None and "is not Open MPI's mpirun" in why
    facts["which"]["mpirun"] = {"path": None, "real": None}
    assert mpirun_of(facts) == (None, "no mpirun on this node's non-interactive PATH")


def test_every_pair_failing_from_both_heads_lands_on_the_one_node_with_a_cause():
    """A loaded machine can fail the healthy pairs too: the node the other checks name
    is the one blamed, not the whole cluster."""

    def tweak(facts):
        for name in NODES:
            facts[name].setdefault("access", {})["mca_files"] = {"/etc/x.conf": []}
        facts["node2"]["access"]["mca_files"] = {"/etc/x.conf": [["btl", "self,vader", 3]]}

    proof = LaunchProof(
        alone=healthy_alone(),
        all=launch("all", "node1", NODES, rc=-9, hung=True, output=""),
        pairs=[
            launch("pair", "node1", ["node1", "node2"], rc=-9, hung=True, output=""),
            launch("pair", "node1", ["node1", "node3"], rc=-9, hung=True, output=""),
            launch("pair", "node2", ["node2", "node3"], rc=-9, hung=True, output=""),
        ],
    )
    g_report = judge(proof, tweak=tweak)
    (result,) = failures(g_report)
    assert result.node == "node2"
    assert "only node2 shows a cause" in result.evidence
    assert "/etc/x.conf:3" in result.fix


def test_two_ranks_on_each_of_two_nodes_is_judged_after_the_whole_cluster():
    """The `shared` launch (2 ranks on each of 2 nodes): its command places them so, a
    pass says so, a hang fails the check even though one rank per node worked."""
    argv = build_argv(
        "/usr/bin/mpirun",
        hosts=["node1", "node2"],
        ranks=4,
        timeout=20,
        python="/usr/bin/python3",
        root=False,
        network_args=[],
        per_node=2,
    )
    assert argv[1:5] == ["--host", "node1:2,node2:2", "-np", "4"]
    shared = Launch("shared", "node1", ["node1", "node2"], 4, argv, 20, 0, False, 0.7, "")
    shared.output = report_line(["node1", "node1", "node2", "node2"])
    shared.hostnames = {n: n for n in NODES}
    proof = LaunchProof(alone=healthy_alone(), all=launch("all", "node1", NODES), shared=shared)
    report = judge(proof)
    assert failures(report) == []
    assert any("2 ranks on each of node1 and node2" in r.evidence for r in report.results)
    hung = Launch("shared", "node1", ["node1", "node2"], 4, argv, 20, 124, True, 20.0, "")
    hung.hostnames = shared.hostnames
    report = judge(
        LaunchProof(alone=healthy_alone(), all=launch("all", "node1", NODES), shared=hung)
    )
    [bad] = failures(report)
    assert "one rank per node worked, 2 ranks on each of node1 and node2 did not" in bad.evidence


def test_a_slow_launch_across_nodes_points_at_bench():
    whole = launch("all", "node1", NODES)
    whole.seconds = 14.0  # each node alone: 0.5 s
    report = judge(LaunchProof(alone=healthy_alone(), all=whole))
    (slow,) = [r for r in report.results if r.status == Status.WARN]
    assert slow.node is None and "14.0 s): slow, each node alone took 0.5 s" in slow.evidence
    assert "mpicluster doctor --perf" in slow.fix and "mpicluster bench" in slow.fix
    whole.seconds = 6.0  # under SLOW_LAUNCH: mpirun's own start
    assert judge(LaunchProof(alone=healthy_alone(), all=whole)).status == Status.PASS


# --- the schedule: round 2 started with round 1, kept only where it is what round 2 is


def prover_after(alone: dict[str, list[Launch]], tweak=None) -> Prover:
    """A Prover over gathered facts, round 1 done with these results."""
    prover = Prover(gathered(tweak=tweak), lambda message: None)
    prover.proof.alone = alone
    return prover


def round_two(prover: Prover, healthy: list[str]) -> tuple[Launch, Launch]:
    """What round 2 calls for once round 1 is in (as Prover.run builds it)."""
    head, count = healthy[0], len(healthy)
    everyone = prover.launch(head, healthy, count, all_timeout(count), "all")
    shared = prover.launch(head, healthy[:2], 4, PAIR_TIMEOUT, "shared", per_node=2)
    return everyone, shared


def test_the_early_launches_are_round_two_when_every_node_passes_alone():
    prover = prover_after(healthy_alone())
    early = prover.early_launches(NODES)
    everyone, shared = round_two(prover, NODES)
    assert same_launch(everyone, early["all"]) and same_launch(shared, early["shared"])
    assert early["all"].hosts == NODES and early["shared"].hosts == ["node1", "node2"]
    assert early["all"].argv[-1] == "mpi"  # mpi4py required: the ranks alone had it


def test_a_node_failing_alone_makes_the_early_launch_across_all_another_launch():
    alone = healthy_alone()
    alone["node3"][1] = launch("alone", "node3", ["node3"], ranks=2, rc=1)
    prover = prover_after(alone)
    early = prover.early_launches(NODES)
    everyone, shared = round_two(prover, ["node1", "node2"])
    assert not same_launch(everyone, early["all"])  # stopped; round 2 runs without node3
    assert same_launch(shared, early["shared"])  # node1 and node2 either way


def test_mpi4py_found_otherwise_than_the_facts_said_makes_every_early_launch_another():
    """The facts list no mpi4py (the early launches do not require it), yet the ranks
    alone ran it: round 2 requires it, so neither early launch is round 2's."""

    def without_mpi4py(facts):
        for node in facts.values():
            node["versions"]["mpi4py"] = None

    prover = prover_after(healthy_alone(), tweak=without_mpi4py)
    early = prover.early_launches(NODES)
    everyone, shared = round_two(prover, NODES)
    assert not same_launch(everyone, early["all"])
    assert not same_launch(shared, early["shared"])


def test_expected_mpi4py_and_a_missing_early_launch():
    assert mpi4py_expected([{"versions": {"mpi4py": None}}, {"versions": {"mpi4py": "4.0.3"}}])
    assert not mpi4py_expected([{"versions": {"mpi4py": None}}, {}])
    assert not same_launch(launch("all", "node1", NODES), None)
    assert Prover(gathered(), lambda message: None).early_launches(["node1"]) == {}


# --- how many launches one node runs at once: Open MPI 4 shares one session directory


class Probes:
    """The nodes' probes as the Prover sees them: each launch order answered with every
    rank started and the exact sum; counts the launches each node may be running at once
    (an order from its request until its answer is taken, `workers` of its launches at a
    time, each on its head and on every node it gives ranks)."""

    def __init__(self, g):
        self.items: dict[tuple[str, int], list[dict]] = {}  # every order sent
        self.orders: dict[tuple[str, int], dict[str, int]] = {}  # those not answered yet
        self.most = dict.fromkeys(NODES, 0)
        for name, session in g.sessions.items():
            session.request = lambda message, name=name: self.request(name, message)
            session.answer = lambda kind, deadline, number, name=name: self.answer(name, number)
            session.answered = lambda kind, deadline, number: True
            session.cancel = lambda number: None

    @staticmethod
    def ranks_on(head: str, argv: list[str]) -> list[str]:
        placement = argv[argv.index("--host") + 1]
        hosts = [part.rsplit(":", 1) for part in placement.split(",")]
        return [head if host == "localhost" else host for host, n in hosts for _ in range(int(n))]

    def request(self, head: str, message: dict) -> int:
        number = len(self.items) + 1
        items, workers = message["launch"]["items"], message["launch"]["workers"]
        load = {}
        for node in NODES:
            touching = [i for i in items if node in {head, *self.ranks_on(head, i["argv"])}]
            load[node] = min(workers, len(touching))
        self.orders[(head, number)], self.items[(head, number)] = load, items
        for node in NODES:
            now = sum(order[node] for order in self.orders.values())
            self.most[node] = max(self.most[node], now)
        return number

    def answer(self, head: str, number: int) -> dict:
        self.orders.pop((head, number), None)
        results = [
            {"id": item["id"], "rc": 0, "hung": False, "seconds": 0.5}
            | {"output": report_line(self.ranks_on(head, item["argv"]))}
            for item in self.items[(head, number)]
        ]
        return {"kind": "launched", "id": number, "results": results}


def scheduled(version_text: str) -> tuple[Probes, LaunchProof]:
    def with_version(facts):
        for node in facts.values():
            node["versions"]["mpi"]["version_text"] = version_text

    g = gathered(tweak=with_version)
    probes = Probes(g)
    return probes, Prover(g, lambda message: None).run()


def test_open_mpi_4_runs_one_launch_at_a_time_on_each_node():
    """ORTE keeps every launch's session directory under one /tmp/ompi.HOST.UID, which a
    launch that ends removes while another creates its own there: the cluster test saw
    "A call to mkdir was unable to create the desired directory" fail node1 alone
    (and with it, node2's mpi4py blamed on node3). One launch per node at a time, as
    before the launches ran at once: the verdicts are those of one round after another."""
    probes, proof = scheduled(OPEN_MPI_4)
    assert probes.most == dict.fromkeys(NODES, 1)
    assert proof.all is not None and proof.all.ok and proof.shared is not None
    assert proof.shared.ok and all(proof.alone_ok(node) for node in NODES)
    assert len(probes.items) == 3 + 2  # one order per node alone, then all, then shared


def test_open_mpi_5_keeps_the_launches_at_once():
    """Its PRRTE gives each launch a session directory of its own: the 1 and 2 ranks alone
    at once, `all` and `shared` started beside them and kept (no launch run twice)."""
    probes, proof = scheduled(OPEN_MPI_5)
    assert probes.most == {"node1": 4, "node2": 4, "node3": 3}
    assert proof.all is not None and proof.all.ok and proof.shared is not None
    assert proof.shared.ok and len(probes.items) == 3 + 2


def test_launches_share_a_node_only_where_every_node_s_open_mpi_allows_it():
    def node(text):
        return {"versions": {"mpi": {"version_text": text}}}

    assert side_by_side([node(OPEN_MPI_5), node(OPEN_MPI_5)])
    assert not side_by_side([node(OPEN_MPI_5), node(OPEN_MPI_4)])  # one 4.x node: none
    assert not side_by_side([node(OPEN_MPI_5), node(MPICH), node(None)])
    assert not side_by_side([node(OPEN_MPI_5), {}])  # a version not read: not assumed
    assert not side_by_side([])
