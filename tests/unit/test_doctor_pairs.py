"""Which pairs doctor tries, in what order, and which node a pattern of failures blames."""

from __future__ import annotations

from collections import Counter

from mpicluster.nodes import pairs

NAMES = [f"n{i}" for i in range(1, 9)]


def test_every_ordered_pair_up_to_the_threshold_in_round_robin_order():
    plan = pairs.plan(NAMES)
    assert set(plan) == set(NAMES)
    tried = {(s, t) for s, targets in plan.items() for t in targets}
    assert tried == {(s, t) for s in NAMES for t in NAMES if s != t}
    # round r: node i tries node i+r, so every node is the target of one pair per round
    for r in range(len(NAMES) - 1):
        targets = [plan[s][r] for s in NAMES]
        assert sorted(targets) == sorted(NAMES)
    assert plan["n1"][0] == "n2" and plan["n8"][0] == "n1"


def test_above_the_threshold_a_seeded_balanced_sample():
    names = [f"n{i}" for i in range(100)]
    plan = pairs.plan(names, seed=7)
    assert all(len(targets) == pairs.PER_NODE for targets in plan.values())
    assert all(s not in targets for s, targets in plan.items())
    into = Counter(t for targets in plan.values() for t in targets)
    assert set(into.values()) == {pairs.PER_NODE}  # every node is a target as often
    assert plan == pairs.plan(names, seed=7)
    assert plan != pairs.plan(names, seed=8)
    assert pairs.is_sampled(100, all_pairs=False)
    full = pairs.plan(names, all_pairs=True)
    assert sum(len(t) for t in full.values()) == 100 * 99
    assert not pairs.is_sampled(100, all_pairs=True) and not pairs.is_sampled(8, False)
    # the ring: every node logs in to its neighbour, and is logged into
    assert all(plan[n][0] == names[(i + 1) % 100] for i, n in enumerate(names))


def test_tiny_clusters():
    assert pairs.plan(["a"]) == {"a": []}
    assert pairs.plan(["a", "b"]) == {"a": ["b"], "b": ["a"]}


def _all(names):
    return [(s, t) for s in names for t in names if s != t]


def test_blames_the_node_every_pair_into_it_fails():
    tried = _all(["a", "b", "c"])
    blamed, rest = pairs.attribute(tried, {("a", "b"), ("c", "b")})
    assert blamed == {"b": "in"} and rest == []


def test_blames_both_ways_for_a_node_cut_off():
    tried = _all(["a", "b", "c", "d"])
    failed = {p for p in tried if "b" in p}
    blamed, rest = pairs.attribute(tried, failed)
    assert blamed == {"b": "both"} and rest == []


def test_a_single_broken_pair_stays_a_pair():
    tried = _all(["a", "b", "c"])
    blamed, rest = pairs.attribute(tried, {("a", "c")})
    assert blamed == {} and rest == [("a", "c")]


def test_two_nodes_cannot_be_told_apart():
    blamed, rest = pairs.attribute([("a", "b"), ("b", "a")], {("a", "b")})
    assert blamed == {} and rest == [("a", "b")]


def test_everything_failing_blames_every_node():
    tried = _all(["a", "b", "c"])
    blamed, rest = pairs.attribute(tried, set(tried))
    assert blamed == {"a": "both", "b": "both", "c": "both"} and rest == []
    assert pairs.attribute(tried, set()) == ({}, [])
