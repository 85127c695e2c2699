"""`mpicluster run INVENTORY [options] -- PROGRAM ARGS...`: a job on the cluster."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from mpicluster.cli.common import (
    NODES_METAVAR,
    InventoryArg,
    JsonOpt,
    guarded,
    old_name,
    terminate_as_interrupt,
)
from mpicluster.cli.help import choices, examples
from mpicluster.util import exitcodes
from mpicluster.util.errors import UsageError

if TYPE_CHECKING:
    from mpicluster.cluster.plan import ClusterPlan
    from mpicluster.render import Display
    from mpicluster.run import JobOutcome, RunOptions, Watchers

CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": False}
LAUNCHERS = ("mpirun", "torchrun")
VIAS = ("mpirun", "slurm")
COLLECT_FROM = ("all", "head")

ProgramArg = Annotated[
    list[str] | None,
    typer.Argument(help="The program and its arguments, after --.", show_default=False),
]
NpOpt = Annotated[
    int | None,
    typer.Option(
        "-np", "--np", metavar="N", help="Ranks in all (default: every slot of the nodes)."
    ),
]
PerNodeOpt = Annotated[
    int | None,
    typer.Option("--per-node", metavar="N", help="Ranks on each node (default: its slots)."),
]
NodesOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--nodes",
        metavar=NODES_METAVAR,
        help="Only these nodes, comma-separated or repeated, in order (the first is the head).",
        show_default=False,
    ),
]
#: --nodes' old name.
HostsOpt = Annotated[list[str] | None, old_name("--hosts", "--nodes", NODES_METAVAR)]
MapByOpt = Annotated[
    str | None,
    typer.Option("--map-by", metavar="SPEC", help="Open MPI's --map-by (default: slot)."),
]
EnvOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--env",
        metavar="NAME=VALUE",
        help="NAME=VALUE, or NAME to pass this shell's value (repeatable).",
    ),
]
EnvFileOpt = Annotated[
    Path | None, typer.Option("--env-file", metavar="FILE", help="A file of NAME=VALUE lines.")
]
TorchOpt = Annotated[
    bool,
    typer.Option(
        "--torch",
        help="Give every rank RANK, WORLD_SIZE, LOCAL_RANK, NODE_RANK, MASTER_ADDR/PORT.",
    ),
]
LauncherOpt = Annotated[
    str,
    typer.Option(
        "--launcher", metavar=choices(LAUNCHERS), help="mpirun, or torchrun (one per node)."
    ),
]
ViaOpt = Annotated[
    str | None,
    typer.Option(
        "--via",
        metavar=choices(VIAS),
        help="mpirun, or slurm (srun --mpi=pmix: a job in the queue). Default: slurm "
        "when the inventory has a scheduler, else mpirun.",
        show_default=False,
    ),
]
DebugOpt = Annotated[bool, typer.Option("--debug", help="NCCL_DEBUG=INFO on every rank.")]
TagOpt = Annotated[bool, typer.Option("--tag", help="Prefix each line with its rank and node.")]
SyncOpt = Annotated[
    Path | None,
    typer.Option(
        "--sync",
        metavar="DIR",
        help="Copy this folder to every node first (rsync; honours .mpiclusterignore) "
        "and run from there.",
    ),
]
SyncToOpt = Annotated[
    str | None,
    typer.Option(
        "--sync-to",
        metavar="PATH",
        help="Where --sync puts it (default: ~/mpicluster-run/<folder name>).",
    ),
]
ChdirOpt = Annotated[
    str | None,
    typer.Option(
        "--chdir",
        metavar="DIR",
        help="Run from this folder on every node (default: --sync's, else home).",
    ),
]
HangTimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--hang-timeout",
        metavar="SECONDS",
        help="When the job prints nothing for this many seconds, show where every "
        "rank is (py-spy) and stop it (exit 124).",
    ),
]
KeepHungOpt = Annotated[
    bool,
    typer.Option("--keep-hung", help="With --hang-timeout: report, but keep the job."),
]
InspectOpt = Annotated[
    bool,
    typer.Option(
        "--inspect", help="Run nothing: show where the ranks of running jobs are (py-spy)."
    ),
]
SetupOpt = Annotated[
    str | None,
    typer.Option(
        "--setup",
        metavar="COMMAND",
        help="Run this shell command once on every node of the job, from its folder, "
        "before any rank starts; a node where it fails stops the job.",
    ),
]
CollectOpt = Annotated[
    str | None,
    typer.Option(
        "--collect",
        metavar="PATH",
        help="After the job (whatever its exit code), copy this path (relative to the "
        "job's folder) from its nodes into this machine's clusters/NAME/jobs/JOB/NODE/ "
        "(under ~/.local/state/mpicluster).",
    ),
]
CollectFromOpt = Annotated[
    str,
    typer.Option(
        "--collect-from",
        metavar=choices(COLLECT_FROM),
        help="all: every node of the job; head: rank 0's only.",
    ),
]
RequirementsOpt = Annotated[
    Path | None,
    typer.Option(
        "--requirements",
        metavar="FILE",
        help="The job's own Python packages (a requirements file): resolved here with the "
        "stack's pinned, installed once per node into an environment layered on the "
        "stack's Python, reused by later jobs.",
    ),
]
DetachOpt = Annotated[
    bool,
    typer.Option(
        "--detach",
        help="Start the job under the head node's launcher (with --via slurm: queue it "
        "with sbatch) and return its id: it outlives this command and this machine (see "
        "`mpicluster jobs`, `logs`, `stop`, `collect`).",
    ),
]
DryRunOpt = Annotated[
    bool, typer.Option("--dry-run", help="Print the command line on the head; run nothing.")
]


def run(
    inventory: InventoryArg,
    program: ProgramArg = None,
    np: NpOpt = None,
    per_node: PerNodeOpt = None,
    nodes: NodesOpt = None,
    map_by: MapByOpt = None,
    env: EnvOpt = None,
    env_file: EnvFileOpt = None,
    torch: TorchOpt = False,
    launcher: LauncherOpt = "mpirun",
    via: ViaOpt = None,
    debug: DebugOpt = False,
    tag: TagOpt = False,
    sync: SyncOpt = None,
    sync_to: SyncToOpt = None,
    chdir: ChdirOpt = None,
    hang_timeout: HangTimeoutOpt = None,
    keep_hung: KeepHungOpt = False,
    inspect: InspectOpt = False,
    setup: SetupOpt = None,
    collect: CollectOpt = None,
    collect_from: CollectFromOpt = "all",
    requirements: RequirementsOpt = None,
    detach: DetachOpt = False,
    dry_run: DryRunOpt = False,
    json_output: JsonOpt = False,
    hosts: HostsOpt = None,
) -> None:
    """Run a program on the cluster's nodes from the head node.

    Every rank gets the cluster's environment; a rank that fails ends the job, Ctrl-C
    stops every rank. With --detach, the job's id alone on stdout.

    Exit codes: once the job ran, the job's own exit status, and the last line on stderr
    is `job exited with N`; any other last line: mpicluster's own, 0 ok (--detach: the
    job runs), 1 a failure before the job (an internal error), 2 bad input, 3 --setup
    failed on a node, 4 a node could not be reached, 124 the job was stopped by
    --hang-timeout, 130 interrupted (Ctrl-C).
    """
    from mpicluster.cluster import node_choice
    from mpicluster.cluster.plan import ClusterPlan
    from mpicluster.render import Display
    from mpicluster.run import JobRequest, run_request

    display = Display(messages_on_stderr=True)
    with guarded(display):
        plan = ClusterPlan.load(inventory)
        via = _judged(plan, via, launcher, hang_timeout, keep_hung, sync, sync_to, detach)
        collect = _collect_judged(setup, collect, collect_from, via)
        chosen = node_choice.split([*(nodes or ()), *(hosts or ())])  # --hosts: the old name
        options = _options(
            program, np, per_node, chosen, map_by, env, env_file, torch, launcher, debug, via
        )
        if inspect:
            _inspect(display, plan, as_json=json_output)
            return
        request = JobRequest(
            options,
            sync=sync,
            sync_to=sync_to,
            chdir=chdir,
            requirements=requirements,
            setup=setup,
            collect=collect,
            collect_from=collect_from,
            hang_timeout=hang_timeout,
            keep_hung=keep_hung,
            dry_run=dry_run,
        )
        watchers = _watchers(display, tag=tag, as_json=json_output, hang_timeout=hang_timeout)
        outcome = run_request(plan, request, dict(os.environ), watchers, detach=detach)
        _shown(display, outcome, str(inventory), dry_run=dry_run, as_json=json_output)


def _watchers(
    display: Display, *, tag: bool, as_json: bool, hang_timeout: float | None
) -> Watchers:
    """What the job's lines, its setup and a hang report show, as they come."""
    from mpicluster.render.run import LinePrinter, show_hang, show_setup
    from mpicluster.run import Watchers

    printer = LinePrinter(tag=tag, stdout_to_stderr=as_json)
    return Watchers(
        progress=display.progress,
        on_line=printer.line,
        on_setup_line=lambda node, _, line: display.tagged(node, line),
        on_setup=lambda done, synced: show_setup(display, done, synced, as_json=as_json),
        on_hang=lambda report: show_hang(display, report, hang_timeout or 0),
        before_job=terminate_as_interrupt,
    )


