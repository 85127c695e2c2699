"""`mpicluster local up/down/status`: a local cluster to try mpicluster on."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mpicluster.cli.common import JsonOpt, guarded, renamed
from mpicluster.cli.help import HELP_OPTIONS, Command, choices, examples
from mpicluster.local.spec import PROVIDERS
from mpicluster.util import exitcodes
from mpicluster.util.errors import MpiclusterError

SUMMARY = "A local cluster to try mpicluster on."

app = typer.Typer(
    help=f"{SUMMARY}\n\nIts nodes are Podman containers (or VMs) driven by Vagrant.",
    no_args_is_help=True,
    context_settings=HELP_OPTIONS,
    rich_markup_mode=None,
)

UP_EXAMPLES = examples(
    "mpicluster local up",
    "mpicluster local up --count 2 --release bookworm,trixie --inventory inventories/local.yaml",
)


CountOpt = Annotated[int, typer.Option("--count", metavar="N", help="Number of nodes.", min=1)]
#: --count's old name (`local up --nodes N`), hidden: --nodes names nodes everywhere else.
OldCountOpt = Annotated[
    int | None,
    typer.Option(
        "--nodes", hidden=True, metavar="N", min=1, callback=renamed("--nodes N", "--count N")
    ),
]


@app.command("up", cls=Command, epilog=UP_EXAMPLES)
def local_up(
    count: CountOpt = 3,
    name: Annotated[
        str, typer.Option(metavar="NAME", help="Cluster name (several may coexist).")
    ] = "local",
    subnet: Annotated[
        str, typer.Option(metavar="CIDR", help="Private subnet; nodeK gets .(10+K).")
    ] = ("192.168.61.0/24"),
    provider: Annotated[
        str,
        typer.Option(
            metavar=choices(PROVIDERS),
            help="Vagrant provider: docker (Podman), libvirt or virtualbox.",
        ),
    ] = "docker",
    inventory: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE", help="Where to write the inventory [default: inventories/NAME.yaml]."
        ),
    ] = None,
    cuda: Annotated[
        bool,
        typer.Option(
            "--cuda",
            help="Share this machine's CUDA toolkit with every node (read-only): `up` then "
            "builds the GPU stack without a GPU.",
        ),
    ] = False,
    cuda_home: Annotated[
        Path, typer.Option(metavar="DIR", help="The CUDA toolkit --cuda shares.")
    ] = Path("/usr/local/cuda"),
    release: Annotated[
        str,
        typer.Option(
            metavar="RELEASE[,RELEASE...]",
            help="Each node's Debian: bookworm (12) or trixie (13), one for every node or "
            "one per node, e.g. bookworm,trixie,trixie (a mixed cluster).",
        ),
    ] = "bookworm",
    nodes: OldCountOpt = None,
) -> None:
    """Start (or update) the local cluster and write its inventory.

    Exit codes: 0 every node is up and reachable, 1 a failure (podman, vagrant, an
    image build), 2 bad input, 4 a node is not reachable over SSH, 130 interrupted.
    """
    from mpicluster import render
    from mpicluster.local import cluster
    from mpicluster.local.spec import LocalSpec
    from mpicluster.render import Display

    display = Display()
    with guarded(display):
        spec = LocalSpec(
            name=name,
            nodes=count if nodes is None else nodes,
            subnet=subnet,
            provider=provider,
            releases=tuple(r.strip() for r in release.split(",")),
            cuda=str(cuda_home.resolve()) if cuda else None,
        )
        target = inventory or Path("inventories") / f"{name}.yaml"
        result = cluster.start(spec, target, display.progress)
        render.show(display, result)
        if not result.healthy:
            raise MpiclusterError(
                "some nodes are not reachable over SSH",
                hint="see the table above",
                exit_code=exitcodes.HOSTS_UNREACHABLE,
            )
        display.success(
            f"{len(result.nodes)} node(s) up in {result.seconds:.0f} s; inventory: {target}"
        )


@app.command(
    "down",
    cls=Command,
    epilog=examples("mpicluster local down", "mpicluster local down --purge-image"),
)
def local_down(
    name: Annotated[str, typer.Option(metavar="NAME", help="Cluster name.")] = "local",
    purge_image: Annotated[
        bool, typer.Option("--purge-image", help="Also remove the node image.")
    ] = False,
) -> None:
    """Destroy the local cluster: nodes, network and Vagrant state.

    Exit codes: 0 removed, 1 a failure (podman, vagrant), 2 bad input (no such cluster).
    """
    from mpicluster.local import cluster
    from mpicluster.render import Display

    display = Display()
    with guarded(display):
        removed = cluster.destroy(name, purge_image, display.progress)
        display.success(f"local cluster {name!r} removed ({', '.join(removed)})")


@app.command(
    "status",
    cls=Command,
    epilog=examples("mpicluster local status", "mpicluster local status --name test --json"),
)
def local_status(
    name: Annotated[str, typer.Option(metavar="NAME", help="Cluster name.")] = "local",
    json_output: JsonOpt = False,
) -> None:
    """Show each node of the local cluster and whether SSH reaches it.

    Exit codes: 0 every node is reachable, 1 a failure, 2 bad input (no such cluster),
    4 a node is not reachable over SSH.
    """
    from mpicluster import render
    from mpicluster.local import cluster
    from mpicluster.render import Display

    display = Display()
    with guarded(display):
        result = cluster.status(name)
        render.show(display, result, as_json=json_output)
        if not result.healthy:
            raise typer.Exit(exitcodes.HOSTS_UNREACHABLE)
