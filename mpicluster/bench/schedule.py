"""Which node pairs bench measures, and in which rounds.

By default each node is paired with its ring neighbour and a seeded sample of others
(about PER_NODE pairs per node, O(N) in all, as doctor schedules its logins); with
all_pairs, every unordered pair. A pair measures both directions at once, so (a, b)
and (b, a) are one pair. Pairs are grouped in rounds of disjoint pairs: a node is in
at most one pair per round, so a round measures links, not a node's share of them,
and it takes the time of one pair.
"""

from __future__ import annotations

import random

from mpicluster.nodes.pairs import PER_NODE, SAMPLE_ABOVE

Pair = tuple[str, str]


def pairs(names: list[str], *, all_pairs: bool = False, seed: int = 0) -> list[Pair]:
    """The unordered pairs to measure, each as (earlier, later) in `names`' order."""
    count = len(names)
    if count < 2:
        return []
    if all_pairs or count <= SAMPLE_ABOVE:
        offsets = range(1, count)
    else:
        sample = random.Random(seed).sample(range(2, count - 1), PER_NODE - 1)  # noqa: S311
        offsets = [1, *sorted(sample)]
    order = {name: i for i, name in enumerate(names)}
    found: set[Pair] = set()
    for i, name in enumerate(names):
        for offset in offsets:
            other = names[(i + offset) % count]
            found.add(tuple(sorted((name, other), key=order.__getitem__)))  # type: ignore[arg-type]
    return sorted(found, key=lambda p: (order[p[0]], order[p[1]]))


def rounds(measured: list[Pair]) -> list[list[Pair]]:
    """`measured` in rounds of disjoint pairs (greedy: each pair goes to the first round
    where neither node is busy; for a ring plus a sample that is a few rounds more than
    a node's pairs)."""
    busy: list[set[str]] = []
    grouped: list[list[Pair]] = []
    for a, b in measured:
        for index, nodes in enumerate(busy):
            if a not in nodes and b not in nodes:
                nodes.update((a, b))
                grouped[index].append((a, b))
                break
        else:
            busy.append({a, b})
            grouped.append([(a, b)])
    return grouped
