"""`run_doctor`: the checks chosen, the facts gathered (runner.py), each check's
judgement, and --perf's and --gpu-diag's parts after them: one DoctorReport (the
package's face names it)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable

from mpicluster.cluster.plan import ClusterPlan
from mpicluster.doctor.model import DoctorReport, Status
from mpicluster.util.errors import UsageError


def select_checks(wanted: Iterable[str] | None) -> tuple[str, ...]:
    """The checks to run, in report order; UsageError naming an unknown one."""
    from mpicluster.doctor.checks import NAMES

    wanted = list(wanted or [])
    if not wanted:
        return tuple(NAMES)
    unknown = [name for name in wanted if name not in NAMES]
    if unknown:
        raise UsageError(f"--check {unknown[0]!r}: not a check (one of: {', '.join(NAMES)})")
    return tuple(name for name in NAMES if name in wanted)


def run_doctor(
    plan: ClusterPlan,
    *,
    checks: Iterable[str] | None = None,
    timeout: float | None = None,
    all_pairs: bool = False,
    seed: int | None = None,
    workers: int | None = None,
    launch: bool = True,
    gpu_diag: int | None = None,
    deep: bool = False,
    perf: bool = False,
    on_progress: Callable[[str], None] | None = None,
) -> DoctorReport:
    """`gpu_diag`: also run DCGM's diagnostics at that level on the GPU nodes
        (gpu_diag.py; never by default). `deep`: the stack check takes the sha256 of every
        file of the stack, not only of what a launch loads. `perf`: bench's quick form after
    the checks (perf.py)."""
    from mpicluster.doctor import gpu_diag as diagnostics
    from mpicluster.doctor.checks import CHECKS
    from mpicluster.doctor.runner import DEFAULT_WORKERS, Options, gather

    diagnostics.check_level(gpu_diag)

    started = time.monotonic()
    progress = on_progress or (lambda message: None)
    selected = select_checks(checks)
    if not launch:
        selected = tuple(name for name in selected if name != "launch")
        if not selected:
            raise UsageError("--no-launch with only --check launch leaves nothing to check")
    if timeout is not None and not 0 < timeout < math.inf:  # nan fails both
        raise UsageError(f"--timeout {timeout}: must be more than 0 seconds (and finite)")
    options = Options(
        checks=selected,
        timeout=float(timeout or plan.logins.connect_timeout),
        all_pairs=all_pairs,
        seed=seed,
        workers=workers or DEFAULT_WORKERS,
        deep=deep,
    )
    found = gather(plan, options, progress)
    reports = [check.run(found) for check in CHECKS if check.name in selected]
    if perf:
        from mpicluster.doctor import perf as quick_bench

        launched = next((r for r in reports if r.name == "launch"), None)
        broken = launched is not None and launched.status == Status.FAIL
        reports.append(quick_bench.run(plan, progress, broken))
    if gpu_diag is not None:
        reports.append(diagnostics.run(plan, gpu_diag, progress))
    return DoctorReport(plan.cluster, reports, time.monotonic() - started)
