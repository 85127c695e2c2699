"""The order of the smoke test's node x node ssh matrix."""

from __future__ import annotations

from mpicluster.smoke import peer_order


def test_the_ssh_matrix_spreads_each_round_over_every_node():
    names = [f"n{i}" for i in range(1, 33)]
    order = peer_order(names)
    for name, peers in order.items():
        assert sorted(peers) == sorted(names) and peers[-1] == name
    for round_ in range(len(names)):
        assert len({peers[round_] for peers in order.values()}) == len(names)
    assert peer_order(["a"]) == {"a": ["a"]}
