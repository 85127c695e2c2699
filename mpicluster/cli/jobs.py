"""`mpicluster jobs | logs | stop | collect INVENTORY [JOB]`: the jobs `run --detach`
started, read from their head nodes."""

from __future__ import annotations

from typing import Annotated

import typer

from mpicluster.cli.common import InventoryArg, JsonOpt, guarded
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.render import Display
from mpicluster.util import exitcodes
from mpicluster.util.errors import UsageError

JobArg = Annotated[
    str, typer.Argument(help="The job's id (`mpicluster jobs` lists them).", show_default=False)
]
FollowOpt = Annotated[
    bool, typer.Option("--follow", "-f", help="Keep showing the output until the job ends.")
]
TagOpt = Annotated[bool, typer.Option("--tag", help="Prefix each line with its rank and node.")]
PathOpt = Annotated[
    str | None,
    typer.Option(
        "--path", help="What to copy, relative to the job's folder (default: its run --collect)."
    ),
]
CollectFromOpt = Annotated[
    str | None,
    typer.Option(
        "--collect-from",
        help="all: every node of the job; head: rank 0's only (default: its run's).",
        show_default=False,
    ),
]


def _plan(inventory) -> ClusterPlan:
    return ClusterPlan.load(inventory)


def jobs(inventory: InventoryArg, json_output: JsonOpt = False) -> None:
    """List the detached jobs on the cluster's nodes: id, head, state, exit code, start,
    command. Exit 1 when a node could not be asked."""
    from mpicluster.render.jobs import show_jobs
    from mpicluster.run import detached

    display = Display(messages_on_stderr=True)
    with guarded(display):
        plan = _plan(inventory)
        found, problems = detached.list_jobs(plan)
        show_jobs(display, plan.cluster, found, problems, as_json=json_output)
        if problems:
            raise typer.Exit(exitcodes.FAILED)


def logs(
    inventory: InventoryArg,
    job: JobArg,
    follow: FollowOpt = False,
    tag: TagOpt = False,
    json_output: JsonOpt = False,
) -> None:
    """Show a detached job's output (with --follow, until it ends; Ctrl-C stops
    following, not the job), then how it ended, its hang report and, at the end of a job
    started with --collect, its files brought back. Exit code: the job's once it has
    ended, 0 while it runs."""
    from mpicluster.render.jobs import show_log_end
    from mpicluster.render.run import LinePrinter
    from mpicluster.run import detached

    display = Display(messages_on_stderr=True)
    with guarded(display):
        plan = _plan(inventory)
        found = detached.find(plan, job)
        printer = LinePrinter(tag=tag, stdout_to_stderr=json_output)
        try:
            now, result = detached.follow(plan, found, printer.line, wait=follow)
        except KeyboardInterrupt:
            display.warning(
                f"stopped following: job {job} goes on (`mpicluster stop {inventory} {job}` "
                "stops it)"
            )
            raise typer.Exit(exitcodes.INTERRUPTED) from None
        collected = None
        if follow and now.collect and not now.running:
            collected = _collect(display, plan, now, now.collect["path"], now.collect["from"])
        show_log_end(display, now, result, str(inventory), collected, as_json=json_output)
        if not now.running:
            raise typer.Exit(result.exit_code if now.state != "lost" else exitcodes.FAILED)


def stop(inventory: InventoryArg, job: JobArg, json_output: JsonOpt = False) -> None:
    """Stop a detached job: mpirun first, then every process of the job on every node it
    used. Exit 1 if it had already ended."""
    from mpicluster.render.jobs import show_stopped
    from mpicluster.run import detached

    display = Display(messages_on_stderr=True)
    with guarded(display):
        plan = _plan(inventory)
        found = detached.find(plan, job)
        if found.running:
            display.progress(f"Stopping job {job} on {found.node}")
        now = detached.stop(plan, found) if found.running else found
        show_stopped(display, now, found.running, as_json=json_output)
        if not found.running or now.running:
            raise typer.Exit(exitcodes.FAILED)


def collect(
    inventory: InventoryArg,
    job: JobArg,
    path: PathOpt = None,
    collect_from: CollectFromOpt = None,
    json_output: JsonOpt = False,
) -> None:
    """Copy a detached job's files from its nodes into
    ~/.local/state/mpicluster/clusters/NAME/jobs/JOB/NODE/ (its run --collect path, or
    --path). Exit 1 when a node's copy failed."""
    from mpicluster.render.jobs import show_collect
    from mpicluster.run import detached
    from mpicluster.run.collect import checked_path

    display = Display(messages_on_stderr=True)
    with guarded(display):
        if collect_from not in (None, "all", "head"):
            raise UsageError(f"--collect-from {collect_from!r}: one of all, head")
        wanted = checked_path(path) if path is not None else None
        plan = _plan(inventory)
        found = detached.find(plan, job)
        recorded = found.collect or {}
        wanted = wanted or recorded.get("path")
        if wanted is None:
            raise UsageError(f"job {job} was started without --collect: give --path PATH")
        if found.running:
            display.warning(f"job {job} is still running: its files as they are now")
        collected = _collect(
            display, plan, found, wanted, collect_from or recorded.get("from") or "all"
        )
        show_collect(display, collected, as_json=json_output)
        if collected.failed:
            raise typer.Exit(exitcodes.FAILED)


def _collect(display, plan, found, path: str, where: str):
    from mpicluster.run import detached
    from mpicluster.run.collect import collect as copy_back

    nodes = detached.collect_nodes(plan, found, where)
    display.progress(f"Collecting {path} from {len(nodes)} node(s)")
    return copy_back(plan, nodes, path, found.cwd or None, found.id)


COMMANDS = [jobs, logs, stop, collect]
