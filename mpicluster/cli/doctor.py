"""`mpicluster doctor`: check a cluster for what breaks MPI."""

from __future__ import annotations

from typing import Annotated

import typer

from mpicluster.cli.common import InventoryArg, guarded
from mpicluster.cli.help import examples
from mpicluster.util import exitcodes

CheckOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--check",
        metavar="CHECK",
        help="Run only this check (repeatable): ssh, mesh, env, rank, names, ports, interfaces, "
        "fabric, versions, stack, gpus, clock, disk, limits, hostfile, users, launch, slurm.",
        show_default=False,
    ),
]
DoctorJsonOpt = Annotated[
    bool, typer.Option("--json", help="Print the report as JSON (schema 1) on stdout.")
]
FixHintsOpt = Annotated[
    bool, typer.Option("--fix-hints/--no-fix-hints", help="Say how to fix each problem.")
]
AllPairsOpt = Annotated[
    bool,
    typer.Option(
        "--all-pairs",
        help="Log in over every node pair above 8 nodes too (default: a ring, a sample "
        "and every other pair judged from the nodes' facts).",
    ),
]
TimeoutOpt = Annotated[
    float | None,
    typer.Option(
        metavar="SECONDS",
        help="Seconds one probe may wait (connect, ssh between nodes) "
        "[default: the inventory's ssh.connect_timeout].",
        show_default=False,
    ),
]
SeedOpt = Annotated[
    int | None,
    typer.Option(
        metavar="N", help="Seed of the pair sample above 8 nodes [default: from the name]."
    ),
]
LaunchOpt = Annotated[
    bool,
    typer.Option(
        "--launch/--no-launch",
        help="Prove the cluster by launching MPI (on each node alone, then across nodes).",
    ),
]

GpuDiagOpt = Annotated[
    int | None,
    typer.Option(
        "--gpu-diag",
        metavar="LEVEL",
        help="Also run NVIDIA DCGM's diagnostics (dcgmi diag -r LEVEL, 1 to 4) on the GPU "
        "nodes, under a time limit (1: 2 min, 2: 10 min, 3: 1 h, 4: 2 h). They load the "
        "GPUs: never by default.",
        show_default=False,
    ),
]
DeepOpt = Annotated[
    bool,
    typer.Option(
        "--deep",
        help="The stack check takes the sha256 of every file of the stack (seconds per "
        "GiB), not only of the programs and libraries a launch loads.",
    ),
]
PerfOpt = Annotated[
    bool,
    typer.Option(
        "--perf",
        help="Also measure: bench's quick form (ring pairs over MPI, a 256 MiB allreduce; "
        "seconds), a slow node or link failing it.",
    ),
]
CordonOpt = Annotated[
    bool,
    typer.Option(
        "--cordon",
        help="Cordon each node a check fails (not a warning; not a pair's or the whole "
        "cluster's failure, and none when every node fails), the finding as the reason; "
        "return a node doctor cordoned once it passes. The exit code stays the report's.",
    ),
]


def doctor(
    inventory: InventoryArg,
    check: CheckOpt = None,
    json_output: DoctorJsonOpt = False,
    fix_hints: FixHintsOpt = True,
    all_pairs: AllPairsOpt = False,
    timeout: TimeoutOpt = None,
    seed: SeedOpt = None,
    launch: LaunchOpt = True,
    gpu_diag: GpuDiagOpt = None,
    deep: DeepOpt = False,
    perf: PerfOpt = False,
    cordon: CordonOpt = False,
) -> None:
    """Check a cluster for what breaks MPI, node by node.

    Each problem is put on its node and said with how to fix it.

    Checks: ssh (control machine to nodes), mesh (node-to-node ssh), env (non-interactive
    PATH, /etc/environment), rank (what a rank's login sets and resolves: python, mpi4py,
    libmpi, prted), names (resolution, 127.0.1.1), ports (TCP between nodes),
    interfaces, fabric (InfiniBand/RoCE/EFA ports and whether MPI and NCCL use them),
    versions (same MPI build everywhere), stack (its files as up installed them, by its
    manifest), gpus, clock, disk, limits (open files, locked memory, processes,
    /dev/shm for the ranks), hostfile; then
    launch: MPI started for real, on each node alone and across nodes, each failure put
    on its node and explained from what mpirun printed and the other checks saw.

    With --cordon, the nodes it fails are cordoned (`mpicluster cordon`) and the ones it
    cordoned before and passes now returned, each said in one line after the report.

    Exit codes: 0 every check passed, 1 doctor itself failed (an internal error),
    2 bad input, 5 at least one check failed, 6 warnings only, 130 interrupted.
    """
    from mpicluster import render
    from mpicluster.cli.nodes import follow_findings
    from mpicluster.cluster.plan import ClusterPlan
    from mpicluster.doctor import cordon_findings, run_doctor
    from mpicluster.render import Display

    display = Display(quiet=json_output)
    with guarded(display):
        plan = ClusterPlan.load(inventory)
        report = run_doctor(
            plan,
            checks=check,
            timeout=timeout,
            all_pairs=all_pairs,
            seed=seed,
            launch=launch,
            gpu_diag=gpu_diag,
            deep=deep,
            perf=perf,
            on_progress=display.progress,
        )
        applied = follow_findings(plan, cordon_findings(report, plan), report) if cordon else None
        render.show(display, report, as_json=json_output, fix_hints=fix_hints)
        if applied is not None and not json_output:
            from mpicluster.render.nodes import show_applied

            show_applied(display, applied)
        if report.exit_code != exitcodes.OK:
            raise typer.Exit(report.exit_code)


COMMANDS = [doctor]

EXAMPLES = {
    "doctor": examples(
        "mpicluster doctor inventories/local.yaml",
        "mpicluster doctor inventories/gpu.yaml --check ssh --check gpus --json",
    ),
}
