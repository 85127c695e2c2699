"""Commands on a cluster described by an inventory: validate, fetch, up, down, smoke,
hostfile."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from mpicluster.cli.common import (
    InventoryArg,
    JsonOpt,
    guarded,
    old_name,
    terminate_as_interrupt,
)
from mpicluster.cli.help import choices, examples
from mpicluster.cluster import hostfiles
from mpicluster.util import exitcodes
from mpicluster.util.errors import UsageError

if TYPE_CHECKING:
    from mpicluster.cluster.plan import ClusterPlan
    from mpicluster.render import Display


def validate(inventory: InventoryArg) -> None:
    """Check an inventory file and list every problem in it.

    Exit codes: 0 valid, 2 any problem (each listed with its line).
    """
    from mpicluster.cluster.inventory import load_inventory
    from mpicluster.render import Display

    display = Display()
    with guarded(display):
        inv = load_inventory(inventory)
        users = f", {len(inv.users)} user(s)" if inv.users else ""
        display.success(
            f"{inventory}: cluster {inv.cluster}, {len(inv.nodes)} node(s), "
            f"{inv.total_gpus} GPU(s){users}"
        )


def up(
    inventory: InventoryArg,
    json_output: JsonOpt = False,
    smoke: Annotated[bool, typer.Option(help="Run the smoke test at the end.")] = True,
    full: Annotated[
        bool,
        typer.Option(
            "--full", help="Run every task, even where the probes prove nothing would change."
        ),
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Say what up would do on each node (the stack, the users, the files it "
            "would write) and change nothing anywhere.",
        ),
    ] = False,
) -> None:
    """Provision the cluster, then run its smoke test.

    Installs the MPI stack, SSH trust between the nodes, the environment and the
    hostfiles on every node.

    When every node still matches the record the last `up` left (same inventory and
    mpicluster, nothing changed on the node since), the playbooks are skipped and only
    the smoke test runs. --dry-run says what would happen and changes nothing.

    Exit codes: 0 ok, 1 another failure (a build, a missing tool), 2 bad input, 3 a host
    failed a task, 4 a host was unreachable, 5 the smoke test failed, 130 interrupted.
    """
    from mpicluster import render
    from mpicluster.cluster.plan import ClusterPlan
    from mpicluster.render import Display
    from mpicluster.render.playbook import PlaybookView
    from mpicluster.render.up import up_summary
    from mpicluster.up.provision import provision

    display = Display()
    terminate_as_interrupt()
    with guarded(display):
        plan = ClusterPlan.load(inventory)
        if dry_run:
            _preview(display, plan, json_output)
            return
        with PlaybookView(display, [n.name for n in plan.nodes]) as view:
            result = provision(
                plan, on_event=view, on_progress=display.progress, smoke=smoke, full=full
            )
        render.show(display, result, as_json=json_output)
        if result.exit_code != exitcodes.OK:
            raise typer.Exit(result.exit_code)
        if not json_output:
            display.success(up_summary(result))


def _preview(display: Display, plan: ClusterPlan, json_output: bool) -> None:
    from mpicluster import render
    from mpicluster.render.up import preview_summary
    from mpicluster.up.preview import preview

    found = preview(plan, display.progress)
    render.show(display, found, as_json=json_output)
    if not json_output:
        display.success(preview_summary(found))


def down(
    inventory: InventoryArg,
    nodes: Annotated[
        list[str] | None,
        typer.Option(
            "--nodes",
            metavar="NODE",
            help="Take only this node out (one at a time); the others are provisioned "
            "again without it.",
            show_default=False,
        ),
    ] = None,
    keep_stack: Annotated[
        bool, typer.Option("--keep-stack", help="Keep the installed stacks under the prefix.")
    ] = False,
    keep_key: Annotated[
        bool,
        typer.Option("--keep-key", help="Keep the cluster's key and state on this machine."),
    ] = False,
    purge_homes: Annotated[
        bool,
        typer.Option(
            "--purge-homes",
            help="Remove the users' homes too (default: a home holding more than the "
            "skeleton is kept, its account locked).",
        ),
    ] = False,
    yes: Annotated[
        bool,
        typer.Option("--yes", "-y", help="Do not ask first (down asks only on a terminal)."),
    ] = False,
    json_output: JsonOpt = False,
    node: Annotated[list[str] | None, old_name("--node", "--nodes", "NODE")] = None,
) -> None:
    """Take back what `up` added on every node.

    Files `up` edited come back as they were. On a terminal it first says what it will
    remove and asks (--yes skips the question); without a terminal it never waits for an
    answer. With --nodes, the other nodes are provisioned again without that node first.

    Exit codes as `up`: 0 ok, 1 another failure, 2 bad input, 3 a host failed a task,
    4 a host was unreachable (run `down` again when it is back), 5 with --nodes, the
    smoke test of the other nodes failed, 130 interrupted.
    """
    from mpicluster import render
    from mpicluster.cluster import node_choice
    from mpicluster.cluster.plan import ClusterPlan
    from mpicluster.down.teardown import describe, teardown
    from mpicluster.render import Display
    from mpicluster.render.playbook import PlaybookView
    from mpicluster.render.up import down_summary

    display = Display()
    terminate_as_interrupt()
    with guarded(display):
        chosen = node_choice.split([*(nodes or ()), *(node or ())])
        if len(chosen) > 1:
            raise UsageError("down takes one node at a time: give --nodes NODE once")
        plan = ClusterPlan.load(inventory)
        one = chosen[0] if chosen else None
        said = describe(
            plan, node=one, keep_stack=keep_stack, keep_key=keep_key, purge_homes=purge_homes
        )
        _confirm(display, said, yes)
        with PlaybookView(display, [n.name for n in plan.nodes]) as view:
            result = teardown(
                plan,
                node=one,
                keep_stack=keep_stack,
                keep_key=keep_key,
                purge_homes=purge_homes,
                on_event=view,
                on_progress=display.progress,
            )
        render.show(display, result, as_json=json_output)
        if result.exit_code != exitcodes.OK:
            raise typer.Exit(result.exit_code)
        if not json_output:
            display.success(down_summary(result))


def _confirm(display: Display, said: list[str], yes: bool) -> None:
    """What down will do, said; on a terminal (unless --yes) asked first: a no exits 1."""
    if yes or not display.can_ask():
        for line in said:
            display.progress(line)
        return
    for line in said:
        display.info(line)
    if not display.ask("Go on?"):
        display.error("answered no: nothing was changed on any node")
        raise typer.Exit(exitcodes.FAILED)


def smoke(
    inventory: InventoryArg,
    all_pairs: Annotated[
        bool,
        typer.Option(
            "--all-pairs",
            help="Above 8 nodes: log in from every node to every node, not a ring and a sample.",
        ),
    ] = False,
    json_output: JsonOpt = False,
) -> None:
    """Run the smoke test: ssh between the nodes, then an MPI allreduce.

    Every node logs in to every other (above 8 nodes: a ring and a sample) and reads
    its environment; then one allreduce runs across all nodes.

    Exit codes: 0 passed, 1 an internal error, 2 bad input, 5 the smoke test failed
    (a node it could not reach fails it too).
    """
    from mpicluster import render
    from mpicluster.cluster.plan import ClusterPlan
    from mpicluster.render import Display
    from mpicluster.smoke.steps import run_smoke

    display = Display()
    with guarded(display):
        plan = ClusterPlan.load(inventory)
        report = run_smoke(plan, display.progress, all_pairs=all_pairs)
        render.show(display, report, as_json=json_output)
        if not report.ok:
            raise typer.Exit(exitcodes.CHECK_FAILED)


def fetch(
    inventory: InventoryArg,
    python: Annotated[
        str | None,
        typer.Option(
            metavar="VERSION", help="Nodes' Python (e.g. 3.11) if they cannot be reached."
        ),
    ] = None,
    arch: Annotated[
        str, typer.Option(metavar="ARCH", help="Nodes' architecture, with --python.")
    ] = "x86_64",
    cuda: Annotated[
        str | None,
        typer.Option(metavar="VERSION", help="GPU nodes' CUDA release (e.g. 13.0), with --python."),
    ] = None,
    json_output: JsonOpt = False,
) -> None:
    """Download every source the inventory needs into the cache.

    Each download is verified by its sha256.
    Run it where the internet (or sources.mirror) is reachable; `up` then needs no
    download, so nodes and an air-gapped control machine work offline.

    Exit codes: 0 every source is in the cache, 1 a download failed, 2 bad input, 4 a
    node could not be asked its Python (give --python).
    """
    from mpicluster import render
    from mpicluster.cluster.plan import ClusterPlan
    from mpicluster.render import Display
    from mpicluster.stack.prepare import fetch_for

    display = Display()
    with guarded(display):
        plan = ClusterPlan.load(inventory)
        if plan.stack.install != "source":
            display.success("install: packages needs no sources")
            return
        fetched = fetch_for(plan, display.progress, python=python, arch=arch, cuda=cuda)
        render.show(display, fetched, as_json=json_output)


def hostfile(
    inventory: InventoryArg,
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            metavar=choices(hostfiles.FORMATS),
            help="openmpi (host slots=N), mpich (host:N a line), horovod (horovodrun -H's "
            "host:N,host:N) or deepspeed (host slots=N).",
        ),
    ] = "openmpi",
) -> None:
    """Print a hostfile for the cluster.

    Slots: the inventory's, else GPUs, else cores (asked over SSH).

    Exit codes: 0 printed, 1 an internal error, 2 bad input, 4 a node whose cores were
    needed could not be reached.
    """
    from mpicluster.cluster.plan import ClusterPlan
    from mpicluster.nodes import facts as node_facts
    from mpicluster.render import Display

    display = Display()
    with guarded(display):
        if fmt not in hostfiles.FORMATS:
            raise UsageError(f"--format {fmt!r}: one of {', '.join(hostfiles.FORMATS)}")
        plan = ClusterPlan.load(inventory)
        needs = hostfiles.needs_cores(plan)
        cores = node_facts.cores(node_facts.gather(plan)) if needs else {}
        display.text(hostfiles.render(hostfiles.slots(plan, cores), fmt))


COMMANDS = [validate, up, down, smoke, fetch, hostfile]

EXAMPLES = {
    "validate": examples("mpicluster validate inventories/gpu.yaml"),
    "up": examples(
        "mpicluster up inventories/local.yaml",
        "mpicluster up inventories/gpu.yaml --dry-run",
        "mpicluster up inventories/gpu.yaml --no-smoke --json",
    ),
    "down": examples(
        "mpicluster down inventories/local.yaml",
        "mpicluster down inventories/gpu.yaml --nodes gpu02 --keep-stack",
    ),
    "smoke": examples(
        "mpicluster smoke inventories/local.yaml",
        "mpicluster smoke inventories/gpu.yaml --all-pairs --json",
    ),
    "fetch": examples(
        "mpicluster fetch inventories/gpu.yaml",
        "mpicluster fetch inventories/gpu.yaml --python 3.11 --cuda 13.0",
    ),
    "hostfile": examples(
        "mpicluster hostfile inventories/gpu.yaml",
        "mpicluster hostfile inventories/gpu.yaml --format mpich > hosts",
    ),
}
