"""All terminal output of mpicluster: messages, progress lines and tables.

The core never prints; it returns results and reports progress through
callbacks that the CLI points here.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table


class Display:
    def __init__(self, *, quiet: bool = False):
        self.out = Console(highlight=False, soft_wrap=True)
        self.err = Console(stderr=True, highlight=False, soft_wrap=True)
        self.quiet = quiet
        self.started = time.monotonic()

    def error(self, message: str, hint: str | None = None) -> None:
        text = f"[bold red]error:[/] {escape(message)}"
        if hint:
            text += f" [dim](hint: {escape(hint)})[/]"
        self.err.print(text)

    def problems(self, lines: list[str]) -> None:
        for line in lines:
            self.err.print(f"[bold red]error:[/] {escape(line)}")

    def info(self, message: str) -> None:
        self.out.print(escape(message))

    def success(self, message: str) -> None:
        self.out.print(f"[bold green]ok:[/] {escape(message)}")

    def progress(self, message: str) -> None:
        if self.quiet:
            return
        elapsed = time.monotonic() - self.started
        self.err.print(f"[dim]{elapsed:7.1f}s[/] {escape(message)}")

    def table(self, title: str, columns: list[str], rows: list[list[Any]]) -> None:
        table = Table(title=title, title_justify="left", show_lines=False)
        for column in columns:
            table.add_column(column)
        for row in rows:
            table.add_row(*[cell if hasattr(cell, "__rich__") else str(cell) for cell in row])
        self.out.print(table)

    def json(self, data: Any) -> None:
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def mark(ok: bool | None, yes: str = "ok", no: str = "FAIL") -> str:
    if ok is None:
        return "[yellow]warn[/]"
    return f"[green]{yes}[/]" if ok else f"[bold red]{no}[/]"


class PlaybookView:
    """Live per-host, per-stage progress of a playbook run.

    On a terminal: a table that updates in place. Elsewhere (CI, pipes): one line
    per task and one per host that changed or failed, so logs stay readable.
    """

    def __init__(self, display: Display, hosts: list[str]):
        from rich.live import Live

        self.display = display
        self.rows = {
            h: {"stage": "", "task": "", "ok": 0, "changed": 0, "failed": 0, "state": "waiting"}
            for h in hosts
        }
        self.live = (
            Live(self._table(), console=display.err, refresh_per_second=4, transient=True)
            if display.err.is_terminal
            else None
        )

    def __enter__(self) -> PlaybookView:
        if self.live:
            self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.live:
            self.live.__exit__(*exc)

    def __call__(self, event) -> None:
        if event.kind == "task":
            if not self.live:
                self.display.progress(f"  [{event.stage}] {event.task}")
            return
        row = self.rows.get(event.host)
        if row is None:
            return
        row["stage"], row["task"] = event.stage, event.task
        if event.kind in ("ok", "changed"):
            row["ok"] += 1
            row["changed"] += event.kind == "changed"
            row["state"] = "running"
        elif event.kind in ("failed", "unreachable"):
            row["failed"] += 1
            row["state"] = event.kind
            text = (
                f"  {event.host}: {event.kind.upper()} [{event.stage}] {event.task}: "
                f"{event.message}"
            )
            if self.live:
                self.live.console.print(escape(text))
            else:
                self.display.err.print(f"[bold red]{escape(text)}[/]")
        if event.kind == "changed" and not self.live:
            self.display.progress(f"    {event.host}: changed")
        if self.live:
            self.live.update(self._table())

    def _table(self) -> Table:
        table = Table(show_header=True, header_style="bold", box=None)
        for column in ("host", "stage", "task", "ok", "changed", "failed"):
            table.add_column(column)
        for host, row in self.rows.items():
            table.add_row(
                host,
                row["stage"],
                row["task"][:60],
                str(row["ok"]),
                str(row["changed"]),
                str(row["failed"]),
            )
        return table


def show_up(display: Display, result) -> None:
    playbook = result.playbook
    if playbook is not None:
        rows = []
        for name, stats in playbook.hosts.items():
            status = {
                "ok": "[green]ok[/]",
                "changed": "[yellow]changed[/]",
                "failed": "[bold red]failed[/]",
                "unreachable": "[bold red]unreachable[/]",
            }[stats.status]
            rows.append(
                [
                    name,
                    status,
                    stats.ok,
                    stats.changed,
                    stats.failed,
                    stats.unreachable,
                    f"{stats.seconds:.0f}s",
                ]
            )
        display.table(
            f"mpicluster up: {result.cluster} ({playbook.seconds:.0f} s)",
            ["host", "status", "ok", "changed", "failed", "unreachable", "time"],
            rows,
        )
        for name, stats in playbook.hosts.items():
            for failure in stats.failures[:3]:
                display.error(f"{name}: {failure}")
        display.info(f"log: {playbook.log}")
        display.info(f"rerun by hand: {playbook.command}")
    if result.smoke is not None:
        show_smoke(display, result.smoke)


def show_smoke(display: Display, report) -> None:
    nodes = report.nodes
    if len(nodes) <= 32:
        rows = []
        for source in nodes:
            cells = []
            for target in nodes:
                pair = report.pair(source, target)
                cells.append("[green]ok[/]" if pair and pair.ok else "[bold red]X[/]")
            rows.append([source, *cells])
        display.table("ssh env matrix (row: from, column: to)", ["from \\ to", *nodes], rows)
    else:
        good = sum(p.ok for p in report.pairs)
        display.info(f"ssh env matrix: {good}/{len(report.pairs)} pairs ok")
    for pair in report.pairs:
        if not pair.ok:
            display.error(f"{pair.source} -> {pair.target}: {pair.problem}")
    for run in (report.allreduce, report.horovod):
        if run is not None:
            _show_allreduce(display, run)


def _show_allreduce(display: Display, run) -> None:
    title = "MPI allreduce" if run.kind == "mpi4py" else "Horovod allreduce"
    if run.ok:
        rows = [
            [
                r["elements"],
                _bytes(r["bytes"]),
                f"{r['seconds'] * 1e3:.3f}",
                f"{r['algbw_gbs']:.3f}",
                f"{r['busbw_gbs']:.3f}",
                mark(r["exact"], "exact"),
            ]
            for r in run.sizes
        ]
        display.table(
            f"{title}: {run.ranks} ranks on {len(set(run.hosts))} nodes from {run.head} "
            f"({run.library})",
            ["elements", "size", "time (ms)", "algbw (GB/s)", "busbw (GB/s)", "result"],
            rows,
        )
    else:
        display.error(f"{title} from {run.head}: {run.problem}", run.cause)
        if run.output_tail:
            display.err.print(escape(run.output_tail), style="dim")


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
