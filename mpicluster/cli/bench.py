"""`mpicluster bench`: how fast the cluster is, and which node or link is slow."""

from __future__ import annotations

from typing import Annotated

import typer

from mpicluster import exitcodes, render
from mpicluster.cli.common import InventoryArg, guarded
from mpicluster.cluster.inventory import load_inventory
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.render import Display


def bench(
    inventory: InventoryArg,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the report as JSON (schema 1) on stdout.")
    ] = False,
    nodes: Annotated[
        list[str] | None,
        typer.Option("--nodes", help="Measure only these nodes (repeatable).", show_default=False),
    ] = None,
    all_pairs: Annotated[
        bool,
        typer.Option(
            "--all-pairs",
            help="Measure every node pair above 8 nodes too (default: a ring and a seeded sample).",
        ),
    ] = False,
    seed: Annotated[
        int | None, typer.Option(help="Seed of the pair sample [default: from the name].")
    ] = None,
    expect: Annotated[
        float | None,
        typer.Option(
            "--expect",
            metavar="GBPS",
            help="What a pair should carry, GB/s each way [default: the median pair].",
            show_default=False,
        ),
    ] = None,
    quick: Annotated[
        bool, typer.Option("--quick", help="Ring pairs and one allreduce size only.")
    ] = False,
) -> None:
    """Measure the cluster with its own MPI (installs nothing): bandwidth and latency of
    node pairs in rounds of disjoint pairs, then an allreduce over all nodes from 8 B to
    128 MiB; a pair well below the others is measured again with healthy nodes, so that a
    slow node is told from a slow link.

    Exit codes: 0 nothing flagged, 2 a slow node or link (also: bad input, a run that
    failed), 130 interrupted.
    """
    from mpicluster.bench import run_bench

    display = Display(quiet=json_output)
    with guarded(display, internal_exit=exitcodes.DOCTOR_FAIL):
        report = run_bench(
            ClusterPlan.of(load_inventory(inventory)),
            nodes=nodes,
            all_pairs=all_pairs,
            seed=seed,
            expect=expect,
            quick=quick,
            on_progress=display.progress,
        )
        render.show(display, report, as_json=json_output)
        if report.exit_code != exitcodes.DOCTOR_PASS:
            raise typer.Exit(report.exit_code)
