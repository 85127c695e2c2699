"""Live per-host, per-stage progress of a playbook run."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from mpicluster.nodes.ansible_run import Event
from mpicluster.render.display import Display


class PlaybookView:
    """On a terminal: a table that updates in place. Elsewhere (CI, pipes): one line
    per task and one per host that changed or failed, so logs stay readable."""

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

    def __call__(self, event: Event) -> None:
        if event.kind == "task":
            if not self.live:
                self.display.progress(f"  [{event.stage}] {event.task}")
            return
        row = self.rows.get(event.host or "")
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
