"""One object owns the terminal: messages, progress lines, tables and JSON."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from mpicluster.render import fit

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

    def note(self, message: str) -> None:
        """One line on stderr, whatever the command's stdout carries: `note: ...`."""
        self.err.print(f"note: {escape(message)}")

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

    def final(self, line: str) -> None:
        """A command's last line on stderr, plain (scripts read it): `job exited with 3`."""
        sys.stderr.write(f"{line}\n")
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

    def table(
        self,
        title: str,
        columns: list[str],
        rows: list[list[Any]],
        *,
        whole: tuple[str, ...] = (),
        give_way: tuple[str, ...] = (),
    ) -> None:
        """A table; cells are rich markup (escape plain text with `escape`).

        `whole`: the columns of ids, never cut; the table then fits the terminal by the
        columns of `give_way` giving way, the first first, their cells cut with "…"
        (render/fit.py); the others keep their width. Where even that cannot fit, the
        lines run past the terminal's width rather than cut an id."""
        if not whole:
            table = Table(title=title, title_justify="left", show_lines=False)
            for column in columns:
                table.add_column(column)
            for row in rows:
                table.add_row(*[str(cell) for cell in row])
            self.out.print(table)
            return
        self._fitted(
            title, columns, [[Text.from_markup(str(c)) for c in r] for r in rows], whole, give_way
        )

    def _fitted(
        self,
        title: str,
        columns: list[str],
        cells: list[list[Text]],
        whole: tuple[str, ...],
        give_way: tuple[str, ...],
    ) -> None:
        natural = [
            max([len(name), *(row[i].cell_len for row in cells)]) for i, name in enumerate(columns)
        ]
        narrowest = [
            min(n, max(fit.NARROWEST, len(c))) for n, c in zip(natural, columns, strict=True)
        ]
        order = [columns.index(c) for c in give_way if c not in whole]
        # a box's edges and one padding either side of each cell
        borders = 1 + 3 * len(columns)
        widths = fit.column_widths(natural, narrowest, order, self.out.width - borders)
        table = Table(title=title, title_justify="left", show_lines=False)
        for name, width in zip(columns, widths, strict=True):
            table.add_column(name, width=width, no_wrap=True, overflow="ellipsis")
        for row in cells:
            for text, width in zip(row, widths, strict=True):
                text.truncate(width, overflow="ellipsis")
            table.add_row(*row)
        terminal = self.out.width
        self.out.width = max(terminal, sum(widths) + borders)  # rich would cut the ids
        try:
            self.out.print(table)
        finally:
            self.out.width = terminal

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
