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
