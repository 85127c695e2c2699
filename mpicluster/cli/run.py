"""`mpicluster run INVENTORY [options] -- PROGRAM ARGS...`: a job on the cluster."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from mpicluster.cli.common import InventoryArg, JsonOpt, guarded, terminate_as_interrupt
from mpicluster.cluster.inventory import Inventory, load_inventory
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.errors import UsageError
from mpicluster.render import Display

if TYPE_CHECKING:
    from mpicluster.run.job import HangWatch
    from mpicluster.run.job_env import JobEnv
    from mpicluster.run.launch import RunOptions
    from mpicluster.run.setup_step import SetupResult
    from mpicluster.run.sync import SyncResult

CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": False}

ProgramArg = Annotated[
    list[str] | None,
    typer.Argument(help="The program and its arguments, after --.", show_default=False),
]
NpOpt = Annotated[
    int | None,
    typer.Option("-np", "--np", help="Ranks in all (default: every slot of the nodes)."),
]
PerNodeOpt = Annotated[
    int | None, typer.Option("--per-node", help="Ranks on each node (default: its slots).")
]
HostsOpt = Annotated[
    str | None, typer.Option("--hosts", help="Only these nodes, comma-separated (in order).")
]
MapByOpt = Annotated[
    str | None, typer.Option("--map-by", help="Open MPI's --map-by (default: slot).")
]
EnvOpt = Annotated[
    list[str] | None,
    typer.Option("--env", help="NAME=VALUE, or NAME to pass this shell's value (repeatable)."),
]
EnvFileOpt = Annotated[Path | None, typer.Option("--env-file", help="A file of NAME=VALUE lines.")]
TorchOpt = Annotated[
    bool,
    typer.Option(
        "--torch",
        help="Give every rank RANK, WORLD_SIZE, LOCAL_RANK, NODE_RANK, MASTER_ADDR/PORT.",
    ),
]
LauncherOpt = Annotated[str, typer.Option("--launcher", help="mpirun, or torchrun (one per node).")]
ViaOpt = Annotated[
    str | None,
    typer.Option(
        "--via",
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
        help="Copy this folder to every node first (rsync; honours .mpiclusterignore) "
        "and run from there.",
    ),
]
SyncToOpt = Annotated[
    str | None,
    typer.Option(
        "--sync-to", help="Where --sync puts it (default: ~/mpicluster-run/<folder name>)."
    ),
]
ChdirOpt = Annotated[
    str | None,
    typer.Option(
        "--chdir", help="Run from this folder on every node (default: --sync's, else home)."
    ),
]
HangTimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--hang-timeout",
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
        help="Run this shell command once on every node of the job, from its folder, "
        "before any rank starts; a node where it fails stops the job.",
    ),
]
CollectOpt = Annotated[
    str | None,
    typer.Option(
        "--collect",
        help="After the job (whatever its exit code), copy this path (relative to the "
        "job's folder) from its nodes into ~/.local/state/mpicluster/clusters/NAME/jobs/JOB/NODE/.",
    ),
]
CollectFromOpt = Annotated[
    str,
    typer.Option("--collect-from", help="all: every node of the job; head: rank 0's only."),
]
RequirementsOpt = Annotated[
    Path | None,
    typer.Option(
        "--requirements",
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
    hosts: HostsOpt = None,
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
) -> None:
    """Run a program on the cluster's nodes from the head node, with the cluster's
    environment; a rank that fails ends the job, Ctrl-C stops every rank.

    Exit codes: the job's own, 2 bad input, 124 stopped by --hang-timeout,
    130 stopped by Ctrl-C; with --detach, 0 once the job runs.
    """
    display = Display(messages_on_stderr=True)
    with guarded(display):
        inv = load_inventory(inventory)
        via = _judged(inv, via, launcher, hang_timeout, keep_hung, sync, sync_to)
        steps = _steps(setup, collect, collect_from, via)
        if detach and via == "slurm" and hang_timeout is not None:
            raise UsageError(
                "--hang-timeout: a detached Slurm job ends at its time limit instead "
                "(scheduler's default_time); use --via mpirun to watch it"
            )
        options = _options(
            program, np, per_node, hosts, map_by, env, env_file, torch, launcher, debug, via
        )
        plan = ClusterPlan.of(inv)
        if inspect:
            _inspect(display, plan, as_json=json_output)
            return
        synced = _prepared(display, plan, options, sync, sync_to, dry_run=dry_run)
        if synced is not None:
            chdir = chdir or synced.destination
        if requirements is not None:
            options = _with_packages(display, plan, options, requirements, dry_run, steps)
        if steps.setup and not dry_run:
            steps.done = _setup(display, plan, options, steps.setup, chdir, synced, json_output)
        if detach and not dry_run:
            hang = (hang_timeout, keep_hung)
            _detached(display, plan, options, chdir, hang, steps, str(inventory), json_output)
            return
        watch = _hang_watch(display, plan, options, hang_timeout, keep_hung)
        _job(display, plan, options, synced, chdir, tag, watch, dry_run, json_output, steps)


def _judged(
    inv: Inventory,
    via: str | None,
    launcher: str,
    hang_timeout: float | None,
    keep_hung: bool,
    sync: Path | None,
    sync_to: str | None,
) -> str:
    """The options judged before anything reaches a node (--inspect included); the
    --via to use."""
    if hang_timeout is not None and not 0 < hang_timeout < math.inf:  # nan fails both
        raise UsageError("--hang-timeout must be more than 0 seconds (and finite)")
    if keep_hung and hang_timeout is None:
        raise UsageError("--keep-hung needs --hang-timeout")
    if sync_to and not sync:
        raise UsageError("--sync-to needs --sync")
    if launcher not in ("mpirun", "torchrun"):
        raise UsageError(f"--launcher {launcher!r}: one of mpirun, torchrun")
    if via is None:
        via = "slurm" if inv.scheduler is not None else "mpirun"
    if via not in ("mpirun", "slurm"):
        raise UsageError(f"--via {via!r}: one of mpirun, slurm")
    return via


@dataclass
class Steps:
    """What runs around the job: --requirements and --setup before it (`done`: how the
    setup went), --collect after it."""

    setup: str | None = None
    collect: str | None = None
    collect_from: str = "all"
    done: SetupResult | None = None
    env: JobEnv | None = None


def _steps(setup: str | None, collect: str | None, collect_from: str, via: str) -> Steps:
    """--setup and --collect judged before anything reaches a node."""
    from mpicluster.run.collect import checked_path

    if setup is not None and not setup.strip():
        raise UsageError("--setup: an empty command")
    if collect_from not in ("all", "head"):
        raise UsageError(f"--collect-from {collect_from!r}: one of all, head")
    if collect_from != "all" and collect is None:
        raise UsageError("--collect-from needs --collect")
    if (setup or collect) and via == "slurm":
        raise UsageError("--setup and --collect run over ssh: use them with --via mpirun")
    return Steps(setup, checked_path(collect) if collect is not None else None, collect_from)


def _setup(
    display: Display,
    plan: ClusterPlan,
    options: RunOptions,
    command: str,
    cwd: str | None,
    synced: SyncResult | None,
    as_json: bool,
) -> SetupResult:
    """--setup on every node of the job; where it fails, say so and end with its code."""
    from mpicluster.render.run import show_setup
    from mpicluster.run.job import head_node, job_nodes
    from mpicluster.run.setup_step import run_setup

    head_node(plan, options)  # --hosts judged before any node runs anything
    nodes = job_nodes(plan, options)
    display.progress(f"Setup on {len(nodes)} node(s): {command}")
    result = run_setup(plan, nodes, command, cwd, lambda n, _, line: display.tagged(n, line))
    show_setup(display, result, synced, as_json=as_json)
    if not result.ok:
        raise typer.Exit(result.exit_code)
    return result


def _with_packages(
    display: Display,
    plan: ClusterPlan,
    options: RunOptions,
    path: Path,
    dry_run: bool,
    steps: Steps,
) -> RunOptions:
    """--requirements: the job's environment on its nodes; the options that put it
    first on every rank's PYTHONPATH."""
    from dataclasses import replace

    from mpicluster.run import job_env
    from mpicluster.run.job import head_node, job_nodes

    lines = job_env.read_requirements(path)
    if dry_run:
        return options
    head_node(plan, options)  # --hosts judged before any node is asked
    steps.env = job_env.prepare(plan, job_nodes(plan, options), lines, display.progress)
    made = f"made on {', '.join(steps.env.built_on)}" if steps.env.built_on else "ready"
    display.progress(
        f"The job's packages: {made} ({steps.env.seconds:.1f} s, {steps.env.pythonpath})"
    )
    given = [e for e in options.env if e.startswith("PYTHONPATH=")]
    rest = [e for e in options.env if not e.startswith("PYTHONPATH=")]
    value = ":".join([steps.env.pythonpath, *(e.split("=", 1)[1] for e in given)])
    return replace(options, env=(*rest, f"PYTHONPATH={value}"))