def _judged(
    plan: ClusterPlan,
    via: str | None,
    launcher: str,
    hang_timeout: float | None,
    keep_hung: bool,
    sync: Path | None,
    sync_to: str | None,
    detach: bool,
) -> str:
    """The options judged before anything reaches a node (--inspect included); the
    --via to use."""
    if hang_timeout is not None and not 0 < hang_timeout < math.inf:  # nan fails both
        raise UsageError("--hang-timeout must be more than 0 seconds (and finite)")
    if keep_hung and hang_timeout is None:
        raise UsageError("--keep-hung needs --hang-timeout")
    if sync_to and not sync:
        raise UsageError("--sync-to needs --sync")
    if launcher not in LAUNCHERS:
        raise UsageError(f"--launcher {launcher!r}: one of {', '.join(LAUNCHERS)}")
    if via is None:
        via = "slurm" if plan.scheduler is not None else "mpirun"
    if via not in VIAS:
        raise UsageError(f"--via {via!r}: one of {', '.join(VIAS)}")
    if detach and via == "slurm" and hang_timeout is not None:
        raise UsageError(
            "--hang-timeout: a detached Slurm job ends at its time limit instead "
            "(scheduler's default_time); use --via mpirun to watch it"
        )
    return via


def _collect_judged(
    setup: str | None, collect: str | None, collect_from: str, via: str
) -> str | None:
    """--setup and --collect judged before anything reaches a node; --collect's path."""
    from mpicluster.run.collect import checked_path

    if setup is not None and not setup.strip():
        raise UsageError("--setup: an empty command")
    if collect_from not in COLLECT_FROM:
        raise UsageError(f"--collect-from {collect_from!r}: one of {', '.join(COLLECT_FROM)}")
    if collect_from != "all" and collect is None:
        raise UsageError("--collect-from needs --collect")
    if (setup or collect) and via == "slurm":
        raise UsageError("--setup and --collect run over ssh: use them with --via mpirun")
    return checked_path(collect) if collect is not None else None


