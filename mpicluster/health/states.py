"""What `mpicluster nodes` reports: per node, reachable or not, its cordon, its state in
Slurm (with `scheduler: slurm`: drained, and why), and its health check's last result
(kept by each run as root), or the result of one run now (`--check`)."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import Any

from mpicluster.cluster import cordons
from mpicluster.cluster.cordons import Cordon
from mpicluster.cluster.layout import CORDONS, HEALTH_LAST, HEALTH_PROGRAM
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.nodes import transport
from mpicluster.remote.plugins.module_utils.mpicluster_slurmnodes import parse_nodes
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
    #: The node's cordon, from the newest state among the nodes.
    cordon: Cordon | None = None
    #: Slurm's view ({"states": [...], "reason": str}); None without Slurm's answer.
    slurm: dict[str, Any] | None = None

    @property
    def state(self) -> str:
        """cordoned, drained (by Slurm's state), unreachable, unknown (no result yet, or
        none it could make), unhealthy, ready."""
        if self.cordon is not None:
            return "cordoned"
        if self.drained:
            return "drained"
        if not self.reachable:
            return "unreachable"
        if self.health is None:
            return "unknown"
        return "ready" if self.health.get("healthy") else "unhealthy"

    @property
    def drained(self) -> bool:
        states = set((self.slurm or {}).get("states") or [])
        return bool(states & {"DRAIN", "DRAINED", "DRAINING"})

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
            "reachable": self.reachable,
            "cordon": self.cordon.to_dict() if self.cordon else None,
            "slurm": self.slurm,
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
        """0 every node ready; 5 a node that answered is not (unhealthy, unknown,
        cordoned, drained); else 4 a node could not be reached."""
        if any(node.state not in ("ready", "unreachable") for node in self.nodes):
            return exitcodes.CHECK_FAILED
        if any(node.state == "unreachable" for node in self.nodes):
            return exitcodes.HOSTS_UNREACHABLE
        return exitcodes.OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "cluster": self.cluster,
            "checked_now": self.checked_now,
            "nodes": [node.to_dict() for node in self.nodes],
        }


#: What follows the health result in each node's answer: the check's exit, the cordons,
#: and (with Slurm) every node's state as slurmctld has it.
EXIT, CORDONED, SLURM = "@@exit ", "@@cordons\n", "@@slurm\n"


def command(plan: ClusterPlan, check: bool) -> str:
    """One command per node: the check now, as root (it keeps its result), or its last
    result read back; then the node's cordon state."""
    tail = f"echo @@cordons; cat {shlex.quote(CORDONS)} 2>/dev/null; true"
    if plan.scheduler is not None:
        tail += "; echo @@slurm; scontrol -o show nodes 2>/dev/null; true"
    sudo = "sudo -n " if plan.logins.become else ""  # the record's folder is root's alone
    if not check:
        last = f"{sudo}cat {shlex.quote(HEALTH_LAST)} 2>/dev/null"
        return f"{last}; echo; echo @@exit 0; {tail}"
    return f'{sudo}{HEALTH_PROGRAM} --json; echo "@@exit $?"; {tail}'


def node_states(plan: ClusterPlan, *, check: bool = False, timeout: float = 60) -> NodesReport:
    answers = transport.run_everywhere(plan, command(plan, check), timeout=timeout)
    texts = {name: split(answer) for name, answer in answers.items()}
    state = cordons.newest(
        cordons.parse(cordoned.partition(SLURM)[0]) for _, _, cordoned in texts.values()
    )
    slurm = slurm_view(cordoned for _, _, cordoned in texts.values())
    report = NodesReport(plan.cluster, checked_now=check)
    for node in plan.nodes:
        found = judged(node.name, answers.get(node.name), texts.get(node.name))
        found.cordon = state.cordons.get(node.name)
        found.slurm = slurm.get(node.name)
        report.nodes.append(found)
    return report


def slurm_view(tails) -> dict[str, dict[str, Any]]:
    """Every node's state from the first node whose slurmctld answered."""
    for tail in tails:
        found = parse_nodes(tail.partition(SLURM)[2])
        if found:
            return found
    return {}


def split(answer: transport.RemoteResult) -> tuple[str, int | None, str]:
    """A node's answer: the health result's text, the check's exit, the cordons' text."""
    head, _, cordoned = answer.stdout.partition(CORDONED)
    text, _, code = head.rpartition(EXIT)
    try:
        return text, int(code.strip()), cordoned
    except ValueError:
        return head, None, cordoned


def judged(
    name: str,
    answer: transport.RemoteResult | None,
    parts: tuple[str, int | None, str] | None,
) -> NodeState:
    if answer is None or answer.error is not None or parts is None:
        why = answer.error if answer is not None else "not asked"
        return NodeState(name, reachable=False, problem=why or "")
    text, code, _ = parts
    text = text.strip()
    if code not in JUDGED:
        said = (answer.stderr.strip().splitlines() or [f"exit {code}"])[-1]
        return NodeState(name, problem=f"its health check could not judge: {said}")
    if not text:
        return NodeState(name, problem="no health check has run as root here yet")
    try:
        return NodeState(name, health=json.loads(text.splitlines()[-1]))
    except ValueError:
        return NodeState(name, problem=f"its health check's result is not JSON: {text[:200]}")
