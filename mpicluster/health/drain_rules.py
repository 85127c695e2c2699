"""What the node's health check does with Slurm after one run: drain the node, count a
pass towards its return, return it, or leave it be. Pure (facts in, one step out), and
shipped to the nodes with the check (remote/health.py runs it there as root, under
slurmd): standard library only.

The rules the loop keeps:
- a failing node is drained with mpicluster's reason (`mpicluster: <first finding>`) and
  the drain is recorded on the node: the record, not the reason's text, is the proof
  that the drain is mpicluster's;
- a node mpicluster drained returns after PASSES passing checks in a row (a failure in
  between starts the count again), and only while Slurm still shows the drain it made:
  a drain an operator made (before or over mpicluster's), or a resume by hand, ends
  mpicluster's claim on the node;
- the cluster's fault is not a node's: while `up` changes the nodes (it says so on each
  node), or when draining this node would leave more than SHARE of the cluster drained
  by mpicluster, the finding is reported as the cluster's and nothing is drained.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

#: Passing checks in a row that return a node mpicluster drained (no flapping).
PASSES = 2
#: The most of the cluster mpicluster's checks drain at once; past it a finding is the
#: cluster's (a shared setting, a stack every node lacks), and the rest stay in service.
SHARE = 0.5
PREFIX = "mpicluster: "
#: Slurm keeps a reason of any length; one line of `sinfo` shows this much.
REASON_MAX = 200


@dataclass(frozen=True)
class SlurmNode:
    """The node as slurmctld sees it (`scontrol show node NAME -o`)."""

    #: Slurm's state words, e.g. {"IDLE", "DRAIN"} or {"MIXED"}.
    states: frozenset[str]
    #: The drain's reason, without Slurm's "[user@time]" tail ("" when none).
    reason: str = ""

    @property
    def drained(self) -> bool:
        """Drained or draining: out of new jobs."""
        return "DRAIN" in self.states or "DRAINED" in self.states or "DRAINING" in self.states

    @property
    def busy(self) -> bool:
        """A job runs (or ends) there: its /tmp and /dev/shm use is the job's, not a fault."""
        return bool(self.states & {"ALLOCATED", "MIXED", "COMPLETING"})


@dataclass(frozen=True)
class Drain:
    """mpicluster's record of a drain its check made on this node."""

    reason: str
    #: When it was made (seconds since the epoch).
    at: float
    #: Passing checks in a row since (PASSES return the node).
    passes: int = 0

    def to_dict(self) -> dict:
        return {"reason": self.reason, "at": self.at, "passes": self.passes}

    @classmethod
    def of(cls, data: object) -> Drain | None:
        if not isinstance(data, dict) or not isinstance(data.get("reason"), str):
            return None
        try:
            return cls(data["reason"], float(data.get("at") or 0), int(data.get("passes") or 0))
        except (TypeError, ValueError):
            return None


@dataclass(frozen=True)
class Step:
    #: drain, resume (the node returns), count (a pass towards it), hold (still failing,
    #: stays drained), release (the drain is not mpicluster's any more: forgotten),
    #: cluster (the cluster's finding: nothing drained), none.
    action: str
    #: The record to keep after the step (None: none).
    record: Drain | None
    #: One line saying why.
    why: str


def reason_of(check: str, evidence: str) -> str:
    """Slurm's reason for a drain: one line, printable, at most REASON_MAX characters."""
    text = " ".join(f"{check}: {evidence}".split())
    text = "".join(c if c.isprintable() else "?" for c in text)
    reason = PREFIX + text
    return reason if len(reason) <= REASON_MAX else reason[: REASON_MAX - 3] + "..."


def decide(
    healthy: bool,
    reason: str,
    node: SlurmNode,
    record: Drain | None,
    *,
    changing: bool = False,
    drained_elsewhere: int = 0,
    nodes: int = 1,
    now: float = 0.0,
) -> Step:
    """One run's step. `reason`: the drain's reason_of the first failure (unused when
    healthy); `drained_elsewhere`: the other nodes Slurm shows drained with mpicluster's
    reason; `nodes`: the cluster's; `changing`: `up` is changing the nodes now."""
    ours = record is not None and node.drained and node.reason == record.reason
    if record is not None and not ours:
        why = (
            "drained again by someone else"
            if node.drained
            else "returned to service by someone else"
        )
        return Step("release", None, f"mpicluster's drain is over: {why}")
    if healthy:
        if record is None:
            return Step("none", None, "healthy")
        passes = record.passes + 1
        if passes >= PASSES:
            return Step("resume", None, f"passed {passes} checks in a row: returned to service")
        return Step("count", replace(record, passes=passes), f"passed {passes} of {PASSES}")
    if ours:
        return Step("hold", replace(record, passes=0), "still failing: stays drained")
    if node.drained:
        return Step("none", None, "already drained by someone else: left as it is")
    if changing:
        return Step("cluster", None, "`mpicluster up` is changing the nodes: not drained")
    if nodes > 1 and drained_elsewhere + 1 > SHARE * nodes:
        return Step(
            "cluster",
            None,
            f"{drained_elsewhere} of {nodes} nodes are drained by mpicluster already: "
            "a finding this wide is the cluster's, not this node's; not drained",
        )
    return Step("drain", Drain(reason, now), "failing: drained")
