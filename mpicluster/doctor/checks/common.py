"""Helpers the checks share: per-node judging, majority votes, ssh error causes."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Hashable

from mpicluster.doctor.model import CheckReport, Result
from mpicluster.doctor.runner import Gathered

UP = "run `mpicluster up`"


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


#: What an OpenSSH client's stderr means, most specific first.
SSH_CAUSES = [
    ("host_key_changed", ("remote host identification has changed", "host key for")),
    ("host_key_unknown", ("host key verification failed", "no ed25519 host key is known")),
    ("denied", ("permission denied",)),
    ("resolve", ("could not resolve hostname", "name or service not known")),
    ("timeout", ("timed out", "operation timed out")),
    ("unreachable", ("no route to host", "network is unreachable")),
    ("refused", ("connection refused",)),
    ("closed", ("connection closed by", "connection reset", "kex_exchange_identification")),
]


def ssh_cause(stderr: str, rc: int | None) -> str:
    if rc is None:
        return "timeout"
    text = stderr.lower()
    if "remote host identification has changed" in text:
        return "host_key_changed"
    for cause, needles in SSH_CAUSES:
        if any(needle in text for needle in needles):
            return cause
    return "command" if rc not in (0, 255) else "other"


def last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    lines = [line for line in lines if not set(line) <= set("@ ")]
    return lines[-1] if lines else ""


def offered_fingerprint(stderr: str) -> str | None:
    match = re.search(r"(SHA256:[A-Za-z0-9+/]{20,})", stderr or "")
    return match.group(1) if match else None
