"""`doctor --perf`: bench's quick form (ring pairs over MPI, one allreduce size, no
baseline and no second pass) as one more check, within doctor's usual time. A slow
node or link is a failure naming it; the full measurement is `mpicluster bench`."""

from __future__ import annotations

from collections.abc import Callable

from mpicluster.cluster.plan import ClusterPlan
from mpicluster.doctor.model import CheckReport, failed, passed
from mpicluster.util.errors import MpiclusterError

NAME = "perf"
TITLE = "Quick measurement (ring pairs over MPI, a 256 MiB allreduce)"
FULL = "`mpicluster bench` measures it whole: a second pass, iperf3's baseline, a report"


def run(plan: ClusterPlan, progress: Callable[[str], None], launch_failed: bool) -> CheckReport:
    from mpicluster.bench import run_bench

    report = CheckReport(NAME, TITLE)
    if launch_failed:
        report.not_checked.append("every node: the launch failed (measuring needs it)")
        return report
    if len(plan.nodes) < 2:
        report.results.append(passed(None, "one node: no pair to measure"))
        return report
    try:
        found = run_bench(plan, quick=True, on_progress=progress)
    except MpiclusterError as exc:
        report.results.append(failed(None, f"the measurement failed: {exc}", FULL))
        return report
    for finding in found.flagged:
        report.results.append(
            failed(
                finding.nodes[0] if finding.kind == "node" else None,
                f"slow {finding.kind} {'-'.join(finding.nodes)}: {finding.measured:.2f} GB/s, "
                f"expected {finding.expected:.2f} ({finding.why})",
                FULL,
                peer=finding.nodes[1] if finding.kind == "link" else None,
            )
        )
    if not found.flagged:
        rates = [p.gbs for p in found.pairs]
        waits = [p.latency_us for p in found.pairs]
        sweep = found.allreduce[-1] if found.allreduce else None
        ring = sum(1 for p in found.pairs if p.round == 1)
        again = len(found.pairs) - ring  # a pair slow once is measured again before it counts
        report.results.append(
            passed(
                None,
                f"{ring} ring pair(s)"
                + (f" ({again} measured again)" if again else "")
                + f": {min(rates):.2f}-{max(rates):.2f} GB/s, "
                f"{min(waits):.0f}-{max(waits):.0f} us"
                + (f"; allreduce busbw {sweep.busbw_gbs:.2f} GB/s at 256 MiB" if sweep else "")
                + f" ({found.seconds:.0f} s)",
            )
        )
    return report
