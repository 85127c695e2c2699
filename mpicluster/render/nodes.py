"""How `mpicluster nodes` is shown: one row per node."""

from __future__ import annotations

from rich.markup import escape

from mpicluster.health import AppliedFindings, CordonResult, NodesReport
from mpicluster.render.display import Display, styled
from mpicluster.render.jobs import when

STYLE = {
    "ready": "pass",
    "unhealthy": "fail",
    "unreachable": "fail",
    "unknown": "warn",
    "cordoned": "warn",
    "drained": "warn",
}


def show_nodes(display: Display, report: NodesReport, *, as_json: bool = False) -> None:
    if as_json:
        display.json(report.to_dict())
        return
    rows = []
    for node in report.nodes:
        finding = node.finding
        said = f"{finding['check']}: {finding['evidence']}" if finding else node.problem
        if node.cordon is not None:
            cordon = node.cordon
            said = f"{cordon.reason} (by {cordon.by}, {cordon.who}, since {when(cordon.since)})"
        elif node.drained:
            words = "+".join((node.slurm or {}).get("states") or [])
            said = f"Slurm {words}: {(node.slurm or {}).get('reason') or 'no reason given'}"
        checked = ""
        if node.health:
            checked = when(node.health["at"]) if node.health.get("at") else "now"
        rows.append([node.name, styled(STYLE[node.state], node.state), checked, escape(said)])
    how = "checked now" if report.checked_now else "their last health check"
    display.table(
        f"Nodes of {report.cluster} ({how})", ["node", "state", "checked", "finding"], rows
    )


def show_cordon(display: Display, result: CordonResult, *, as_json: bool = False) -> None:
    if as_json:
        display.json(result.to_dict())
        return
    node = result.node
    if result.action == "unchanged":
        display.success(f"{node} is not cordoned: nothing to return")
    elif result.action == "cordoned":
        cordon = result.state.cordons[node]
        display.success(
            f"{node} cordoned ({escape(cordon.reason)}): left out of the hostfiles on "
            f"{len(result.written)} node(s), of `run` and of the smoke test"
        )
    else:
        display.success(f"{node} returned: back in the hostfiles on {len(result.written)} node(s)")
    _missed(display, result.missed)
    for said in result.on_change:
        display.warning(escape(said))


def show_applied(display: Display, applied: AppliedFindings) -> None:
    """What `doctor --cordon` or `bench --cordon` changed, one line each, after its report
    (with --json the report carries it under "cordons")."""
    decision = applied.decision
    done = "" if not applied.problem else " (not written)"
    for node, reason in decision.cordon.items():
        display.info(f"cordoned {node}{done}: {reason}")
    for node in decision.give_back:
        display.info(f"returned {node}{done} (it passes now)")
    for note in decision.notes:
        display.info(note)
    if applied.problem:
        display.error(f"--cordon changed nothing: {applied.problem}")
    elif not decision.changes:
        display.info(f"--cordon: no node for {applied.by} to cordon or return")
    else:
        _missed(display, applied.missed)
    for said in applied.on_change:
        display.warning(escape(said))


def _missed(display: Display, missed: dict[str, str]) -> None:
    for name, why in missed.items():
        display.warning(
            f"{name} could not be reached ({escape(why)}): it gets the cordons at the next "
            "cordon, uncordon or up (the newest state wins)"
        )
