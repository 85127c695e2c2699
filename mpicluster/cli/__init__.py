"""The mpicluster command line: each command parses, calls the core once, renders, exits.

Nothing outside this package imports it. Command groups live in their own modules
(cluster.py: validate, fetch, up, smoke, hostfile; doctor.py; local.py). Their
modules import only typer and what their options' help needs: a command imports the
core and the render layer it uses when it runs, so `mpicluster --help` (and every
command's start) loads no more than it needs (tests/unit/test_cli_start.py).
"""

from __future__ import annotations

from typing import Annotated

import typer

from mpicluster import __version__
from mpicluster.cli import bench, cluster, doctor, jobs, local, nodes, run
from mpicluster.cli.help import HELP_OPTIONS, Command, examples
from mpicluster.util import exitcodes

app = typer.Typer(
    name="mpicluster",
    help="Turn SSH-reachable Linux machines into a verified MPI/GPU cluster.\n\n"
    "Start with `mpicluster local up` for a cluster on this machine, then "
    "`mpicluster up inventories/local.yaml`. Every command has -h/--help.",
    epilog=examples(
        "mpicluster validate inventories/gpu.yaml",
        "mpicluster up inventories/gpu.yaml",
        "mpicluster run inventories/gpu.yaml -- hostname",
    ),
    no_args_is_help=True,
    context_settings=HELP_OPTIONS,
    pretty_exceptions_enable=False,
    pretty_exceptions_show_locals=False,
    add_completion=True,
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
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            "-v",
            help="Show every command mpicluster runs (over SSH, here, ansible-playbook) on "
            "stderr, secrets hidden. Before the command: mpicluster -v up ...",
        ),
    ] = False,
) -> None:
    """Turn SSH-reachable Linux machines into a verified MPI/GPU cluster."""
    if verbose:
        from mpicluster.render.display import show_command_log

        show_command_log()


for module in (cluster, doctor, bench, nodes, run, jobs):
    for command in module.COMMANDS:
        app.command(
            cls=Command,
            epilog=module.EXAMPLES[command.__name__],
            context_settings=run.CONTEXT if command is run.run else None,
        )(command)
app.add_typer(local.app, name="local", short_help=local.SUMMARY)


def main() -> None:
    app()
