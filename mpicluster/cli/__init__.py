"""The mpicluster command line: each command parses, calls the core once, renders, exits.

Nothing outside this package imports it. Command groups live in their own modules
(cluster.py: validate, fetch, up, smoke, hostfile; doctor.py; local.py).
"""

from __future__ import annotations

from typing import Annotated

import typer

from mpicluster import __version__
from mpicluster.cli import bench, cluster, doctor, jobs, local, nodes, run
from mpicluster.util import exitcodes

app = typer.Typer(
    name="mpicluster",
    help="Turn SSH-reachable Linux machines into a verified MPI/GPU cluster.\n\n"
    "Start with `mpicluster local up` for a cluster on this machine, then "
    "`mpicluster up inventories/local.yaml`.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    pretty_exceptions_show_locals=False,
    add_completion=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"mpicluster {__version__}")
        raise typer.Exit(exitcodes.OK)


@app.callback()
def root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Show the version."),
    ] = False,
) -> None:
    """Turn SSH-reachable Linux machines into a verified MPI/GPU cluster."""


for command in cluster.COMMANDS:
    app.command()(command)
app.command("doctor")(doctor.doctor)
app.command("bench")(bench.bench)
for command in nodes.COMMANDS:
    app.command()(command)
app.command("run", context_settings=run.CONTEXT)(run.run)
for command in jobs.COMMANDS:
    app.command()(command)
app.add_typer(local.app, name="local")


def main() -> None:
    app()
