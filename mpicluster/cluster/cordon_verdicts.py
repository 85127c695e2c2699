"""What `doctor --cordon` and `bench --cordon` change: the failures one run found, and the
cordon state, to the nodes to cordon and the nodes to return. Pure here (findings in, a
decision out); mpicluster/health reads the state from the nodes and writes it back.

The rules:

- A failure cordons the one node it is put on (`Failure.node`). A warning is no
  failure; a failure put on no single node cordons nothing: a pair's (a login from one
  node to another, a slow link: either end may be the cause) or the whole cluster's.
  Each command puts a failure on a node as its report does (doctor: a result with a
  node and no peer, its own blame of one node for a pattern of pair failures included;
  bench: a slow node). Its reason is the finding, `doctor: disk: /tmp is not writable
  ...`, one line of at most REASON_MAX characters.
- The cluster's fault is no node's: a check that fails on every node it looked at
  (more than one) cordons none of them, and neither does a run whose failures would
  cordon every node it looked at.
- A node is returned when this command cordoned it (never an operator's cordon, nor the
  other command's), the check its reason names ran again, every check of this run
  looked at it, no failure names it (a pair's included) and nothing failed for the
  whole cluster (a cluster that fails as a whole proves no node healthy).
- A node already cordoned stays as it is: its reason, since and by.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mpicluster.cluster.cordons import REASON_MAX, Cordon, CordonState

#: How many pairs a note names before it counts the rest.
SHOWN = 3


@dataclass(frozen=True)
class Failure:
    check: str
    evidence: str
    #: The one node it is put on; None: a pair's failure or the whole cluster's.
    node: str | None = None
    #: Every node it names (a pair's two ends): none of them is returned by this run.
    names: tuple[str, ...] = ()


@dataclass
class Findings:
    """One run of doctor or bench, as cordoning reads it."""

    #: The command (cordons.BY): it returns only the nodes it cordoned itself.
    by: str
    #: Each check that ran, in the report's order, with the nodes it looked at.
    checks: dict[str, set[str]]
    #: Its failures, in the report's order (a node's first is its reason).
    failures: list[Failure] = field(default_factory=list)

    @property
    def looked(self) -> set[str]:
        """Every node some check of the run looked at."""
        return set().union(*self.checks.values()) if self.checks else set()


@dataclass
class Decision:
    #: node: the reason it is cordoned with.
    cordon: dict[str, str] = field(default_factory=dict)
    #: The nodes to return, in the state's order.
    give_back: list[str] = field(default_factory=list)
    #: Why a failure cordons nothing, or a node is not returned yet: one line each.
    notes: list[str] = field(default_factory=list)

    @property
    def changes(self) -> bool:
        return bool(self.cordon or self.give_back)

    def applied(self, state: CordonState, *, by: str, who: str, at: float) -> CordonState:
        """The state with every change made, one version newer (one write)."""
        kept = {n: c for n, c in state.cordons.items() if n not in self.give_back}
        kept.update({n: Cordon(reason, at, by, who) for n, reason in self.cordon.items()})
        return CordonState(state.version + 1, kept)

    def to_dict(self) -> dict[str, Any]:
        return {"cordoned": self.cordon, "returned": self.give_back, "notes": self.notes}


def decide(found: Findings, state: CordonState) -> Decision:
    """The nodes `found`'s failures cordon, and the nodes `found.by` cordoned that pass now."""
    decision = Decision()
    blamed = _blamed(found, decision.notes)
    looked = found.looked
    if len(looked) > 1 and looked <= set(blamed):
        shown = ", ".join(f"{node}: {f.check}" for node, f in sorted(blamed.items()))
        decision.notes.append(
            f"not cordoning: every node fails a check ({shown}): the cluster's fault, not a node's"
        )
        blamed = {}
    for node, failure in blamed.items():
        if node not in state.cordons:
            decision.cordon[node] = reason(found.by, failure.check, failure.evidence)
    decision.give_back = _passing(found, state, decision.notes)
    return decision


def _blamed(found: Findings, notes: list[str]) -> dict[str, Failure]:
    """Each node a failure is put on, with its first failure; a check every node it looked
    at fails blames none of them. A note for each failure put on no node."""
    everyone = found.looked
    by_check: dict[str, list[Failure]] = {}
    for failure in found.failures:
        by_check.setdefault(failure.check, []).append(failure)
    blamed: dict[str, Failure] = {}
    for check, failures in by_check.items():
        nodes = {f.node for f in failures if f.node is not None}
        looked = found.checks.get(check, everyone)
        if len(looked) > 1 and looked <= nodes:
            notes.append(
                f"not cordoning for {check}: every node fails it ({len(looked)} nodes): "
                "the cluster's fault, not a node's"
            )
            nodes = set()
        for failure in failures:
            if failure.node in nodes:
                blamed.setdefault(failure.node, failure)
        notes.extend(_unplaced(check, [f for f in failures if f.node is None]))
    return blamed


def _unplaced(check: str, failures: list[Failure]) -> list[str]:
    """What is said of a check's failures put on no single node."""
    pairs = ["-".join(f.names) for f in failures if len(f.names) > 1]
    whole = [f for f in failures if not f.names]
    notes = []
    if pairs:
        shown = ", ".join(pairs[:SHOWN]) + (f" +{len(pairs) - SHOWN}" if len(pairs) > SHOWN else "")
        notes.append(
            f"not cordoning for {check} between two nodes ({shown}): either end may be "
            "the cause, so neither is cordoned"
        )
    if whole:
        notes.append(f"not cordoning for {check}: it failed for the whole cluster, not a node")
    return notes


def _passing(found: Findings, state: CordonState, notes: list[str]) -> list[str]:
    """The nodes `found.by` cordoned that this run looked at and found nothing against."""
    mine = [n for n, c in state.cordons.items() if c.by == found.by and _rechecked(found, n, c)]
    named = {name for f in found.failures for name in (f.node, *f.names) if name}
    clean = [n for n in mine if n not in named]
    whole = [f.check for f in found.failures if f.node is None and not f.names]
    if clean and whole:
        notes.append(
            f"not returning {', '.join(clean)} yet: it passes, but {whole[0]} failed for the "
            "whole cluster"
        )
        return []
    return clean


def _rechecked(found: Findings, node: str, cordon: Cordon) -> bool:
    """Every check of the run looked at `node`, and the check it was cordoned for ran."""
    check = cordoned_for(found.by, cordon.reason)
    if check is not None and check not in found.checks:
        return False
    return bool(found.checks) and all(node in looked for looked in found.checks.values())


def reason(by: str, check: str, evidence: str) -> str:
    """`doctor: disk: /tmp is not writable ...`: one line, control characters made spaces,
    at most REASON_MAX characters (as cordons.check_reason keeps a reason)."""
    text = f"{by}: {check}: {evidence}"
    text = "".join(" " if ord(ch) < 32 or ord(ch) == 127 else ch for ch in text)
    text = " ".join(text.split())
    if len(text) > REASON_MAX:
        text = text[: REASON_MAX - 3].rstrip() + "..."
    return text


def cordoned_for(by: str, text: str) -> str | None:
    """The check a reason `reason(by, ...)` made names; None for another reason."""
    rest = text.removeprefix(f"{by}: ")
    if rest == text or ": " not in rest:
        return None
    return rest.partition(": ")[0]
