"""How `mpicluster nodes` is shown: one row per node."""

from __future__ import annotations

from rich.markup import escape

from mpicluster.health import NodesReport
from mpicluster.render.display import Display, styled
from mpicluster.render.jobs import when

STYLE = {"ready": "pass", "unhealthy": "fail", "unreachable": "fail", "unknown": "warn"}


def show_nodes(display: Display, report: NodesReport, *, as_json: bool = False) -> None:
    if as_json:
        display.json(report.to_dict())
        return
    rows = []
    for node in report.nodes:
        finding = node.finding
        said = f"{finding['check']}: {finding['evidence']}" if finding else node.problem
        checked = ""
        if node.health:
            checked = when(node.health["at"]) if node.health.get("at") else "now"
        rows.append([node.name, styled(STYLE[node.state], node.state), checked, escape(said)])
    how = "checked now" if report.checked_now else "their last health check"
    display.table(
        f"Nodes of {report.cluster} ({how})", ["node", "state", "checked", "finding"], rows
    )
