"""Which node pairs the mesh and port checks try, and in what order.

Up to SAMPLE_ABOVE nodes (or with --all-pairs) every ordered pair of distinct nodes
is tried; above that each node tries its ring neighbour (i -> i+1, so every node logs
in and is logged into) and a seeded sample of PER_NODE - 1 other targets (PER_NODE * N
pairs). The mesh check judges every pair not tried from both nodes' facts (what a
login depends on, read on each node), so a fault of one pair is found either way.

Order matters on real clusters: sshd drops bursts of unauthenticated connections
beyond its MaxStartups (10 by default). In round r node i tries node i+r, so each
round sends every node exactly one connection; a node working through its list
with a few connections at once keeps every target's burst that small.
"""

from __future__ import annotations

import hashlib
import random

SAMPLE_ABOVE = 8
PER_NODE = 4


def seed_for(cluster: str) -> int:
    """The default seed: stable for a cluster, so reruns try the same pairs."""
    return int.from_bytes(hashlib.sha256(cluster.encode()).digest()[:4], "big")


def plan(names: list[str], *, all_pairs: bool = False, seed: int = 0) -> dict[str, list[str]]:
    """Targets of each source node, in round-robin order."""
    count = len(names)
    if count < 2:
        return {name: [] for name in names}
    if all_pairs or count <= SAMPLE_ABOVE:
        offsets = list(range(1, count))
    else:
        sample = random.Random(seed).sample(range(2, count), PER_NODE - 1)  # noqa: S311
        offsets = [1, *sorted(sample)]
    return {name: [names[(i + o) % count] for o in offsets] for i, name in enumerate(names)}


def is_sampled(count: int, all_pairs: bool) -> bool:
    return not all_pairs and count > SAMPLE_ABOVE


def attribute(
    tried: list[tuple[str, str]], failed: set[tuple[str, str]]
) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """Blame nodes for failed pairs where the pattern points at one node.

    A node is to blame when every pair into it failed ("in", at least two sources
    tried) or every pair out of it failed ("out", at least two targets tried), while
    some other pair worked. Returns ({node: "in" | "out" | "both"}, the failed pairs
    that no blamed node explains).
    """
    if not failed or len(failed) == len(tried):
        # everything failed: nothing to tell nodes apart by; blame each node that has
        # pairs, as both ends
        if failed and len(failed) == len(tried):
            nodes = sorted({s for s, _ in tried} | {t for _, t in tried})
            return dict.fromkeys(nodes, "both"), []
        return {}, []
    into: dict[str, list[bool]] = {}
    out_of: dict[str, list[bool]] = {}
    for source, target in tried:
        bad = (source, target) in failed
        into.setdefault(target, []).append(bad)
        out_of.setdefault(source, []).append(bad)
    blamed: dict[str, str] = {}
    for node, marks in into.items():
        if len(marks) >= 2 and all(marks):
            blamed[node] = "in"
    for node, marks in out_of.items():
        if len(marks) >= 2 and all(marks):
            blamed[node] = "both" if node in blamed else "out"
    rest = [
        (s, t)
        for s, t in tried
        if (s, t) in failed
        and blamed.get(t) not in ("in", "both")
        and blamed.get(s) not in ("out", "both")
    ]
    return blamed, rest
