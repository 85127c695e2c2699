"""What every command shares: its arguments' types, the old names of renamed options,
and core errors turned into exits."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mpicluster.util import exitcodes
from mpicluster.util.errors import MpiclusterError

if TYPE_CHECKING:
    from mpicluster.render import Display

InventoryArg = Annotated[
    Path, typer.Argument(help="Inventory YAML file describing the cluster.", show_default=False)
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout.")]

#: The metavar of --nodes, wherever a command chooses some nodes (comma-separated and
#: repeatable: mpicluster.cluster.node_choice).
NODES_METAVAR = "NODE,..."


def renamed(old: str, new: str) -> Callable[[Any], Any]:
    """The callback of an option's old name, kept hidden: when given, one line on stderr
    says which name replaces it; its value is used as the new name's."""

    def say(value: Any) -> Any:
        if value not in (None, [], ()):
            from mpicluster.render import Display

            Display().note(f"{old} is now {new} (the old name still works)")
        return value

    return say


def old_name(old: str, new: str, metavar: str) -> Any:
    """A hidden option under a renamed option's old name (`renamed` says so when used)."""
    return typer.Option(old, hidden=True, metavar=metavar, callback=renamed(old, new))


def terminate_as_interrupt() -> None:
    """SIGTERM ends a command the way Ctrl-C does (its cleanup runs, exit 130), so that a
    `kill` never leaves a playbook running with the cluster's lock released."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)


@contextmanager
def guarded(display: Display) -> Iterator[None]:
    """Turn core errors into one line on stderr and the matching exit code.

    A bug is one line too (unless MPICLUSTER_DEBUG asks for the traceback), exiting 1
    (exitcodes.FAILED): never a code that reads as "passed" or "warnings only".
    """
    from mpicluster.cluster.inventory import InventoryError

    try:
        yield
    except InventoryError as exc:
        display.problems(exc.lines())
        raise typer.Exit(exc.exit_code) from None
    except MpiclusterError as exc:
        display.error(exc.message, exc.hint)
        raise typer.Exit(exc.exit_code) from None
    except KeyboardInterrupt:
        display.error("interrupted")
        raise typer.Exit(exitcodes.INTERRUPTED) from None
    except typer.Exit:
        raise
    except Exception as exc:
        if os.environ.get("MPICLUSTER_DEBUG"):
            raise
        display.error(
            f"internal error: {type(exc).__name__}: {exc}",
            "rerun with MPICLUSTER_DEBUG=1 for the traceback, and please report it",
        )
        raise typer.Exit(exitcodes.FAILED) from None
