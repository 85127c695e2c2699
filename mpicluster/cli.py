"""The mpicluster command line: parse, call the core once, render, exit."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from mpicluster import __version__, exitcodes
from mpicluster.errors import MpiclusterError
from mpicluster.inventory import InventoryError, load_inventory
from mpicluster.render import Display, mark

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
local_app = typer.Typer(
    help="A local cluster to try mpicluster on: Podman containers (or VMs) driven by Vagrant.",
    no_args_is_help=True,
)
app.add_typer(local_app, name="local")

InventoryArg = Annotated[
    Path, typer.Argument(help="Inventory YAML file describing the cluster.", show_default=False)
]


@contextmanager
def guarded(display: Display) -> Iterator[None]:
    """Turn core errors into one line on stderr and the matching exit code."""
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
    except Exception as exc:  # a bug: still one line, unless asked for the traceback
        if os.environ.get("MPICLUSTER_DEBUG"):
            raise
        display.error(
            f"internal error: {type(exc).__name__}: {exc}",
            "rerun with MPICLUSTER_DEBUG=1 for the traceback, and please report it",
        )
        raise typer.Exit(exitcodes.FAILED) from None


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


@app.command()
def validate(inventory: InventoryArg) -> None:
    """Check an inventory file and list every problem in it (exit 2 if any)."""
    display = Display()
    with guarded(display):
        inv = load_inventory(inventory)
        display.success(
            f"{inventory}: cluster {inv.cluster}, {len(inv.nodes)} node(s), {inv.total_gpus} GPU(s)"
        )


JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout.")]


@app.command()
def up(
    inventory: InventoryArg,
    json_output: JsonOpt = False,
    smoke: Annotated[bool, typer.Option(help="Run the smoke test at the end.")] = True,
) -> None:
    """Provision the cluster: MPI stack, SSH trust, environment, hostfiles, then the smoke test.

    Exit codes: 0 ok, 2 bad input, 3 a host failed, 4 a host was unreachable,
    5 the smoke test failed.
    """
    from mpicluster import provision
    from mpicluster.render import PlaybookView, show_up

    display = Display()
    with guarded(display):
        inv = load_inventory(inventory)
        with PlaybookView(display, [n.name for n in inv.nodes]) as view:
            result = provision.up(inv, on_event=view, on_progress=display.progress, smoke=smoke)
        if json_output:
            display.json(_up_json(result))
        else:
            show_up(display, result)
        code = result.exit_code
        if code != exitcodes.OK:
            raise typer.Exit(code)
        changed = sum(s.changed for s in result.playbook.hosts.values())
        if not json_output:
            display.success(
                f"cluster {inv.cluster}: {len(inv.nodes)} node(s) provisioned "
                f"({changed} change(s)) and verified in {result.seconds:.0f} s"
            )


@app.command()
def smoke(inventory: InventoryArg, json_output: JsonOpt = False) -> None:
    """Run the smoke test: node-to-node ssh env matrix and an MPI allreduce across all nodes."""
    from mpicluster.render import show_smoke
    from mpicluster.smoke import run_smoke

    display = Display()
    with guarded(display):
        inv = load_inventory(inventory)
        report = run_smoke(inv, display.progress)
        if json_output:
            display.json(report.to_dict())
        else:
            show_smoke(display, report)
        if not report.ok:
            raise typer.Exit(exitcodes.SMOKE_FAILED)


@app.command()
def fetch(
    inventory: InventoryArg,
    python: Annotated[
        str | None, typer.Option(help="Nodes' Python (e.g. 3.11) if they cannot be reached.")
    ] = None,
    arch: Annotated[str, typer.Option(help="Nodes' architecture, with --python.")] = "x86_64",
) -> None:
    """Download every source the inventory needs into the cache (sha256 verified).

    Run it where the internet (or sources.mirror) is reachable; `up` then needs no
    download, so nodes and an air-gapped control machine work offline.
    """
    from mpicluster.provision import probe_nodes
    from mpicluster.stack.prepare import fetch as fetch_sources

    display = Display()
    with guarded(display):
        inv = load_inventory(inventory)
        if inv.stack.install != "source":
            display.success("install: packages needs no sources")
            return
        if python:
            fake = {
                "os": {"id": "", "version_id": ""},
                "arch": arch,
                "python": python,
                "gpus": [],
                "cuda": None,
            }
            facts = {n.name: fake for n in inv.nodes}
        else:
            facts = probe_nodes(inv)
        files, houses = fetch_sources(inv, facts, display.progress)
        rows = [
            [
                name,
                f.source.version,
                str(f.path),
                "downloaded" if f.fetched else "cached",
                f.source.sha256[:16],
            ]
            for name, f in files.items()
        ]
        rows += [
            [f"wheels {target}", f"{len(h.files)} files", str(h.path), "ready", h.digest]
            for target, h in houses.items()
        ]
        display.table("source cache", ["component", "version", "file", "status", "sha256"], rows)


def _up_json(result) -> dict:
    data: dict = {
        "cluster": result.cluster,
        "exit_code": result.exit_code,
        "seconds": round(result.seconds, 1),
        "hosts": {},
        "smoke": None,
    }
    if result.playbook is not None:
        data["log"] = str(result.playbook.log)
        data["command"] = result.playbook.command
        for name, s in result.playbook.hosts.items():
            data["hosts"][name] = {
                "status": s.status,
                "ok": s.ok,
                "changed": s.changed,
                "failed": s.failed,
                "unreachable": s.unreachable,
                "seconds": round(s.seconds, 1),
                "failures": s.failures,
            }
    if result.smoke is not None:
        data["smoke"] = result.smoke.to_dict()
    return data


@app.command()
def hostfile(
    inventory: InventoryArg,
    fmt: Annotated[
        str, typer.Option("--format", help="openmpi (host slots=N), mpich (host:N) or horovod.")
    ] = "openmpi",
) -> None:
    """Print a hostfile. Slots: the inventory's, else GPUs, else cores (asked over SSH)."""
    from mpicluster import hostfile as hostfiles
    from mpicluster.errors import UsageError
    from mpicluster.provision import cores_of, probe_nodes

    display = Display()
    with guarded(display):
        if fmt not in hostfiles.FORMATS:
            raise UsageError(f"--format {fmt!r}: one of {', '.join(hostfiles.FORMATS)}")
        inv = load_inventory(inventory)
        cores = cores_of(probe_nodes(inv)) if hostfiles.needs_cores(inv) else {}
        typer.echo(hostfiles.render(hostfiles.slots(inv, cores), fmt), nl=False)