def _options(
    program: list[str] | None,
    np: int | None,
    per_node: int | None,
    hosts: str | None,
    map_by: str | None,
    env: list[str] | None,
    env_file: Path | None,
    torch: bool,
    launcher: str,
    debug: bool,
    via: str,
) -> RunOptions:
    """The command line's options as the core's RunOptions (--env-file read)."""
    from mpicluster.run.launch import RunOptions, parse_env_file

    variables = {}
    if env_file is not None:
        if not env_file.is_file():
            raise UsageError(f"--env-file: no such file: {env_file}")
        variables = parse_env_file(env_file.read_text(), str(env_file))
    return RunOptions(
        program=tuple(program or ()),
        np=np,
        per_node=per_node,
        hosts=tuple(h.strip() for h in hosts.split(",") if h.strip()) if hosts else (),
        map_by=map_by,
        env=tuple(env or ()),
        env_file=variables,
        torch=torch,
        launcher=launcher,  # type: ignore[arg-type]
        debug=debug,
        via=via,  # type: ignore[arg-type]
    )


def _inspect(display: Display, plan: ClusterPlan, *, as_json: bool) -> None:
    """--inspect: where the ranks of the jobs running on the nodes are; exit 1 if none."""
    from mpicluster.render.run import show_inspect
    from mpicluster.run import hang_report as hang

    report = hang.inspect(plan, plan.nodes, "*", display.progress)
    show_inspect(display, report, as_json=as_json)
    if not report.ranks:
        raise typer.Exit(1)


