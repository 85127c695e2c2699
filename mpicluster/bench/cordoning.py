"""`bench --cordon`: the report as cordoning reads it (cluster/cordon_verdicts.py decides).

A slow node (verdict.py: every pair it is in is slow, with two partners or more) is put
on that node. A slow link is a pair's: either end may be the cause, so it cordons
neither and keeps both from being returned. An allreduce that was not exact, and a
failed nccl-tests run, are the whole cluster's. bench looked at the nodes it measured
with two partners or more: fewer cannot tell a slow node from a slow link.
"""

from __future__ import annotations

from collections import Counter

from mpicluster.bench.report import BenchReport
from mpicluster.cluster.cordon_verdicts import Failure, Findings

#: The check a slow node fails, as its reason names it (`bench: slow node: ...`).
SLOW_NODE = "slow node"
SLOW_LINK = "slow link"


def cordon_findings(report: BenchReport) -> Findings:
    partners = Counter(name for pair in {p.nodes for p in report.pairs} for name in pair)
    looked = {name for name, count in partners.items() if count >= 2}
    failures = []
    for finding in report.flagged:
        said = f"{finding.measured:.2f} GB/s, expected {finding.expected:.2f} ({finding.why})"
        if finding.kind == "node":
            (node,) = finding.nodes
            failures.append(Failure(SLOW_NODE, f"{node}: {said}", node, finding.nodes))
        else:
            pair = "-".join(finding.nodes)
            failures.append(Failure(SLOW_LINK, f"{pair}: {said}", None, finding.nodes))
    if any(not size.exact for size in report.allreduce):
        failures.append(Failure("allreduce", "the allreduce's result was not exact"))
    failures.extend(
        Failure("nccl-tests", f"{g.test}: {g.problem}") for g in report.gpu if g.problem
    )
    return Findings("bench", {SLOW_NODE: looked}, failures)