def _register_doctor() -> None:
    from mpicluster.doctor.command import doctor

    app.command("doctor")(doctor)


_register_doctor()


@local_app.command("up")
def local_up(
    nodes: Annotated[int, typer.Option(help="Number of nodes.", min=1)] = 3,
    name: Annotated[str, typer.Option(help="Cluster name (several may coexist).")] = "local",
    subnet: Annotated[str, typer.Option(help="Private subnet; nodeK gets .(10+K).")] = (
        "192.168.61.0/24"
    ),
    provider: Annotated[
        str, typer.Option(help="Vagrant provider: docker (Podman), libvirt or virtualbox.")
    ] = "docker",
    inventory: Annotated[
        Path | None,
        typer.Option(help="Where to write the inventory [default: inventories/NAME.yaml]."),
    ] = None,
) -> None:
    """Start (or update) the local cluster and write its inventory."""
    from mpicluster.local import cluster
    from mpicluster.local.spec import LocalSpec

    display = Display()
    with guarded(display):
        spec = LocalSpec(name=name, nodes=nodes, subnet=subnet, provider=provider)
        target = inventory or Path("inventories") / f"{name}.yaml"
        result = cluster.up(spec, target, display.progress)
        _show_local(display, result)
        if not result.healthy:
            raise MpiclusterError(
                "some nodes are not reachable over SSH", hint="see the table above"
            )
        display.success(
            f"{len(result.nodes)} node(s) up in {result.seconds:.0f} s; inventory: {target}"
        )


@local_app.command("down")
def local_down(
    name: Annotated[str, typer.Option(help="Cluster name.")] = "local",
    purge_image: Annotated[
        bool, typer.Option("--purge-image", help="Also remove the node image.")
    ] = False,
) -> None:
    """Destroy the local cluster: nodes, network and Vagrant state."""
    from mpicluster.local import cluster

    display = Display()
    with guarded(display):
        removed = cluster.down(name, purge_image, display.progress)
        display.success(f"local cluster {name!r} removed ({', '.join(removed)})")


@local_app.command("status")
def local_status(
    name: Annotated[str, typer.Option(help="Cluster name.")] = "local",
) -> None:
    """Show each node of the local cluster and whether SSH reaches it."""
    from mpicluster.local import cluster

    display = Display()
    with guarded(display):
        result = cluster.status(name)
        _show_local(display, result)
        if not result.healthy:
            raise typer.Exit(exitcodes.HOSTS_UNREACHABLE)


def _show_local(display: Display, result) -> None:
    rows = [
        [
            n.name,
            n.address,
            n.state,
            mark(n.reachable, "reachable", "unreachable"),
            n.hostname or "",
            n.detail,
        ]
        for n in result.nodes
    ]
    display.table(
        f"local cluster {result.spec.name} ({result.spec.provider}, {result.spec.subnet})",
        ["node", "address", "state", "ssh", "hostname", "detail"],
        rows,
    )


def main() -> None:
    app()


if __name__ == "__main__":
    main()