def _prepared(
    display: Display,
    plan: ClusterPlan,
    options: RunOptions,
    sync: Path | None,
    sync_to: str | None,
    *,
    dry_run: bool,
) -> SyncResult | None:
    """The options judged against the inventory, then --sync's folder on every node
    (not for --dry-run)."""
    from mpicluster.run.job import sync_nodes
    from mpicluster.run.launch import validate

    validate(plan.inventory, options, os.environ)
    if sync is None or dry_run:
        return None
    return sync_nodes(plan, options, sync, sync_to, display.progress)


def _detached(
    display: Display,
    plan: ClusterPlan,
    options: RunOptions,
    cwd: str | None,
    hang: tuple[float | None, bool],
    steps: Steps,
    inventory: str,
    as_json: bool,
) -> None:
    """--detach: the job started under the head's launcher (or queued by sbatch); its id
    and how to follow it."""
    from mpicluster.render.jobs import show_started
    from mpicluster.run import detached

    collect = {"path": steps.collect, "from": steps.collect_from} if steps.collect else None
    found = detached.start(
        plan,
        options,
        dict(os.environ),
        display.progress,
        cwd=cwd,
        hang_timeout=hang[0],
        keep_hung=hang[1],
        collect=collect,
    )
    show_started(display, found, inventory, steps.done, as_json=as_json)


def _hang_watch(
    display: Display,
    plan: ClusterPlan,
    options: RunOptions,
    hang_timeout: float | None,
    keep_hung: bool,
) -> HangWatch | None:
    """--hang-timeout: read the job's ranks on its nodes when it goes quiet, show them."""
    if hang_timeout is None:
        return None
    from mpicluster.render.run import show_hang
    from mpicluster.run import hang_report as hang
    from mpicluster.run.job import HangWatch

    hosts = set(options.hosts) or {n.name for n in plan.nodes}
    return HangWatch(
        hang_timeout,
        lambda job: hang.inspect(
            plan, [n for n in plan.nodes if n.name in hosts], job, display.progress
        ),
        lambda report: show_hang(display, report, hang_timeout),
        stop=not keep_hung,
    )


def _job(
    display: Display,
    plan: ClusterPlan,
    options: RunOptions,
    synced: SyncResult | None,
    chdir: str | None,
    tag: bool,
    watch: HangWatch | None,
    dry_run: bool,
    as_json: bool,
    steps: Steps,
) -> None:
    """The job run (SIGTERM stops it as Ctrl-C does), shown, then --collect; its exit
    code is ours."""
    from mpicluster.render.run import LinePrinter, show_job
    from mpicluster.run.job import head_node, job_nodes, run_job

    printer = LinePrinter(tag=tag, stdout_to_stderr=as_json)
    terminate_as_interrupt()
    result = run_job(
        plan,
        options,
        dict(os.environ),
        printer.line,
        display.progress,
        cwd=chdir,
        dry_run=dry_run,
        hang=watch,
    )
    collected = None
    if steps.collect and not dry_run and result.job_id:
        from mpicluster.run.collect import collect

        nodes = [head_node(plan, options)] if steps.collect_from == "head" else None
        nodes = nodes or job_nodes(plan, options)
        display.progress(f"Collecting {steps.collect} from {len(nodes)} node(s)")
        collected = collect(plan, nodes, steps.collect, chdir, result.job_id)
    show_job(
        display,
        result,
        synced,
        as_json=as_json,
        dry_run=dry_run,
        collected=collected,
        setup=steps.done,
        env=steps.env,
    )
    if not dry_run and result.exit_code != 0:
        raise typer.Exit(result.exit_code)
