"""Bring the local cluster up, take it down, and say how it is."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from mpicluster.cluster.plan import ClusterPlan
from mpicluster.local import host, image
from mpicluster.local.podman import Podman
from mpicluster.local.spec import NODE_CUDA_HOME, LocalSpec, local_dir
from mpicluster.local.vagrant import Vagrant
from mpicluster.nodes import transport
from mpicluster.util.errors import MpiclusterError, UsageError
from mpicluster.util.files import write_atomic
from mpicluster.util.paths import display_path

Progress = Callable[[str], None]

_HOST_KEYS = "/etc/ssh/ssh_host_*_key.pub"
#: NCCL's ONLY_FUNCS for --cuda local clusters: float sum allreduce (nccl-tests'
#: all_reduce_perf, torch.distributed's all_reduce) and point-to-point.
LOCAL_NCCL_ONLY_FUNCS = "AllReduce Sum f32 * *|SendRecv"


@dataclass
class NodeState:
    name: str
    address: str
    state: str  # Vagrant's: running, stopped, not_created...
    reachable: bool = False
    hostname: str | None = None
    detail: str = ""


@dataclass
class LocalCluster:
    spec: LocalSpec
    inventory: Path | None
    nodes: list[NodeState] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def healthy(self) -> bool:
        return bool(self.nodes) and all(n.reachable for n in self.nodes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.spec.name,
            "provider": self.spec.provider,
            "subnet": self.spec.subnet,
            "cuda": self.spec.cuda,
            "inventory": str(self.inventory) if self.inventory else None,
            "healthy": self.healthy,
            "seconds": round(self.seconds, 1),
            "nodes": [asdict(node) for node in self.nodes],
        }


def _same_releases(previous: LocalSpec, spec: LocalSpec) -> None:
    """A running node keeps its release (its container is not made again)."""
    for node, was, now in zip(
        previous.node_names, previous.node_releases, spec.node_releases, strict=False
    ):
        if was != now:
            raise UsageError(
                f"local cluster {spec.name!r}: {node} runs {was}, not {now}",
                hint="run `mpicluster local down` first to change a node's release",
            )


def start(spec: LocalSpec, inventory_path: Path, progress: Progress) -> LocalCluster:
    """Start (or update) the local cluster and write its inventory."""
    started = time.monotonic()
    host.require_root(spec.provider)
    host.ensure_tools(spec.provider, progress)
    env = host.podman_env()
    previous = LocalSpec.saved(spec.name)
    if previous:
        _same_releases(previous, spec)
    if previous and (previous.subnet, previous.provider, previous.cuda) != (
        spec.subnet,
        spec.provider,
        spec.cuda,
    ):
        cuda = f", CUDA from {previous.cuda}" if previous.cuda else ", no CUDA"
        raise UsageError(
            f"local cluster {spec.name!r} already exists ({previous.provider}, "
            f"{previous.subnet}{cuda})",
            hint="run `mpicluster local down` first to change its subnet, provider or CUDA",
        )
    vagrant = Vagrant(spec, env)
    if spec.provider == "docker":
        podman = Podman(env)
        if previous and previous.nodes > spec.nodes:
            progress(f"Removing nodes beyond node{spec.nodes}")
            old = Vagrant(previous, env)
            extra = previous.node_names[spec.nodes :]
            old.run("destroy", "--force", *extra, on_line=_vagrant_lines(progress))
        _remove_strays(podman, vagrant, spec, progress)
        host.ensure_neighbour_table(spec.nodes, progress)
        if podman.ensure_network(spec.network_name, spec.subnet):
            progress(f"Created Podman network {spec.network_name} ({spec.subnet})")
        for release, wanted in dict(zip(spec.node_releases, spec.images, strict=True)).items():
            if not image.image_is_current(wanted, release, env):
                image.build_image(wanted, release, env, progress)
    spec.save()
    progress(f"Starting {spec.nodes} node(s) with vagrant up --provider={spec.provider}")
    vagrant.up(_vagrant_lines(progress))
    progress("Recording node host keys")
    write_atomic(spec.known_hosts, _known_hosts(spec, vagrant, env), mode=0o644)
    write_atomic(inventory_path, render_inventory(spec, vagrant.identity_files()))
    write_atomic(spec.dir / "inventory-path", f"{inventory_path.resolve()}\n")
    progress(f"Wrote {inventory_path}")
    running = dict.fromkeys(spec.node_names, "running")  # vagrant up succeeded
    cluster = LocalCluster(
        spec, inventory_path, _probe(spec, running, inventory_path, settle_seconds=30)
    )
    cluster.seconds = time.monotonic() - started
    return cluster


def destroy(name: str, purge_image: bool, progress: Progress) -> list[str]:
    """Destroy the nodes, the network and the Vagrant state. Returns what was removed."""
    host.require_root("docker")
    spec = LocalSpec.saved(name) or LocalSpec(name=name)
    env = host.podman_env()
    removed: list[str] = []
    if spec.dotfile_path.exists():
        progress(f"Destroying {spec.nodes} node(s) with vagrant destroy")
        Vagrant(spec, env).destroy(_vagrant_lines(progress))
    if spec.provider == "docker":
        podman = Podman(env)
        leftovers = podman.containers(spec.network_name)
        if leftovers:
            podman.remove_containers(leftovers)
        removed.append(f"{len(leftovers)} leftover container(s)" if leftovers else "nodes")
        if podman.remove_network(spec.network_name):
            removed.append(f"network {spec.network_name}")
        for made in dict.fromkeys(spec.images) if purge_image else ():
            if podman.remove_image(made):
                removed.append(f"image {made}")
    directory = local_dir(name)
    if directory.exists():
        shutil.rmtree(directory)
        removed.append(f"state {directory}")
    return removed


def status(name: str) -> LocalCluster:
    spec = LocalSpec.saved(name)
    if spec is None:
        raise UsageError(f"no local cluster named {name!r}", hint="start one: mpicluster local up")
    env = host.podman_env() if spec.provider == "docker" else {}
    vagrant = Vagrant(spec, env)
    inventory_path = _inventory_path_of(spec)
    return LocalCluster(spec, inventory_path, _probe(spec, vagrant.states(), inventory_path))


def render_inventory(spec: LocalSpec, identities: dict[str, Path]) -> str:
    lines = [
        f"# The local cluster {spec.name!r}: {spec.nodes} node(s), {spec.provider} provider.",
        "# Written by `mpicluster local up`; it is rewritten on every local up.",
        f"cluster: {spec.name}",
        "ssh:",
        "  user: vagrant",
        f"  known_hosts: {display_path(spec.known_hosts)}",
        "network:",
        f"  cidr: {spec.subnet}",
        "mpi:",
        "  # The nodes share this machine's cores: a rank that waits for a message gives",
        "  # its core to the others instead of spinning (a small broadcast and allreduce",
        "  # through mpi4py: 0.1 ms, not 16 ms).",
        "  mca: {mpi_yield_when_idle: 1}",
        "nodes:",
    ]
    for name, address in zip(spec.node_names, spec.addresses, strict=True):
        key = identities.get(name)
        if key is None:
            raise MpiclusterError(f"vagrant ssh-config gave no key for {name}")
        lines += [
            f"  - name: {name}",
            f"    address: {address}",
            "    slots: 1  # the nodes share this machine's cores",
            f"    ssh: {{identity: {display_path(key)}}}",
        ]
        if spec.cuda:
            lines.append("    gpus: 1  # stands for a GPU node: CUDA is here, the GPU is not")
    lines += [
        "stack:",
        "  install: source",
        "  # 5.0.7: its upstream tarball, or Debian's copy of the same tree when",
        "  # download.open-mpi.org is out of reach (see mpicluster/data/stack.lock.yaml).",
        "  openmpi: {version: 5.0.7}",
        "  # Horovod's background thread looks for work every 0.1 ms, not every 1 ms:",
        "  # a small operation costs about 0.4 ms here instead of 1.1 ms.",
        "  horovod: {cycle_time_ms: 0.1}",
    ]
    if spec.cuda:
        lines += [
            f"  # CUDA: this machine's {spec.cuda}, mounted in every node.",
            f"  cuda_home: {NODE_CUDA_HOME}",
            "  # The nodes have no GPU: build the GPU stack (CUDA-aware Open MPI, NCCL,",
            "  # nccl-tests) for the architectures below; no nvidia-smi check, no GPU smoke.",
            "  gpus_present: false",
            "  nccl:",
            "    cuda_archs: ['9.0']",
            "    # NCCL's ONLY_FUNCS: the device code of these collectives only (about 4",
            "    # minutes here instead of 28). Remove it to build every collective.",
            f"    only_funcs: {LOCAL_NCCL_ONLY_FUNCS!r}",
        ]
    return "\n".join(lines) + "\n"


def _inventory_path_of(spec: LocalSpec) -> Path | None:
    marker = spec.dir / "inventory-path"
    text = marker.read_text().strip() if marker.exists() else ""
    return Path(text) if text else None


def _remove_strays(podman: Podman, vagrant: Vagrant, spec: LocalSpec, progress: Progress) -> None:
    """Containers of this cluster that Vagrant no longer knows (a wiped state folder, a
    crashed run) would hold the nodes' addresses: remove them."""
    known = set(vagrant.container_ids().values())
    strays = [
        cid
        for cid in podman.containers(spec.network_name)
        if not any(cid.startswith(k) or k.startswith(cid) for k in known)
    ]
    if strays:
        progress(f"Removing {len(strays)} container(s) left by an earlier run")
        podman.remove_containers(strays)


