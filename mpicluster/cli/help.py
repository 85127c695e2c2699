"""How every command's help reads: `-h` as well as `--help`, arguments by upper-case
name (INVENTORY, PROGRAM...) and options by their metavar, never a type marker such as
`<path>` or `{inventory}`, a command's summary whole in the list of commands, and its
examples after its options."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import typer
from typer.core import TyperCommand

#: Every Typer app's context settings: `-h` is `--help` (no command uses -h otherwise).
HELP_OPTIONS: dict[str, Any] = {"help_option_names": ["-h", "--help"]}


def choices(values: Iterable[str]) -> str:
    """An option's metavar listing the few values it takes: [a|b|c]."""
    return "[" + "|".join(values) + "]"


def examples(*lines: str) -> str:
    """A command's epilog: its example command lines, printed as written (`\\b`: no
    rewrapping)."""
    return "\b\nExamples:\n" + "\n".join(f"  {line}" for line in lines)


def _argument_name(param: Any) -> str:
    name = (param.name or "").upper()
    return f"{name}..." if param.nargs != 1 else name


class Command(TyperCommand):
    """A command whose usage line and tables show names, not types."""

    def collect_usage_pieces(self, ctx: typer.Context) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument":
                name = _argument_name(param)
                pieces.append(name if param.required else f"[{name}]")
        return pieces

    def get_short_help_str(self, limit: int = 45) -> str:
        """The first paragraph of the help, whole, whatever the terminal's width (the
        command list wraps it rather than cut it with "...")."""
        text = self.short_help or (self.help or "").split("\n\n")[0]
        return " ".join(text.split())

    def format_options(self, ctx: typer.Context, formatter: Any) -> None:
        arguments, options = [], []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                arguments.append((_argument_name(param), record[1]))
            else:
                options.append(record)
        for title, rows in (("Arguments", arguments), ("Options", options)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)
