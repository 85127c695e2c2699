"""The `mpicluster doctor` command (wired into mpicluster.cli)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mpicluster.errors import MpiclusterError
from mpicluster.inventory import load_inventory


def doctor(
    inventory: Annotated[Path, typer.Argument(help="Inventory YAML file describing the cluster.")],
) -> None:
    """Check a cluster for what breaks MPI and say how to fix each problem."""
    from mpicluster.cli import guarded
    from mpicluster.render import Display

    display = Display()
    with guarded(display):
        load_inventory(inventory)
        raise MpiclusterError("`mpicluster doctor` is not implemented yet")
