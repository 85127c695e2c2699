"""`mpicluster run INVENTORY [options] -- PROGRAM ARGS...`: a job on the cluster."""

from __future__ import annotations

import math
import os
import signal
from pathlib import Path
from typing import Annotated

import typer

from mpicluster.cli.common import InventoryArg, JsonOpt, guarded
from mpicluster.cluster.inventory import load_inventory
from mpicluster.errors import UsageError
from mpicluster.render import Display

CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": False}


def run(
    inventory: InventoryArg,
    program: Annotated[
        list[str] | None,
        typer.Argument(help="The program and its arguments, after --.", show_default=False),
    ] = None,
    np: Annotated[
        int | None,
        typer.Option("-np", "--np", help="Ranks in all (default: every slot of the nodes)."),
    ] = None,
    per_node: Annotated[
        int | None, typer.Option("--per-node", help="Ranks on each node (default: its slots).")
    ] = None,
    hosts: Annotated[
        str | None, typer.Option("--hosts", help="Only these nodes, comma-separated (in order).")
    ] = None,
    map_by: Annotated[
        str | None, typer.Option("--map-by", help="Open MPI's --map-by (default: slot).")
    ] = None,
    env: Annotated[
        list[str] | None,
        typer.Option("--env", help="NAME=VALUE, or NAME to pass this shell's value (repeatable)."),
    ] = None,
    env_file: Annotated[
        Path | None, typer.Option("--env-file", help="A file of NAME=VALUE lines.")
    ] = None,
    torch: Annotated[
        bool,
        typer.Option(
            "--torch",
            help="Give every rank RANK, WORLD_SIZE, LOCAL_RANK, NODE_RANK, MASTER_ADDR/PORT.",
        ),
    ] = False,
    launcher: Annotated[
        str, typer.Option("--launcher", help="mpirun, or torchrun (one per node).")
    ] = "mpirun",
    via: Annotated[
        str | None,
        typer.Option(
            "--via",
            help="mpirun, or slurm (srun --mpi=pmix: a job in the queue). Default: slurm "
            "when the inventory has a scheduler, else mpirun.",
            show_default=False,
        ),
    ] = None,
    debug: Annotated[bool, typer.Option("--debug", help="NCCL_DEBUG=INFO on every rank.")] = False,
    tag: Annotated[
        bool, typer.Option("--tag", help="Prefix each line with its rank and node.")
    ] = False,
    sync: Annotated[
        Path | None,
        typer.Option(
            "--sync",
            help="Copy this folder to every node first (rsync; honours .mpiclusterignore) "
            "and run from there.",
        ),
    ] = None,
    sync_to: Annotated[
        str | None,
        typer.Option(
            "--sync-to", help="Where --sync puts it (default: ~/mpicluster-run/<folder name>)."
        ),
    ] = None,
    chdir: Annotated[
        str | None,
        typer.Option(
            "--chdir", help="Run from this folder on every node (default: --sync's, else home)."
        ),
    ] = None,
    hang_timeout: Annotated[
        float | None,
        typer.Option(
            "--hang-timeout",
            help="When the job prints nothing for this many seconds, show where every "
            "rank is (py-spy) and stop it (exit 124).",
        ),
    ] = None,
    keep_hung: Annotated[
        bool,
        typer.Option("--keep-hung", help="With --hang-timeout: report, but keep the job."),
    ] = False,
    inspect: Annotated[
        bool,
        typer.Option(
            "--inspect", help="Run nothing: show where the ranks of running jobs are (py-spy)."
        ),
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the command line on the head; run nothing.")
    ] = False,
    json_output: JsonOpt = False,
) -> None:
    """Run a program on the cluster's nodes from the head node, with the cluster's
    environment; a rank that fails ends the job, Ctrl-C stops every rank.

    Exit codes: the job's own, 2 bad input, 124 stopped by --hang-timeout,
    130 stopped by Ctrl-C.
    """
    from mpicluster.render.run import LinePrinter, show_hang, show_result
    from mpicluster.run import hang_report as hang
    from mpicluster.run.job import HangWatch, run_job, sync_nodes
    from mpicluster.run.launch import RunOptions, parse_env_file, validate

    display = Display(messages_on_stderr=True)
    with guarded(display):
        inv = load_inventory(inventory)
        # judged before anything reaches a node (--inspect included)
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
        variables = {}
        if env_file is not None:
            if not env_file.is_file():
                raise UsageError(f"--env-file: no such file: {env_file}")
            variables = parse_env_file(env_file.read_text(), str(env_file))
        options = RunOptions(
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
        if inspect:
            report = hang.inspect(inv, inv.nodes, "*", display.progress)
            if json_output:
                display.json(report.to_dict())
            else:
                show_hang(display, report, None)
            if not report.ranks:
                raise typer.Exit(1)
            return
        validate(inv, options, os.environ)
        synced = None
        if sync is not None and not dry_run:
            synced = sync_nodes(inv, options, sync, sync_to, display.progress)
            chdir = chdir or synced.destination
        printer = LinePrinter(tag=tag, stdout_to_stderr=json_output)
        # SIGTERM stops the job as Ctrl-C does
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        watch = None
        if hang_timeout is not None:
            hosts = set(options.hosts) or {n.name for n in inv.nodes}
            watch = HangWatch(
                hang_timeout,
                lambda job: hang.inspect(
                    inv, [n for n in inv.nodes if n.name in hosts], job, display.progress
                ),
                lambda report: show_hang(display, report, hang_timeout),
                stop=not keep_hung,
            )
        result = run_job(
            inv,
            options,
            dict(os.environ),
            printer.line,
            display.progress,
            cwd=chdir,
            dry_run=dry_run,
            hang=watch,
        )
        if dry_run:
            display.text(result.command + "\n")
            return
        show_result(display, result, synced, as_json=json_output)
        if result.exit_code != 0:
            raise typer.Exit(result.exit_code)
