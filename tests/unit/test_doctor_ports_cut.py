"""A launch across nodes that includes a node the ports check blames is stopped after a
few seconds instead of hanging to its timeout, and no pair launch with that node runs
after it: the node is named from what the ports check saw (launch_proof.CUT_SECONDS).
The probes here answer as a node dropping its high ports makes them answer: every
launch giving node2 ranks beside another node never ends until it is cancelled."""

from __future__ import annotations

import threading
import time

import pytest

from mpicluster.doctor import launch_proof
from mpicluster.doctor.launch_proof import Prover
from tests.unit.test_doctor_checks import gathered
from tests.unit.test_doctor_launch import NODES, Probes, failures, judge
from tests.unit.test_mpi_version import OPEN_MPI_5


class Firewalled(Probes):
    """node2 drops its high ports: a launch across nodes with ranks on it answers only
    once cancelled (mpirun stopped: rc -15, no output)."""

    def __init__(self, g, alone_too: bool = False):
        super().__init__(g)
        self.alone_too = alone_too  # its rule drops loopback too: even alone it hangs
        self.cancelled: set[tuple[str, int]] = set()
        for name, session in g.sessions.items():
            session.answered = lambda kind, deadline, number, name=name: self.answered(
                name, number, deadline
            )
            session.cancel = lambda number, name=name: self.cancelled.add((name, number))

    def hangs(self, head: str, number: int) -> bool:
        for item in self.items[(head, number)]:
            ranks = set(self.ranks_on(head, item["argv"]))
            if "node2" in ranks and (len(ranks) > 1 or self.alone_too):
                return True
        return False

    def answered(self, head: str, number: int, deadline: float) -> bool:
        if not self.hangs(head, number) or (head, number) in self.cancelled:
            return True
        time.sleep(max(0.0, min(deadline - time.monotonic(), 0.05)))
        return False

    def answer(self, head: str, number: int) -> dict:
        if not self.hangs(head, number):
            return super().answer(head, number)
        assert (head, number) in self.cancelled, "a hanging launch was waited for"
        self.orders.pop((head, number), None)
        results = [
            {"id": item["id"], "rc": -15, "hung": False, "seconds": 0.3, "output": ""}
            for item in self.items[(head, number)]
        ]
        return {"kind": "launched", "id": number, "results": results}


def with_open_mpi_5(facts):
    for node in facts.values():
        node["versions"]["mpi"]["version_text"] = OPEN_MPI_5


def blocked_into(node: str) -> dict:
    tcp = {}
    for source in NODES:
        for target in NODES:
            if source != target:
                fails = {"ok": False, "error": "timed out", "seconds": 3.0}
                works = {"ok": True, "error": "", "seconds": 0.01}
                tcp[(source, target)] = {"peer": target, **(fails if target == node else works)}
    return tcp


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr(launch_proof, "CUT_SECONDS", 0.3)
    monkeypatch.setattr(launch_proof, "POLL", 0.02)


@pytest.mark.parametrize("blamed_after", [None, 0.15])
def test_a_launch_with_a_blamed_node_is_cut_short_and_the_node_named(blamed_after):
    """The ports check's verdict known before the launch across nodes, or only while it
    runs (the pairs and the launches run at once): either way it is stopped, the pair
    with node2 is not run, the one with node3 is, and the judge names node2."""
    g = gathered(tweak=with_open_mpi_5, tcp_pairs=blocked_into("node2"))
    probes = Firewalled(g)
    if blamed_after is None:
        g.ports_blamed = {"node2": "in"}
    else:
        timer = threading.Timer(blamed_after, lambda: setattr(g, "ports_blamed", {"node2": "in"}))
        timer.start()
    started = time.monotonic()
    proof = Prover(g, lambda message: None).run()
    assert time.monotonic() - started < 3.0
    assert proof.all is not None and proof.all.hung and "node2" in proof.all.cut
    assert "then stopped: the ports check found TCP to high ports fails into node2" in (
        proof.all.problem
    )
    assert ("node1", 1) not in probes.cancelled  # the launches alone were kept
    pairs = {tuple(p.hosts): p for p in proof.pairs}
    assert pairs[("node1", "node3")].ok
    assert pairs[("node1", "node2")].problem.startswith("not run: the ports check found")
    sent = [i for items in probes.items.values() for i in items]
    assert not any("node2" in i["argv"][i["argv"].index("--host") + 1] for i in sent[-1:])
    (result,) = failures(judge(proof, tcp_pairs=blocked_into("node2")))
    assert result.node == "node2"
    assert "the ports check saw:" in result.evidence


def test_without_a_blame_nothing_is_cut():
    """A healthy cluster's launches across nodes are never cut, whatever their time."""
    g = gathered(tweak=with_open_mpi_5)
    g.ports_blamed = {}
    probes = Probes(g)
    proof = Prover(g, lambda message: None).run()
    assert proof.all is not None and proof.all.ok and not proof.all.cut
    assert proof.shared is not None and proof.shared.ok and not proof.pairs
    assert len(probes.items) == 3 + 2


def test_the_wait_is_three_times_the_slowest_launch_alone():
    g = gathered(tweak=with_open_mpi_5)
    prover = Prover(g, lambda message: None)
    assert prover.cut_after() == 0.3  # nothing launched yet: CUT_SECONDS
    from tests.unit.test_doctor_launch import healthy_alone

    prover.proof.alone = healthy_alone()  # each 0.5 s
    assert prover.cut_after() == 1.5


def test_the_blame_is_the_ports_check_s_and_none_where_every_pair_failed():
    from mpicluster.doctor.runner import ports_blame

    assert ports_blame(gathered(tcp_pairs=blocked_into("node2"))) == {"node2": "in"}
    healthy = {pair: {**item, "ok": True} for pair, item in blocked_into("node2").items()}
    assert ports_blame(gathered(tcp_pairs=healthy)) == {}
    everything = {pair: {**item, "ok": False} for pair, item in healthy.items()}
    assert ports_blame(gathered(tcp_pairs=everything)) == {}


def test_a_blamed_node_that_hangs_even_alone_is_cut_short_and_left_out_of_the_rest():
    """A rule that drops the node's loopback high ports too (PRRTE's local daemon and
    ranks talk over TCP): its launches alone hang as well. They are cut short, the
    launches across nodes run without it, and the judge names it."""
    g = gathered(tweak=with_open_mpi_5, tcp_pairs=blocked_into("node2"))
    probes = Firewalled(g, alone_too=True)
    g.ports_blamed = {"node2": "both"}
    started = time.monotonic()
    proof = Prover(g, lambda message: None).run()
    assert time.monotonic() - started < 3.0
    assert [x.cut != "" for x in proof.alone["node2"]] == [True, True]
    assert "into and out of node2" in proof.alone["node2"][0].problem
    assert proof.alone_ok("node1") and proof.alone_ok("node3")
    assert proof.all is not None and proof.all.ok and proof.all.hosts == ["node1", "node3"]
    assert ("node2", 1) not in probes.orders  # nothing of node2's left waiting
    (result,) = failures(judge(proof, tcp_pairs=blocked_into("node2")))
    assert result.node == "node2" and "the ports check saw:" in result.evidence
