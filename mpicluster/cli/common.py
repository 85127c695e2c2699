"""What every command shares: its arguments' types, and core errors turned into exits."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from mpicluster.cluster.inventory import InventoryError
from mpicluster.render import Display
from mpicluster.util import exitcodes
from mpicluster.util.errors import MpiclusterError

InventoryArg = Annotated[
    Path, typer.Argument(help="Inventory YAML file describing the cluster.", show_default=False)
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout.")]


def terminate_as_interrupt() -> None:
    """SIGTERM ends a command the way Ctrl-C does (its cleanup runs, exit 130), so that a
    `kill` never leaves a playbook running with the cluster's lock released."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)


@contextmanager
def guarded(display: Display, internal_exit: int = exitcodes.FAILED) -> Iterator[None]:
    """Turn core errors into one line on stderr and the matching exit code.

    A bug is one line too (unless MPICLUSTER_DEBUG asks for the traceback), exiting
    `internal_exit`: doctor's 2, so a crash never reads as "warnings only".
    """
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
        raise typer.Exit(internal_exit) from None
