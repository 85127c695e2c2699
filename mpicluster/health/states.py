"""What `mpicluster nodes` reports: per node, reachable or not, and its health check's
last result (kept by each run as root), or the result of one run now (`--check`)."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import Any

from mpicluster.cluster.layout import HEALTH_LAST, HEALTH_PROGRAM
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.nodes import transport
from mpicluster.util import exitcodes

SCHEMA = 1
#: The check's own exits: 0 healthy, 1 unhealthy, 2 it could not judge.
JUDGED = (0, 1)


@dataclass
class NodeState:
    name: str
    reachable: bool = True
    #: Why the node could not be asked, or why its check could not judge.
    problem: str = ""
    #: The health check's result (remote/health.py's JSON, with `at` when it was kept).
    health: dict[str, Any] | None = None

    @property
    def state(self) -> str:
        """unreachable, unknown (no result yet, or none it could make), unhealthy, ready."""
        if not self.reachable:
            return "unreachable"
        if self.health is None:
            return "unknown"
        return "ready" if self.health.get("healthy") else "unhealthy"

    @property
    def finding(self) -> dict[str, Any] | None:
        """The first failure, else the first warning, of the last check."""
        found = (self.health or {}).get("findings") or []
        for status in ("fail", "warn"):
            first = next((f for f in found if f.get("status") == status), None)
            if first:
                return first
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "state": self.state,
            "problem": self.problem or None,
            "finding": self.finding,
            "checked_at": (self.health or {}).get("at"),
            "health": self.health,
        }


@dataclass
class NodesReport:
    cluster: str
    nodes: list[NodeState] = field(default_factory=list)
    #: Whether the check ran now (--check), or its last results were read.
    checked_now: bool = False

    @property
    def exit_code(self) -> int:
        ready = all(node.state == "ready" for node in self.nodes)
        return exitcodes.OK if ready else exitcodes.FAILED

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "cluster": self.cluster,
            "checked_now": self.checked_now,
            "nodes": [node.to_dict() for node in self.nodes],
        }


def command(plan: ClusterPlan, check: bool) -> str:
    """One command per node: the check now, as root (it keeps its result), or its last
    result read back."""
    if not check:
        return f"cat {shlex.quote(HEALTH_LAST)} 2>/dev/null || true"
    run = f"{HEALTH_PROGRAM} --json"
    return f"sudo -n {run}" if plan.logins.become else run


def node_states(plan: ClusterPlan, *, check: bool = False, timeout: float = 60) -> NodesReport:
    answers = transport.run_everywhere(plan, command(plan, check), timeout=timeout)
    report = NodesReport(plan.cluster, checked_now=check)
    for node in plan.nodes:
        report.nodes.append(judged(node.name, answers.get(node.name), check))
    return report


def judged(name: str, answer: transport.RemoteResult | None, check: bool) -> NodeState:
    if answer is None or answer.error is not None:
        why = answer.error if answer is not None else "not asked"
        return NodeState(name, reachable=False, problem=why or "")
    text = answer.stdout.strip()
    if check and answer.exit_code not in JUDGED:
        said = (answer.stderr.strip().splitlines() or [f"exit {answer.exit_code}"])[-1]
        return NodeState(name, problem=f"its health check could not judge: {said}")
    if not text:
        return NodeState(name, problem="no health check has run as root here yet")
    try:
        return NodeState(name, health=json.loads(text.splitlines()[-1]))
    except ValueError:
        return NodeState(name, problem=f"its health check's result is not JSON: {text[:200]}")