def _known_hosts(spec: LocalSpec, vagrant: Vagrant, env: dict[str, str]) -> str:
    """known_hosts lines for every node, read through Podman (or Vagrant), not over SSH."""
    lines = []
    ids = vagrant.container_ids() if spec.provider == "docker" else {}
    podman = Podman(env)
    for name, address in zip(spec.node_names, spec.addresses, strict=True):
        if spec.provider == "docker":
            keys = podman.read_file(ids[name], _HOST_KEYS)
        else:
            keys = vagrant.run("ssh", name, "-c", f"cat {_HOST_KEYS}").output
        for key_line in keys.splitlines():
            parts = key_line.split()
            if len(parts) >= 2 and parts[0].startswith(("ssh-", "ecdsa-")):
                lines.append(f"{name},{address} {parts[0]} {parts[1]}")
    return "\n".join(lines) + "\n"


def _probe(
    spec: LocalSpec,
    states: dict[str, str],
    inventory_path: Path | None,
    settle_seconds: float = 0.0,
) -> list[NodeState]:
    """Ask every node for its hostname and addresses over SSH, as the inventory says.

    A node that has just booted may answer before its network is fully set up: with
    `settle_seconds`, nodes that do not yet pass are asked again until that time is up.
    """
    nodes = [
        NodeState(name, address, states.get(name, "unknown"))
        for name, address in zip(spec.node_names, spec.addresses, strict=True)
    ]
    if inventory_path is None or not inventory_path.exists():
        for node in nodes:
            node.detail = "no inventory written yet"
        return nodes
    plan = ClusterPlan.load(inventory_path)
    deadline = time.monotonic() + settle_seconds
    pending = {node.name: node for node in nodes}
    while True:
        targets = [n for n in plan.nodes if n.name in pending]
        results = transport.run_everywhere(
            plan, "hostname; ip -4 -o addr show", nodes=targets, timeout=15
        )
        for name, node in list(pending.items()):
            _judge(node, results.get(name))
            if node.reachable:
                del pending[name]
        if not pending or time.monotonic() >= deadline:
            return nodes
        time.sleep(1.0)


def _judge(node: NodeState, result: transport.RemoteResult | None) -> None:
    if result is None:
        node.detail = "not in the inventory"
    elif not result.ok:
        node.detail = result.error or result.stderr.strip() or f"exit {result.exit_code}"
    else:
        lines = result.stdout.splitlines()
        node.hostname = lines[0].strip() if lines else ""
        seen = re.findall(r"inet (\d+\.\d+\.\d+\.\d+)/", result.stdout)
        node.reachable = node.hostname == node.name and node.address in seen
        node.detail = (
            ""
            if node.reachable
            else f"answers as {node.hostname!r} with {', '.join(seen) or 'no IPv4 address'}"
        )


def _vagrant_lines(progress: Progress) -> Callable[[str], None]:
    """Pass on Vagrant's headline lines (==> node1: ...), not its chatter."""

    def on_line(line: str) -> None:
        text = line.strip()
        if text.startswith("==>"):
            progress("  " + text[3:].strip())

    return on_line
