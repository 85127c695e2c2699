"""`doctor`: a compact table grouped by check, and the one-line verdict."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from mpicluster.doctor.model import CheckReport, DoctorReport, Result, Status
from mpicluster.render.display import Display, styled

#: Passing results of one check beyond this many are folded into one row.
FOLD_PASSES = 3
SKIP = styled("skip")


def _status(status: Status) -> str:
    return styled(str(status), "FAIL" if status == Status.FAIL else str(status))


def show_doctor(display: Display, report: DoctorReport, *, fix_hints: bool = True) -> None:
    table = Table(
        title=f"mpicluster doctor: {escape(report.cluster)}",
        title_justify="left",
        show_lines=False,
        expand=False,
    )
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("node", no_wrap=True)
    table.add_column("evidence", overflow="fold")
    fix_hints = fix_hints and any(r.fix for r in report.results)
    if fix_hints:
        table.add_column("fix", overflow="fold")
    for check in report.checks:
        rows = _rows(check, fix_hints)
        for index, row in enumerate(rows):
            label = f"[bold]{check.name}[/]" if index == 0 else ""
            table.add_row(label, *row, end_section=index == len(rows) - 1)
    display.print(table)
    summary = report.summary
    code = report.exit_code
    line = (
        f"doctor: {summary['pass']} pass, {summary['warn']} warn, {summary['fail']} fail "
        f"in {report.seconds:.1f} s"
    )
    if code == 0:
        display.success(line)
    elif report.status == Status.WARN:
        display.warning(f"{line} (exit {code})")
    else:
        display.failure(f"{line} (exit {code})")


def _rows(check: CheckReport, fix_hints: bool) -> list[list[str]]:
    blank = [""] if fix_hints else []
    rows = [_row(result, fix_hints) for result in check.results if result.status != Status.PASS]
    passes = [r for r in check.results if r.status == Status.PASS]
    if len(passes) > 1:
        # one row for the passes: which nodes, and what the first one showed
        nodes = [r.node for r in passes if r.node]
        shown = ", ".join(nodes[:FOLD_PASSES])
        if len(nodes) > FOLD_PASSES:
            shown = f"{nodes[0]} +{len(nodes) - 1}"
        evidence = f"{passes[0].node}: {passes[0].evidence}" if passes[0].node else ""
        rows.append([_status(Status.PASS), escape(shown), escape(evidence), *blank])
    else:
        rows.extend(_row(result, fix_hints) for result in passes)
    for node in check.not_checked:
        rows.append([SKIP, escape(node), "[dim]not checked: doctor could not reach it[/]", *blank])
    if not rows:
        rows.append(["[dim]-[/]", "", "[dim]nothing to check[/]", *blank])
    return rows


def _row(result: Result, fix_hints: bool) -> list[str]:
    node = result.node or "cluster"
    if result.peer:
        node += f" -> {result.peer}"
    row = [_status(result.status), escape(node), escape(result.evidence)]
    if fix_hints:
        row.append(escape(result.fix or ""))
    return row
