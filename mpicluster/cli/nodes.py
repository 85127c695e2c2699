"""`mpicluster nodes INVENTORY`: every node's state at a glance."""

from __future__ import annotations

from typing import Annotated

import typer

from mpicluster.cli.common import InventoryArg, JsonOpt, guarded
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.render import Display


def nodes(
    inventory: InventoryArg,
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Run each node's health check now (as root) instead of reading its last.",
        ),
    ] = False,
    json_output: JsonOpt = False,
) -> None:
    """Show every node's state: ready, unhealthy (its health check's first finding),
    unreachable, or unknown (no check has run there as root yet).

    Exit codes: 0 every node ready, 1 any other, 2 bad input.
    """
    from mpicluster.health import node_states
    from mpicluster.render.nodes import show_nodes

    display = Display()
    with guarded(display):
        report = node_states(ClusterPlan.load(inventory), check=check)
        show_nodes(display, report, as_json=json_output)
        raise typer.Exit(report.exit_code)
