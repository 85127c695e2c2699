"""`doctor --cordon`: the report as cordoning reads it (cluster/cordon_verdicts.py decides).

- A failed result is put on its node when it names no peer: a result about one node,
  or doctor's own blame of one node for a pattern of pair failures (the mesh's, the
  ports', the launches'). A result with a peer (`ssh node1 -> node3`, a pair launch)
  is a pair's: it cordons neither end, and keeps both from being returned. A result
  without a node is the whole cluster's. Warnings count for nothing.
- A check looked at every node but those it lists as not checked; a check whose not
  checked entry names no node (`--perf` after a failed launch: "every node: ...")
  looked at none.
- A node doctor could not reach fails the ssh check (its own result, with why); where
  the ssh check did not run (`--check disk`), each node another check could not reach
  is such a failure.
- The hostfile check cordons nobody and keeps no node from its return: the hostfiles
  and cluster.json are what `up` writes (and every cordon change rewrites), not a node's
  health; a node that missed a cordon change fails it until the next change reaches it.
- The users check neither: a person's account missing or unlike on a node, her home
  open to others, are hers to fix (`up`, or by hand), and cordoning the node would take
  it from every job, the MPI user's too, which runs there as well as before.
"""

from __future__ import annotations

from mpicluster.cluster.cordon_verdicts import Failure, Findings
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.doctor.model import DoctorReport, Result, Status

#: The checks that say nothing of a node's health (above).
NOT_HEALTH = ("hostfile", "users")


def cordon_findings(report: DoctorReport, plan: ClusterPlan) -> Findings:
    from mpicluster.doctor.checks.ssh_access import NAME as SSH  # the checks: when used

    everyone = {node.name for node in plan.nodes}
    checks: dict[str, set[str]] = {}
    failures: list[Failure] = []
    for check in report.checks:
        if check.name in NOT_HEALTH:
            continue
        skipped = set(check.not_checked)
        checks[check.name] = set() if skipped - everyone else everyone - skipped
        failures.extend(
            _failure(check.name, result, everyone)
            for result in check.results
            if result.status == Status.FAIL
        )
    if SSH not in checks:
        unreached = [
            name
            for name in (node.name for node in plan.nodes)
            if any(name in check.not_checked for check in report.checks)
        ]
        checks = {SSH: everyone, **checks}
        failures[:0] = [
            Failure(SSH, f"doctor could not reach {name}", name, (name,)) for name in unreached
        ]
    return Findings("doctor", checks, failures)


def _failure(check: str, result: Result, everyone: set[str]) -> Failure:
    names = tuple(name for name in (result.node, result.peer) if name in everyone)
    alone = result.node in everyone and result.peer is None
    return Failure(check, result.evidence, result.node if alone else None, names)
