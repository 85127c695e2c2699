"""The order of the smoke test's node x node ssh matrix."""

from __future__ import annotations

from mpicluster.nodes import pairs
from mpicluster.smoke.steps import peer_order


def test_the_ssh_matrix_spreads_each_round_over_every_node():
    names = [f"n{i}" for i in range(1, 33)]
    order = peer_order(names)
    for name, peers in order.items():
        assert sorted(peers) == sorted(names) and peers[-1] == name
    for round_ in range(len(names)):
        assert len({peers[round_] for peers in order.values()}) == len(names)
    assert peer_order(["a"]) == {"a": ["a"]}


def test_above_eight_nodes_each_node_is_seen_by_a_ring_neighbour_and_a_sample():
    names = [f"n{i}" for i in range(1, 33)]
    order = peer_order(names, seed=pairs.seed_for("demo"))
    targets_of_all = [t for peers in order.values() for t in peers]
    for name, peers in order.items():
        assert len(peers) == pairs.PER_NODE + 1 and peers[-1] == name
        assert len(set(peers)) == len(peers)
        assert peers[0] == names[(names.index(name) + 1) % len(names)]  # the ring
    # every node is logged into by its ring predecessor, its sample's sources and itself
    assert {t: targets_of_all.count(t) for t in names} == dict.fromkeys(names, pairs.PER_NODE + 1)
    assert order == peer_order(names, seed=pairs.seed_for("demo"))  # reruns try the same
    # eight nodes or fewer: every pair, seed or not
    few = [f"n{i}" for i in range(1, 9)]
    assert peer_order(few, seed=7) == peer_order(few)
