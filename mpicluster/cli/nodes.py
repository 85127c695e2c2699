"""`mpicluster nodes INVENTORY`: every node's state at a glance; `cordon` and `uncordon`
keep a node out of jobs and return it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from mpicluster.cli.common import InventoryArg, JsonOpt, guarded
from mpicluster.cli.help import examples

if TYPE_CHECKING:
    from mpicluster.cluster.cordon_verdicts import Findings
    from mpicluster.cluster.plan import ClusterPlan
    from mpicluster.health import AppliedFindings


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
    """Show every node's state: ready, unhealthy, unreachable or unknown.

    Unhealthy: its health check's first finding; unknown: no check has run there as root
    yet.

    Exit codes: 0 every node ready, 2 bad input, 4 a node could not be reached (every
    other is ready), 5 a node is not ready (unhealthy, unknown, cordoned, drained).
    """
    from mpicluster.cluster.plan import ClusterPlan
    from mpicluster.health import node_states
    from mpicluster.render import Display
    from mpicluster.render.nodes import show_nodes

    display = Display()
    with guarded(display):
        report = node_states(ClusterPlan.load(inventory), check=check)
        show_nodes(display, report, as_json=json_output)
        raise typer.Exit(report.exit_code)


NodeArg = Annotated[
    str, typer.Argument(help="The node's name in the inventory.", show_default=False)
]


def cordon(
    inventory: InventoryArg,
    node: NodeArg,
    reason: Annotated[
        str,
        typer.Option(
            "--reason", metavar="TEXT", help="Why (one line; shown wherever the node is listed)."
        ),
    ],
    json_output: JsonOpt = False,
) -> None:
    """Keep a node out of jobs until `mpicluster uncordon`.

    It stays provisioned, and is left out of the hostfiles on every node, of `run` and
    of the smoke test.

    Exit codes: 0 cordoned (a node that could not be reached gets it later), 1 the
    hostfiles could not be written, 2 bad input.
    """
    _change(inventory, node, reason, json_output)


def uncordon(inventory: InventoryArg, node: NodeArg, json_output: JsonOpt = False) -> None:
    """Return a cordoned node to jobs.

    It is back in the hostfiles on every node, in `run` and in the smoke test.

    Exit codes: 0 returned (or it was not cordoned), 1 the hostfiles could not be
    written, 2 bad input.
    """
    _change(inventory, node, None, json_output)


def _change(inventory, node: str, reason: str | None, json_output: bool) -> None:
    from mpicluster.cluster.plan import ClusterPlan
    from mpicluster.health import change
    from mpicluster.render import Display
    from mpicluster.render.nodes import show_cordon

    display = Display()
    with guarded(display):
        result = change(ClusterPlan.load(inventory), node, reason)
        show_cordon(display, result, as_json=json_output)


def follow_findings(plan: ClusterPlan, findings: Findings, report: Any) -> AppliedFindings:
    """`doctor --cordon` and `bench --cordon`: the changes their run calls for, made, and
    carried by the report's JSON ("cordons": a DoctorReport's or a BenchReport's)."""
    from mpicluster.health import apply_findings

    applied = apply_findings(plan, findings)
    report.cordons = applied.to_dict()
    return applied


COMMANDS = [nodes, cordon, uncordon]


EXAMPLES = {
    "nodes": examples(
        "mpicluster nodes inventories/gpu.yaml", "mpicluster nodes inventories/gpu.yaml --check"
    ),
    "cordon": examples(
        "mpicluster cordon inventories/gpu.yaml gpu02 --reason 'GPU 3 falls off the bus'"
    ),
    "uncordon": examples("mpicluster uncordon inventories/gpu.yaml gpu02"),
}
