"""Helpers the checks share: per-node judging, majority votes, sizes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

from mpicluster.doctor.model import CheckReport, Result

if TYPE_CHECKING:
    from mpicluster.doctor.runner import Gathered

UP = "run `mpicluster up`"


def set_at(line: str | None, otherwise: str) -> str:
    """Where a startup line ("file:line: text", as the probe reports them) sets
    something, in words; `otherwise` when no line does."""
    if not line:
        return otherwise
    place, _, text = line.partition(": ")
    return f"set at {place} (`{text}`)"


def per_node(
    g: Gathered, name: str, title: str, judge: Callable[[str, dict], list[Result]]
) -> CheckReport:
    """Judge each node that answered the probe; list the others as not checked."""
    report = CheckReport(name, title, not_checked=g.unprobed)
    for node in g.probed:
        report.results.extend(judge(node, g.facts(node) or {}))
    return report


def majority(values: dict[str, Hashable]) -> tuple[Hashable | None, list[str]]:
    """The value most nodes share and the nodes that differ from it.

    With no strict majority, the value of the first node (inventory order) counts as
    the reference, so the report stays readable; every other group differs.
    """
    if not values:
        return None, []
    counts = Counter(values.values())
    ranked = counts.most_common()
    best, top = ranked[0]
    if len(ranked) > 1 and ranked[1][1] == top:
        best = next(iter(values.values()))
    return best, [node for node, value in values.items() if value != best]


def plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit in ("B", "KiB") else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