def _options(
    program: list[str] | None,
    np: int | None,
    per_node: int | None,
    hosts: tuple[str, ...],
    map_by: str | None,
    env: list[str] | None,
    env_file: Path | None,
    torch: bool,
    launcher: str,
    debug: bool,
    via: str,
) -> RunOptions:
    """The command line's options as the core's RunOptions (--env-file read)."""
    from mpicluster.run.job_command import RunOptions, parse_env_file

    variables = {}
    if env_file is not None:
        if not env_file.is_file():
            raise UsageError(f"--env-file: no such file: {env_file}")
        variables = parse_env_file(env_file.read_text(), str(env_file))
    return RunOptions(
        program=tuple(program or ()),
        np=np,
        per_node=per_node,
        hosts=hosts,
        map_by=map_by,
        env=tuple(env or ()),
        env_file=variables,
        torch=torch,
        launcher=launcher,  # type: ignore[arg-type]
        debug=debug,
        via=via,  # type: ignore[arg-type]
    )


def _inspect(display: Display, plan: ClusterPlan, *, as_json: bool) -> None:
    """--inspect: where the ranks of the jobs running on the nodes are; exit 1 if none
    was found."""
    from mpicluster.render.run import show_inspect
    from mpicluster.run import inspect_ranks

    report = inspect_ranks(plan, display.progress)
    show_inspect(display, report, as_json=as_json)
    if not report.ranks:
        raise typer.Exit(exitcodes.FAILED)


def _shown(
    display: Display, outcome: JobOutcome, inventory: str, *, dry_run: bool, as_json: bool
) -> None:
    """The outcome rendered, then its exit code: the job's own once it ran (the last
    line on stderr says `job exited with N`), else mpicluster's (the setup's failure)."""
    from mpicluster.render.jobs import show_started
    from mpicluster.render.run import show_exit, show_job, show_setup_failed

    if outcome.setup_failed:
        setup = outcome.setup
        show_setup_failed(display, setup)  # type: ignore[arg-type]
        raise typer.Exit(setup.exit_code)  # type: ignore[union-attr]
    if outcome.started is not None:
        show_started(display, outcome.started, inventory, outcome.setup, as_json=as_json)
        return
    if outcome.result is None:
        return
    show_job(
        display,
        outcome.result,
        outcome.synced,
        as_json=as_json,
        dry_run=dry_run,
        collected=outcome.collected,
        setup=outcome.setup,
        env=outcome.env,
    )
    if dry_run:
        return
    show_exit(display, outcome.result)
    if outcome.result.exit_code != 0:
        raise typer.Exit(outcome.result.exit_code)


COMMANDS = [run]

EXAMPLES = {
    "run": examples(
        "mpicluster run inventories/local.yaml -- hostname",
        "mpicluster run inventories/gpu.yaml -np 16 --sync . -- python train.py",
        "mpicluster run inventories/gpu.yaml --nodes gpu01,gpu02 -- nvidia-smi -L",
        "mpicluster run inventories/gpu.yaml --detach -- python train.py",
    ),
}
