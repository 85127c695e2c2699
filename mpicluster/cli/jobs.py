"""`mpicluster jobs | logs | stop | collect INVENTORY [JOB]`: the jobs `run --detach`
started, read from their head nodes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from mpicluster.cli.common import InventoryArg, JsonOpt, guarded
from mpicluster.cli.help import choices, examples
from mpicluster.cli.run import COLLECT_FROM
from mpicluster.util import exitcodes
from mpicluster.util.errors import UsageError

if TYPE_CHECKING:
    from mpicluster.cluster.plan import ClusterPlan
    from mpicluster.render import Display

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
        "--path",
        metavar="PATH",
        help="What to copy, relative to the job's folder (default: its run --collect).",
    ),
]
CollectFromOpt = Annotated[
    str | None,
    typer.Option(
        "--collect-from",
        metavar=choices(COLLECT_FROM),
        help="all: every node of the job; head: rank 0's only (default: its run's).",
        show_default=False,
    ),
]


def _plan(inventory) -> ClusterPlan:
    from mpicluster.cluster.plan import ClusterPlan

    return ClusterPlan.load(inventory)


def _display() -> Display:
    """The jobs commands' display: every message on stderr (stdout is the job's)."""
    from mpicluster.render import Display

    return Display(messages_on_stderr=True)


def jobs(inventory: InventoryArg, json_output: JsonOpt = False) -> None:
    """List the detached jobs on the cluster's nodes.

    Each with its id (whole, whatever the terminal's width), head node, state, exit code,
    start and command.

    Exit codes: 0 listed, 1 a node's answer could not be read, 2 bad input, 4 a node
    could not be reached (the jobs of the others are listed).
    """
    from mpicluster.render.jobs import show_jobs
    from mpicluster.run import detached

    display = _display()
    with guarded(display):
        plan = _plan(inventory)
        listing = detached.list_jobs(plan)
        show_jobs(display, plan.cluster, listing.jobs, listing.problems, as_json=json_output)
        if listing.exit_code != exitcodes.OK:
            raise typer.Exit(listing.exit_code)


def logs(
    inventory: InventoryArg,
    job: JobArg,
    follow: FollowOpt = False,
    tag: TagOpt = False,
    json_output: JsonOpt = False,
) -> None:
    """Show a detached job's output, then how it ended.

    With --follow, until it ends (Ctrl-C stops following, not the job); then its hang
    report and, at the end of a job started with --collect, its files brought back.

    Exit codes: once the job has ended, its own exit status, and the last line on stderr
    is `job exited with N`; any other last line: mpicluster's own, 0 the job runs,
    1 its end was not recorded (lost), 2 bad input (no such job), 4 its head could not
    be reached, 124 it was stopped by --hang-timeout, 130 it was stopped (or Ctrl-C
    stopped following).
    """
    from mpicluster.render.jobs import show_log_end
    from mpicluster.render.run import LinePrinter, show_exit
    from mpicluster.run import detached

    display = _display()
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
        if now.state == "lost":
            raise typer.Exit(exitcodes.FAILED)
        if not now.running:
            show_exit(display, result)
            raise typer.Exit(result.exit_code)


def stop(inventory: InventoryArg, job: JobArg, json_output: JsonOpt = False) -> None:
    """Stop a detached job on every node it used.

    mpirun first, then every process of the job on each of its nodes.

    Exit codes: 0 stopped, 1 it had already ended (or did not stop), 2 bad input (no
    such job), 4 its head could not be reached.
    """
    from mpicluster.render.jobs import show_stopped
    from mpicluster.run import detached

    display = _display()
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
    """Copy a detached job's files from its nodes to this machine.

    Its run --collect path, or --path, into
    ~/.local/state/mpicluster/clusters/NAME/jobs/JOB/NODE/.

    Exit codes: 0 copied, 1 a node's copy failed there, 2 bad input (no such job, a bad
    path), 4 a node could not be reached.
    """
    from mpicluster.render.jobs import show_collect
    from mpicluster.run import detached
    from mpicluster.run.collect import checked_path

    display = _display()
    with guarded(display):
        if collect_from is not None and collect_from not in COLLECT_FROM:
            raise UsageError(f"--collect-from {collect_from!r}: one of {', '.join(COLLECT_FROM)}")
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
        if collected.exit_code != exitcodes.OK:
            raise typer.Exit(collected.exit_code)


def _collect(display, plan, found, path: str, where: str):
    from mpicluster.run import detached
    from mpicluster.run.collect import collect as copy_back

    nodes = detached.collect_nodes(plan, found, where)
    display.progress(f"Collecting {path} from {len(nodes)} node(s)")
    return copy_back(plan, nodes, path, found.cwd or None, found.id)


COMMANDS = [jobs, logs, stop, collect]


EXAMPLES = {
    "jobs": examples(
        "mpicluster jobs inventories/gpu.yaml", "mpicluster jobs inventories/gpu.yaml --json"
    ),
    "logs": examples(
        "mpicluster logs inventories/gpu.yaml 0123456789ab",
        "mpicluster logs inventories/gpu.yaml 0123456789ab --follow --tag",
    ),
    "stop": examples("mpicluster stop inventories/gpu.yaml 0123456789ab"),
    "collect": examples(
        "mpicluster collect inventories/gpu.yaml 0123456789ab",
        "mpicluster collect inventories/gpu.yaml 0123456789ab --path out --collect-from head",
    ),
}
