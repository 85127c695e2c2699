"""Cordons: nodes kept out of jobs while they stay provisioned (`mpicluster cordon`).

The state is one small JSON file on every node, /etc/mpicluster/cordons.json
(layout.CORDONS), written whole to every node the command reaches, with a version that
grows by one at each change: any control machine with the inventory reads it back from
the nodes and takes the newest version, so a node that was unreachable at a change
(the cordoned node itself, often) is no trouble, and `up` writes the newest to every
node again. A cordoned node is left out of the hostfiles on every node, of `run`'s nodes
and of the smoke test; `up` never puts it back.

Pure here (text in, state out); reading and writing the nodes is mpicluster/health."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from mpicluster.util.errors import UsageError

#: Who cordoned a node: a person, or the command that found it failing.
BY = ("operator", "doctor", "bench")
#: The longest reason kept (it is shown in one line, and Slurm's reason is as short).
REASON_MAX = 200


@dataclass(frozen=True)
class Cordon:
    reason: str
    #: When (seconds since the epoch), by whom (BY) and from where (user@host).
    since: float
    by: str = "operator"
    who: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"reason": self.reason, "since": self.since, "by": self.by, "who": self.who}


@dataclass(frozen=True)
class CordonState:
    version: int = 0
    cordons: dict[str, Cordon] = field(default_factory=dict)

    def to_json(self) -> str:
        data = {
            "version": self.version,
            "cordons": {n: c.to_dict() for n, c in self.cordons.items()},
        }
        return json.dumps(data, indent=1, sort_keys=True) + "\n"

    def with_cordon(self, node: str, cordon: Cordon) -> CordonState:
        return CordonState(self.version + 1, {**self.cordons, node: cordon})

    def without(self, node: str) -> CordonState:
        kept = {name: c for name, c in self.cordons.items() if name != node}
        return CordonState(self.version + 1, kept)

    def ready(self, names: Iterable[str]) -> list[str]:
        """The names that are not cordoned, in their order."""
        return [name for name in names if name not in self.cordons]

    def describe(self, node: str) -> str:
        """`node2 is cordoned (its reason; by doctor)`, for the one line each command says."""
        cordon = self.cordons[node]
        return f"{node} is cordoned ({cordon.reason}; by {cordon.by})"


def parse(text: str | None) -> CordonState | None:
    """The state in a node's file; None where there is none, or none that can be read."""
    if not text or not text.strip():
        return None
    try:
        data = json.loads(text)
        cordons = {
            str(name): Cordon(
                str(entry["reason"]),
                float(entry.get("since") or 0),
                str(entry.get("by") or "operator"),
                str(entry.get("who") or ""),
            )
            for name, entry in (data.get("cordons") or {}).items()
        }
        return CordonState(int(data.get("version") or 0), cordons)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def newest(states: Iterable[CordonState | None]) -> CordonState:
    """The state with the highest version among the nodes' (none cordoned: no state)."""
    best = CordonState()
    for state in states:
        if state is not None and state.version > best.version:
            best = state
    return best


def check_reason(reason: str) -> str:
    """The reason as kept; UsageError for one that cannot be shown in one line."""
    text = reason.strip()
    if not text:
        raise UsageError("--reason: say why the node is cordoned (it is shown wherever it is)")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in text):
        raise UsageError("--reason: one line of text, without control characters or newlines")
    if len(text) > REASON_MAX:
        raise UsageError(f"--reason: at most {REASON_MAX} characters (this one has {len(text)})")
    return text
