"""bench's pure logic: which pairs, in which rounds, and the verdict (slow node or slow
link) from measured bandwidths."""

from __future__ import annotations

import itertools

from mpicluster.bench import schedule, verdict

NAMES = [f"node{i}" for i in range(1, 7)]


def test_small_clusters_measure_every_pair_in_disjoint_rounds():
    measured = schedule.pairs(NAMES)
    assert len(measured) == 15 and len(set(measured)) == 15
    rounds = schedule.rounds(measured)
    assert sorted(p for r in rounds for p in r) == sorted(measured)
    for group in rounds:
        ends = [n for pair in group for n in pair]
        assert len(ends) == len(set(ends))  # a node is in one pair per round
    assert len(rounds) <= 7  # 5 would be optimal; greedy stays close


def test_big_clusters_measure_a_ring_and_a_sample_that_covers_every_node():
    names = [f"n{i:03d}" for i in range(64)]
    measured = schedule.pairs(names, seed=7)
    assert len(measured) <= 4 * 64
    ring = {verdict.key(names[i], names[(i + 1) % 64]) for i in range(64)}
    assert ring <= set(measured)
    assert schedule.pairs(names, seed=7) == measured  # seeded: reruns measure the same
    assert len(schedule.pairs(names, all_pairs=True)) == 64 * 63 // 2
    assert len(schedule.rounds(measured)) <= 12


def everything(names, value=10.0):
    return {verdict.key(a, b): value for a, b in itertools.combinations(names, 2)}


def test_a_healthy_cluster_has_no_suspect_and_no_finding():
    measured = everything(NAMES)
    measured[("node1", "node2")] = 9.0  # within the noise
    assert verdict.suspects(measured) == []
    assert verdict.findings(measured) == []


def test_a_slow_node_is_named_as_the_node_not_as_its_links():
    measured = schedule.pairs(NAMES[:4])  # every pair of 4 nodes
    bw = {p: (2.0 if "node3" in p else 10.0) for p in measured}
    suspects = verdict.suspects(bw)
    assert suspects == [("node1", "node3"), ("node2", "node3"), ("node3", "node4")]
    (found,) = verdict.findings(bw)
    assert (found.kind, found.nodes, found.measured, found.expected) == (
        "node",
        ("node3",),
        2.0,
        10.0,
    )
    assert found.why.startswith("every pair with node3 is slow (3: with node1, node2, node4)")


def test_a_slow_link_is_told_from_its_nodes_by_the_second_pass():
    # a ring of 6 measured first: node1-node2 slow
    ring = [verdict.key(NAMES[i], NAMES[(i + 1) % 6]) for i in range(6)]
    first = {p: 10.0 for p in ring}
    first[("node1", "node2")] = 3.0
    suspect = verdict.suspects(first)
    assert suspect == [("node1", "node2")]
    again = verdict.retests(first, suspect, NAMES)
    assert len(again) == 2 and all(p not in first for p in again)
    assert {n for p in again for n in p} >= {"node1", "node2"}
    second = {p: 10.0 for p in again}  # each end is fast with a healthy partner
    (found,) = verdict.findings(first, second=second)
    assert (found.kind, found.nodes) == ("link", ("node1", "node2"))
    assert "slow only with each other" in found.why
    # node1 slow with both ring neighbours, and with its second-pass partner too: the node
    first[("node1", "node6")] = 3.0
    suspect = verdict.suspects(first)
    again = verdict.retests(first, suspect, NAMES)
    second = {p: (3.0 if "node1" in p else 10.0) for p in again}
    (found,) = verdict.findings(first, second=second)
    assert (found.kind, found.nodes, found.expected) == ("node", ("node1",), 10.0)


def test_a_pair_whose_network_is_slow_too_is_flagged_and_the_network_is_blamed():
    bw = everything(NAMES[:4], 10.0)
    network = {p: 12.0 for p in bw}
    network[("node1", "node2")] = 4.0  # the cable carries only 4 there, MPI 3.5 of it
    bw[("node1", "node2")] = 3.5
    assert verdict.suspects(bw, network=network) == [("node1", "node2")]
    (found,) = verdict.findings(bw, network=network)
    assert (found.kind, found.nodes, found.measured, found.expected) == (
        "link",
        ("node1", "node2"),
        3.5,
        10.0,
    )
    assert "iperf3 carries 4.00 GB/s there against 12.00 elsewhere" in found.why
    assert "the network itself is slow, not MPI" in found.why
    assert found.to_dict() == {
        "kind": "link",
        "nodes": ["node1", "node2"],
        "measured": 3.5,
        "expected": 10.0,
        "why": found.why,
    }


def test_mpi_using_little_of_a_fast_link_is_flagged_though_near_the_median():
    # the network carries 30 between node1 and node2 and 12 elsewhere; MPI reaches 8 on
    # that pair (above 0.6 x the median 10) and 10 on the others: the link is suspect
    bw = everything(NAMES[:4], 10.0)
    network = {p: 12.0 for p in bw}
    network[("node1", "node2")] = 30.0
    bw[("node1", "node2")] = 8.0
    (found,) = verdict.findings(bw, network=network)
    assert (found.kind, found.nodes) == ("link", ("node1", "node2"))
    assert "the network is fine, MPI reaches 27% of it" in found.why


def test_expect_overrides_the_median():
    bw = everything(NAMES[:3], 10.0)
    assert verdict.suspects(bw, expect=12.0) == []
    assert verdict.suspects(bw, expect=20.0) == sorted(bw)
    assert {p: v for p, v in verdict.expected_of(bw, 20.0).items()} == dict.fromkeys(bw, 20.0)


def test_a_suspect_fast_when_measured_again_was_noise():
    first = everything(NAMES[:3], 10.0)
    first[("node1", "node3")] = 4.0  # a busy moment
    assert verdict.suspects(first) == [("node1", "node3")]
    assert verdict.findings(first, second={("node1", "node3"): 9.5}) == []
    (found,) = verdict.findings(first, second={("node1", "node3"): 3.0})  # slow twice
    assert (found.kind, found.nodes, found.measured) == ("link", ("node1", "node3"), 4.0)


def test_pairs_are_judged_against_the_pairs_measured_at_the_same_time():
    # many local nodes on a few cores: a round of 6 pairs runs at a third of the speed
    # of a round of 2; a slow node is slow against its own round, not the quiet one
    busy = [("a", "b"), ("c", "d"), ("e", "f"), ("g", "h"), ("i", "j"), ("k", "l")]
    quiet = [("a", "c"), ("b", "d")]
    measured = {**dict.fromkeys(busy, 1.0), **dict.fromkeys(quiet, 3.0)}
    rounds = {**dict.fromkeys(busy, 1), **dict.fromkeys(quiet, 2)}
    assert len(verdict.suspects(measured)) == 6  # against every pair: the busy round
    assert verdict.suspects(measured, rounds=rounds) == []
    measured[("k", "l")] = 0.3
    assert verdict.suspects(measured, rounds=rounds) == [("k", "l")]
