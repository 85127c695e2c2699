"""One object owns the terminal: messages, progress lines, tables and JSON."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

#: How each status looks, wherever it is shown (up's hosts, doctor's checks, local nodes).
STYLES = {
    "ok": "green",
    "pass": "green",
    "reachable": "green",
    "changed": "yellow",
    "warn": "yellow",
    "failed": "bold red",
    "fail": "bold red",
    "unreachable": "bold red",
    "skip": "dim",
}


def styled(status: str, label: str | None = None) -> str:
    """`label` (default: the status itself) in the colour of `status`, as rich markup."""
    text = escape(label if label is not None else status)
    style = STYLES.get(status)
    return f"[{style}]{text}[/]" if style else text


def mark(ok: bool, yes: str = "ok", no: str = "FAIL") -> str:
    return styled("ok", yes) if ok else styled("fail", no)


class Display:
    def __init__(self, *, quiet: bool = False, messages_on_stderr: bool = False):
        """`messages_on_stderr`: every message on stderr (for commands whose stdout is
        another program's, as `run`'s), JSON still on stdout."""
        self.out = Console(stderr=messages_on_stderr, highlight=False, soft_wrap=True, emoji=False)
        self.err = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)
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

    def warning(self, message: str) -> None:
        self.out.print(f"[yellow]warn:[/] {escape(message)}")

    def failure(self, message: str) -> None:
        self.out.print(f"[bold red]FAIL:[/] {escape(message)}")

    def detail(self, text: str) -> None:
        """Raw program output shown after an error, dimmed, on stderr."""
        self.err.print(escape(text), style="dim")

    def tagged(self, tag: str, line: str) -> None:
        """A line of a node's output, `[tag] line`, on stderr as it came."""
        sys.stderr.write(f"[{tag}] {line}\n")
        sys.stderr.flush()

    def text(self, text: str) -> None:
        """Plain text on stdout, exactly as given (a hostfile)."""
        sys.stdout.write(text)
        sys.stdout.flush()

    def progress(self, message: str) -> None:
        if self.quiet:
            return
        elapsed = time.monotonic() - self.started
        self.err.print(f"[dim]{elapsed:7.1f}s[/] {escape(message)}")

    def can_ask(self) -> bool:
        """Whether a person can answer a question: input and output are a terminal."""
        return sys.stdin.isatty() and sys.stdout.isatty()

    def ask(self, question: str) -> bool:
        """A person's yes to `question` [y/N] (on stderr); no answer (Ctrl-D) is a no."""
        import typer

        try:
            return typer.confirm(question, default=False, err=True)
        except typer.Abort:
            self.err.print()
            return False

    def table(self, title: str, columns: list[str], rows: list[list[Any]]) -> None:
        """A table; cells are rich markup (escape plain text with `escape`)."""
        table = Table(title=title, title_justify="left", show_lines=False)
        for column in columns:
            table.add_column(column)
        for row in rows:
            table.add_row(*[str(cell) for cell in row])
        self.out.print(table)

    def print(self, renderable: Any) -> None:
        self.out.print(renderable)

    def json(self, data: Any) -> None:
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def show_command_log() -> None:
    """-v: the core's command log (util/commandlog.py) on stderr, a line per command."""
    import logging

    from mpicluster.util import commandlog

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("  run %(message)s"))
    commandlog.LOG.addHandler(handler)
    commandlog.LOG.setLevel(logging.INFO)
    commandlog.LOG.propagate = False
