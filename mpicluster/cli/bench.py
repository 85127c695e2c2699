"""`mpicluster bench`: how fast the cluster is, and which node or link is slow."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mpicluster.cli.common import NODES_METAVAR, InventoryArg, guarded
from mpicluster.cli.help import examples
from mpicluster.util import exitcodes

NodesOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--nodes",
        metavar=NODES_METAVAR,
        help="Measure only these nodes, comma-separated or repeated.",
        show_default=False,
    ),
]
SeedOpt = Annotated[
    int | None,
    typer.Option(metavar="N", help="Seed of the pair sample [default: from the name]."),
]
ExpectOpt = Annotated[
    float | None,
    typer.Option(
        "--expect",
        metavar="GBPS",
        help="What a pair should carry, GB/s each way "
        "[default: the median of the faster half of the pairs].",
        show_default=False,
    ),
]
CompareOpt = Annotated[
    bool, typer.Option("--compare", help="Show what changed since the last run of this cluster.")
]
ReportOpt = Annotated[
    Path | None,
    typer.Option(
        "--report",
        metavar="DIR",
        help="Write heatmap.png, busbw.png and index.html there (needs matplotlib).",
        show_default=False,
    ),
]
CordonOpt = Annotated[
    bool,
    typer.Option(
        "--cordon",
        help="Cordon each slow node (not the ends of a slow link), the finding as the "
        "reason; return a node bench cordoned once it is measured fast. The exit code "
        "stays the report's.",
    ),
]


def bench(
    inventory: InventoryArg,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the report as JSON (schema 1) on stdout.")
    ] = False,
    nodes: NodesOpt = None,
    all_pairs: Annotated[
        bool,
        typer.Option(
            "--all-pairs",
            help="Measure every node pair above 8 nodes too (default: a ring and a seeded sample).",
        ),
    ] = False,
    seed: SeedOpt = None,
    expect: ExpectOpt = None,
    quick: Annotated[
        bool, typer.Option("--quick", help="Ring pairs, no baseline, one allreduce size.")
    ] = False,
    compare: CompareOpt = False,
    report_dir: ReportOpt = None,
    cordon: CordonOpt = False,
) -> None:
    """Measure the cluster's network and MPI, and find a slow node or link.

    Installs nothing. Node pairs, in rounds of disjoint pairs, through the network alone
    (iperf3, both ways at once: the baseline) and with the cluster's MPI (bandwidth,
    latency), then an allreduce over all nodes from 8 B to 256 MiB; a pair well below
    the others, or using less of its network than they do, is measured again with
    healthy nodes, so that a slow node is told from a slow link.

    Every run is kept in the cluster's state folder (`--compare` reads the last one).
    With --cordon, each slow node is cordoned (`mpicluster cordon`) and the ones bench
    cordoned before and measures fast now returned, each said in one line after the report.

    Exit codes: 0 nothing flagged, 1 bench itself failed (an internal error), 2 bad
    input, 4 a node could not be reached, 5 a slow node or link, a wrong result or a
    run that failed, 6 warnings only (no baseline: iperf3 missing), 130 interrupted.
    """
    from mpicluster import render
    from mpicluster.bench import cordon_findings, history, plots, run_bench
    from mpicluster.cli.nodes import follow_findings
    from mpicluster.cluster import node_choice
    from mpicluster.cluster.plan import ClusterPlan
    from mpicluster.render import Display
    from mpicluster.render.nodes import show_applied

    display = Display(quiet=json_output)
    with guarded(display):
        plan = ClusterPlan.load(inventory)
        if report_dir is not None:
            plots.check_folder(report_dir)
        report = run_bench(
            plan,
            nodes=list(node_choice.split(nodes)) or None,
            all_pairs=all_pairs,
            seed=seed,
            expect=expect,
            quick=quick,
            on_progress=display.progress,
        )
        kept, comparison = history.record(report.to_dict())
        report.kept = str(kept)
        if compare:
            report.comparison = comparison
        if report_dir is not None:
            report.written = [str(p) for p in plots.write(report.to_dict(), report_dir)]
        applied = follow_findings(plan, cordon_findings(report), report) if cordon else None
        render.show(display, report, as_json=json_output)
        if applied is not None and not json_output:
            show_applied(display, applied)
        if report.exit_code != exitcodes.OK:
            raise typer.Exit(report.exit_code)


COMMANDS = [bench]

EXAMPLES = {
    "bench": examples(
        "mpicluster bench inventories/gpu.yaml",
        "mpicluster bench inventories/gpu.yaml --quick --compare --report bench-report",
        "mpicluster bench inventories/gpu.yaml --nodes gpu01,gpu02,gpu03",
    ),
}
