"""From measured pairs to findings: which node, or which link, is slow.

1. A pair is a suspect when its bandwidth is below SUSPECT x the expected figure (the
   median of the faster half of the pairs measured at the same time, or of all pairs,
   or --expect), or when it carries well less of what the network carries between its
   ends (iperf3, the baseline) than the other pairs do.
2. The second pass measures each suspect again (slow twice is slow, once is noise) and
   pairs each of its ends with a node whose pairs all passed (`retests`): an end that is
   slow with a healthy partner too is a slow node; a suspect both of whose ends are fine
   with others is a slow link.
3. `findings` names each: kind (node or link), the nodes, measured, expected, why;
   `pair_words` says each pair's verdict (why a pair below the expected figure is ok).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from mpicluster.bench.schedule import Pair

#: A pair below this fraction of what is expected of it is a suspect ("well below":
#: pairs measured at once on a busy machine differ by a fifth without any fault).
SUSPECT = 0.6
#: A pair whose MPI carries less than this fraction of the share of its network that
#: MPI carries on the other pairs is a suspect even when its figure is near theirs (a
#: fast link MPI does not use); two measurements' noise: a wider margin.
SUSPECT_SHARE = 0.4
#: A node's second-pass pairs at most: a slow node is in many suspects, and each of its
#: pairs takes a round of its own.
RETESTS_PER_NODE = 2


@dataclass(frozen=True)
class Finding:
    kind: str  # "node" or "link"
    nodes: tuple[str, ...]
    measured: float  # GB/s
    expected: float  # GB/s
    why: str

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "nodes": list(self.nodes),
            "measured": round(self.measured, 3),
            "expected": round(self.expected, 3),
            "why": self.why,
        }


def key(a: str, b: str) -> Pair:
    return (a, b) if a <= b else (b, a)


def expected_of(
    measured: dict[Pair, float],
    expect: float | None = None,
    rounds: dict[Pair, int] | None = None,
) -> dict[Pair, float]:
    """What each pair is expected to carry: `expect` (the user's --expect), else the
    median of the faster half of the pairs measured at the same time (its round, where
    it held ROUND_PEERS pairs or more), else of all pairs (on 3 nodes one slow node is
    in 2 of the 3 pairs: the plain median would be its pairs')."""
    if not measured:
        return {}
    if expect:
        return dict.fromkeys(measured, expect)
    return _typical(measured, rounds)


#: A round with this many pairs or more is its pairs' own yardstick: pairs measured at
#: the same moment share what else loads the nodes and the network (many local nodes
#: on a few cores; a switch busy with other jobs), pairs of other rounds do not.
ROUND_PEERS = 3

#: What the expected figure is (report.py's "expected": {"source": ...}): the user's
#: --expect; the median of the faster half of all pairs; or, where rounds held
#: ROUND_PEERS pairs or more, each round's own (the report's figure: the lowest).
BY_EXPECT = "--expect"
BY_ALL = "median of the faster half of the pairs"
BY_ROUND = "median of the faster half of each round's pairs"


def expected_basis(
    measured: dict[Pair, float], expect: float | None = None, rounds: dict[Pair, int] | None = None
) -> str:
    """Which of BY_EXPECT, BY_ALL, BY_ROUND `expected_of` used for these pairs."""
    if expect:
        return BY_EXPECT
    sizes: dict[int, int] = {}
    for pair in measured:
        if rounds and pair in rounds:
            sizes[rounds[pair]] = sizes.get(rounds[pair], 0) + 1
    return BY_ROUND if any(n >= ROUND_PEERS for n in sizes.values()) else BY_ALL


def _typical(
    values: dict[Pair, float], rounds: dict[Pair, int] | None, alone: bool = True
) -> dict[Pair, float]:
    """Each pair's yardstick: the upper median of its round's values, or of all (where
    `alone`; else none: the pair is left out)."""
    everyone = _upper_median(values.values())
    by_round: dict[int, list[float]] = {}
    for pair, value in values.items():
        if rounds and pair in rounds:
            by_round.setdefault(rounds[pair], []).append(value)
    found = {}
    for pair in values:
        mates = by_round.get(rounds[pair], []) if rounds and pair in rounds else []
        if len(mates) >= ROUND_PEERS:
            found[pair] = _upper_median(mates)
        elif alone:
            found[pair] = everyone
    return found


def _upper_median(values) -> float:
    """The median of the faster half, the higher of two middle values (on 3 nodes with a
    slow one: the healthy pair's figure, not its mean with a slow pair's)."""
    fastest = sorted(values, reverse=True)
    return statistics.median_high(fastest[: (len(fastest) + 1) // 2])


def slow(
    measured: dict[Pair, float],
    expected: dict[Pair, float],
    network: dict[Pair, float] | None = None,
    rounds: dict[Pair, int] | None = None,
) -> set[Pair]:
    """The pairs below SUSPECT x what is expected of them, and those where MPI carries
    well less of what the network carries between them (iperf3) than on the other pairs
    of their round (a pair whose network is slow too is caught by the first rule: a slow
    cable or card; the second catches MPI itself going astray on one link)."""
    return set(slow_reasons(measured, expected, network, rounds))


def slow_reasons(
    measured: dict[Pair, float],
    expected: dict[Pair, float],
    network: dict[Pair, float] | None = None,
    rounds: dict[Pair, int] | None = None,
) -> dict[Pair, str]:
    """`slow`'s pairs, each with the rule it broke in words ("below the 60% threshold")."""
    found = {
        p: f"below the {SUSPECT:.0%} threshold"
        for p, value in measured.items()
        if value < SUSPECT * expected[p]
    }
    # MPI's share of the network, at most all of it (iperf3 and MPI measured a second
    # apart on a busy node differ by a third either way)
    share = {p: min(1.0, measured[p] / network[p]) for p in measured if (network or {}).get(p)}
    if len(share) >= 2:
        # against the pairs measured at the same time only, where rounds are known: MPI
        # (on the CPU) and iperf3 (in the kernel) slow down unalike on a loaded node, so
        # a quiet round's share is no yardstick for a busy one's
        typical = _typical(share, rounds, alone=not rounds)
        for p, value in share.items():
            if p in typical and value < SUSPECT_SHARE * typical[p]:
                said = (
                    f"MPI carries {value:.0%} of what the network carries here against "
                    f"{typical[p]:.0%} on the other pairs, below the {SUSPECT_SHARE:.0%} "
                    "threshold"
                )
                found[p] = f"{found[p]}; {said}" if p in found else said
    return found


def pair_words(gbs: float, counted: float, expected: float, reason: str | None) -> str:
    """One measurement's verdict in words: `gbs` this pass's figure, `counted` the one
    judged (the faster of its passes), `reason` the rule it broke (None: not slow).
    "ok" alone where it carried what was expected; else how far below, and why that
    is ok ("ok: 61% of expected, above the 60% threshold") or not."""
    share = counted / expected if expected > 0 else 1.0
    figure = f"{share:.0%} of expected"
    if gbs < counted:  # the other pass was faster: that one counts
        figure = f"{gbs / expected:.0%} of expected here, {share:.0%} in its other pass"
    if reason:  # above SUSPECT of expected: the share rule alone made it slow
        return f"slow: {figure}{', but ' if share >= SUSPECT else ', '}{reason}"
    if share >= 0.995 and gbs >= counted:  # would read "100% of expected"
        return "ok"
    return f"ok: {figure}, above the {SUSPECT:.0%} threshold"


def suspects(
    measured: dict[Pair, float],
    expect: float | None = None,
    network: dict[Pair, float] | None = None,
    rounds: dict[Pair, int] | None = None,
) -> list[Pair]:
    return sorted(slow(measured, expected_of(measured, expect, rounds), network, rounds))


def retests(measured: dict[Pair, float], suspect: list[Pair], names: list[str]) -> list[Pair]:
    """The second pass: each end of each suspect with a node all of whose pairs passed
    (a different partner for each end where there are enough; at most RETESTS_PER_NODE
    for one node), not a pair already measured."""
    bad_nodes = {n for pair in suspect for n in pair}
    healthy = [n for n in names if n not in bad_nodes]
    wanted: list[Pair] = []
    asked: dict[str, int] = {}
    turn = 0
    for pair in suspect:
        for end in pair:
            if asked.get(end, 0) >= RETESTS_PER_NODE:
                continue  # a slow node in many suspects: two healthy partners tell
            asked[end] = asked.get(end, 0) + 1
            for step in range(len(healthy)):
                partner = healthy[(turn + step) % len(healthy)]
                candidate = key(end, partner)
                if candidate not in measured and candidate not in wanted:
                    wanted.append(candidate)
                    turn += step + 1
                    break
            else:
                # every healthy partner was measured with it already: judge by those
                continue
    return wanted


def merged(measured: dict[Pair, float], second: dict[Pair, float] | None) -> dict[Pair, float]:
    """Both passes; a suspect measured again counts by its faster figure (slow twice is
    slow; once is the noise of a busy node)."""
    found = dict(measured)
    for pair, value in (second or {}).items():
        found[pair] = max(value, found.get(pair, value))
    return found


def findings(
    measured: dict[Pair, float],
    expect: float | None = None,
    second: dict[Pair, float] | None = None,
    network: dict[Pair, float] | None = None,
    tool: str = "iperf3",
    rounds: dict[Pair, int] | None = None,
) -> list[Finding]:
    """Slow nodes and slow links from the first pass (`measured`) and the second
    (`second`), each with what was measured, what was expected and why (`network`: what
    the baseline's `tool` carried on the pairs it measured)."""
    everything = merged(measured, second)
    if len(everything) < 1:
        return []
    expected = expected_of(everything, expect, rounds)
    too_slow = slow(everything, expected, network, rounds)
    nodes: dict[str, list[Pair]] = {}
    for pair in everything:
        for end in pair:
            nodes.setdefault(end, []).append(pair)
    # a node is slow when every pair it is in is slow, and it was measured with at
    # least two partners (one pair alone cannot tell which end is slow)
    slow_nodes = sorted(
        n for n, its in nodes.items() if len(its) >= 2 and all(p in too_slow for p in its)
    )
    said = _NetworkWords(everything, network or {}, tool)
    found: list[Finding] = []
    for node in slow_nodes:
        its = nodes[node]
        worst = max(its, key=lambda p: everything[p] / expected[p])
        partners = [other for p in its for other in p if other != node]
        fine = [o for o in partners if o not in slow_nodes]
        why = f"every pair with {node} is slow ({len(its)}: with {', '.join(sorted(partners))})" + (
            f", while {', '.join(sorted(fine))} {'are' if len(fine) > 1 else 'is'} "
            "fast with other nodes"
            if fine
            else ""
        )
        found.append(
            Finding("node", (node,), everything[worst], expected[worst], why + said(worst))
        )
    for pair in [p for p in sorted(measured) if p in too_slow]:
        if any(end in slow_nodes for end in pair):
            continue
        others = {end: [p for p in nodes[end] if p != pair] for end in pair}
        if all(others[end] and not any(p in too_slow for p in others[end]) for end in pair):
            fast = "; ".join(", ".join(_partners(end, others)) for end in pair)
            why = (
                f"{pair[0]} and {pair[1]} are each fast with other nodes ({fast}), "
                "slow only with each other"
            )
        else:
            why = (
                f"{pair[0]}-{pair[1]} is slow; neither end was measured fast with another "
                "node, so node and link cannot be told apart"
            )
        found.append(Finding("link", pair, everything[pair], expected[pair], why + said(pair)))
    return found


class _NetworkWords:
    """What the baseline (iperf3, ib_write_bw) says of a slow pair: the network is slow
    there too (a cable, a card, a switch port), or it is not and MPI does not use what
    it carries."""

    def __init__(self, measured: dict[Pair, float], network: dict[Pair, float], tool: str):
        self.measured, self.network, self.tool = measured, network, tool
        self.typical = _upper_median(network.values()) if network else 0.0

    def __call__(self, pair: Pair) -> str:
        carried = self.network.get(pair)
        if not carried:
            return ""
        if carried < SUSPECT * self.typical:
            return (
                f"; {self.tool} carries {carried:.2f} GB/s there against {self.typical:.2f} "
                "elsewhere: the network itself is slow, not MPI"
            )
        return (
            f"; {self.tool} carries {carried:.2f} GB/s there, as elsewhere: the network is "
            f"fine, MPI reaches {self.measured[pair] / carried:.0%} of it"
        )


def _partners(end: str, others: dict[str, list[Pair]]) -> list[str]:
    return [f"{end}-{o}" for p in others[end] for o in p if o != end]
