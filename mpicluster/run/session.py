"""A job from its request to its outcome, the way `mpicluster run` runs it: the options
judged against the plan, the code synced, the job's packages made, the setup step, then
the job (attached, or detached under the head's launcher), then its results collected.

The command line parses into a `JobRequest` and renders the `JobOutcome`; what happens
on the way reaches it through `Watchers` (progress, the ranks' lines, the setup's
result as soon as it is known, a hang report). Nothing here prints.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from mpicluster.cluster.plan import ClusterPlan
from mpicluster.run import collect, detached, hang_report, job, job_command, job_env, setup_step
from mpicluster.run.collect import Collected
from mpicluster.run.detached import DetachedJob
from mpicluster.run.hang_report import HangReport
from mpicluster.run.job import HangWatch, JobResult, OnLine, Progress
from mpicluster.run.job_command import RunOptions
from mpicluster.run.job_env import JobEnv
from mpicluster.run.setup_step import SetupResult
from mpicluster.run.sync import SyncResult


@dataclass(frozen=True)
class JobRequest:
    """What the user asked of one job, judged by the command line already."""

    options: RunOptions
    sync: Path | None = None
    sync_to: str | None = None
    chdir: str | None = None
    #: --requirements: the file of the job's own packages.
    requirements: Path | None = None
    setup: str | None = None
    collect: str | None = None
    collect_from: str = "all"
    hang_timeout: float | None = None
    keep_hung: bool = False
    dry_run: bool = False


@dataclass(frozen=True)
class Watchers:
    """How the job reaches the command line while it runs."""

    progress: Progress
    on_line: OnLine
    #: A line of the setup step: (node, stream, text).
    on_setup_line: Callable[[str, str, str], None]
    #: The setup step's result, before the job starts (or instead of it, where it failed).
    on_setup: Callable[[SetupResult, SyncResult | None], None]
    #: A hang report, as --hang-timeout reads one.
    on_hang: Callable[[HangReport], None]
    #: Called once, right before an attached job starts (the CLI's SIGTERM handling).
    before_job: Callable[[], None] = lambda: None


@dataclass
class JobOutcome:
    synced: SyncResult | None = None
    env: JobEnv | None = None
    setup: SetupResult | None = None
    #: The job's result; None where the setup step failed (or the job was detached).
    result: JobResult | None = None
    collected: Collected | None = None
    #: --detach: the job started, and how to follow it.
    started: DetachedJob | None = None

    @property
    def setup_failed(self) -> bool:
        return self.setup is not None and not self.setup.ok


def run(
    plan: ClusterPlan,
    request: JobRequest,
    control_env: Mapping[str, str],
    watchers: Watchers,
    *,
    detach: bool = False,
) -> JobOutcome:
    """The job, attached (its exit code in `result`) or, with `detach`, started under the
    head's launcher (`started`); the steps before it in either case."""
    outcome, options, cwd = _before(plan, request, control_env, watchers)
    if outcome.setup_failed:
        return outcome
    if detach and not request.dry_run:
        outcome.started = detached.start(
            plan,
            options,
            control_env,
            watchers.progress,
            cwd=cwd,
            hang_timeout=request.hang_timeout,
            keep_hung=request.keep_hung,
            collect={"path": request.collect, "from": request.collect_from}
            if request.collect
            else None,
        )
        return outcome
    watchers.before_job()
    outcome.result = job.run_job(
        plan,
        options,
        control_env,
        watchers.on_line,
        watchers.progress,
        cwd=cwd,
        dry_run=request.dry_run,
        hang=_hang_watch(plan, request, watchers),
    )
    if request.collect and not request.dry_run and outcome.result.job_id:
        head_only = request.collect_from == "head"
        nodes = [job.head_node(plan, options)] if head_only else job.job_nodes(plan, options)
        watchers.progress(f"Collecting {request.collect} from {len(nodes)} node(s)")
        outcome.collected = collect.collect(
            plan, nodes, request.collect, cwd, outcome.result.job_id
        )
    return outcome


def inspect(plan: ClusterPlan, progress: Progress) -> HangReport:
    """--inspect: where the ranks of the jobs running on the nodes are."""
    return hang_report.inspect(plan, plan.nodes, "*", progress)


def _before(
    plan: ClusterPlan,
    request: JobRequest,
    control_env: Mapping[str, str],
    watchers: Watchers,
) -> tuple[JobOutcome, RunOptions, str | None]:
    """The options judged against the plan, then (not for --dry-run) the code synced,
    the job's packages and the setup step; the options the job runs with and its folder."""
    options, cwd = request.options, request.chdir
    outcome = JobOutcome()
    job_command.validate(plan, options, control_env)
    if request.sync is not None and not request.dry_run:
        outcome.synced = job.sync_nodes(
            plan, options, request.sync, request.sync_to, watchers.progress
        )
        cwd = cwd or outcome.synced.destination
    if request.requirements is not None:
        lines = job_env.read_requirements(request.requirements)
        if not request.dry_run:
            options = _with_packages(plan, options, lines, outcome, watchers.progress)
    if request.setup and not request.dry_run:
        job.head_node(plan, options)  # --nodes judged before any node runs anything
        nodes = job.job_nodes(plan, options)
        watchers.progress(f"Setup on {len(nodes)} node(s): {request.setup}")
        outcome.setup = setup_step.run_setup(
            plan, nodes, request.setup, cwd, watchers.on_setup_line
        )
        watchers.on_setup(outcome.setup, outcome.synced)
    return outcome, options, cwd


def _with_packages(
    plan: ClusterPlan,
    options: RunOptions,
    lines: list[str],
    outcome: JobOutcome,
    progress: Progress,
) -> RunOptions:
    """--requirements: the job's environment on its nodes; the options that put it
    first on every rank's PYTHONPATH."""
    job.head_node(plan, options)  # --nodes judged before any node is asked
    outcome.env = env = job_env.prepare(plan, job.job_nodes(plan, options), lines, progress)
    made = f"made on {', '.join(env.built_on)}" if env.built_on else "ready"
    progress(f"The job's packages: {made} ({env.seconds:.1f} s, {env.pythonpath})")
    given = [e for e in options.env if e.startswith("PYTHONPATH=")]
    rest = [e for e in options.env if not e.startswith("PYTHONPATH=")]
    value = ":".join([env.pythonpath, *(e.split("=", 1)[1] for e in given)])
    return replace(options, env=(*rest, f"PYTHONPATH={value}"))


def _hang_watch(plan: ClusterPlan, request: JobRequest, watchers: Watchers) -> HangWatch | None:
    """--hang-timeout: read the job's ranks on its nodes when it goes quiet."""
    if request.hang_timeout is None:
        return None
    hosts = set(request.options.hosts) or {n.name for n in plan.nodes}
    nodes = [n for n in plan.nodes if n.name in hosts]
    return HangWatch(
        request.hang_timeout,
        lambda job_id: hang_report.inspect(plan, nodes, job_id, watchers.progress),
        watchers.on_hang,
        stop=not request.keep_hung,
    )
