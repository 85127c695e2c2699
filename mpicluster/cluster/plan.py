"""The cluster plan: what a command decides once, from the inventory, before it reaches
any node: the nodes, each node's resolved SSH settings, the stack's, network's and
scheduler's settings, the layout on the nodes, the MPI settings that follow from the
network, people's accounts (their keys read), and the playbook inputs `up` and `down`
share.

The command (cli/) reads the inventory and builds the plan; every feature below takes
the plan and derives none of it again, and none of them sees the inventory itself: the
plan offers its parts, resolved (paths made absolute, defaults filled in)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from mpicluster.cluster.inventory import (
    Health,
    Inventory,
    Network,
    Node,
    Partition,
    ResolvedSsh,
    Scheduler,
    Stack,
    load_inventory,
)
from mpicluster.cluster.layout import Layout
from mpicluster.cluster.mpi_settings import environment_of
from mpicluster.cluster.validators import is_ip


@dataclass(frozen=True)
class Logins:
    """How the control machine logs in, the same for every node."""

    #: The one known_hosts file every host key is checked against.
    known_hosts: Path
    accept_new_host_keys: bool
    connect_timeout: int
    #: Whether the playbooks run their tasks through sudo.
    become: bool


@dataclass(frozen=True)
class SourceFolders:
    """Where sources and built stacks are cached on the control machine."""

    cache: Path
    artifacts: Path
    mirror: str | None
    #: Where a source archive without configure gets one: "builder" or "control".
    autogen: str = "builder"


@dataclass(frozen=True)
class UserAccount:
    """A person's account on every node (the inventory's users:), its keys read."""

    name: str
    #: None: one free on every node, then kept.
    uid: int | None
    #: Extra groups, beside the user's own.
    groups: tuple[str, ...]
    sudo: bool
    #: The public key lines themselves (the files already read): authorized_keys' lines.
    keys: tuple[str, ...]


@dataclass(frozen=True)
class ClusterPlan:
    cluster: str
    nodes: list[Node]
    layout: Layout
    #: Each node's SSH settings, the inventory's defaults resolved per node.
    ssh: Mapping[str, ResolvedSsh]
    logins: Logins
    #: The MPI and NCCL variables of the /etc/environment block.
    mpi_env: Mapping[str, str]
    stack: Stack
    network: Network
    #: None: no scheduler (jobs start with mpirun or `mpicluster run`).
    scheduler: Scheduler | None
    #: The node health check's settings (interval under Slurm, the site's on_change).
    health: Health
    sources: SourceFolders
    #: People's accounts, in the inventory's order.
    users: tuple[UserAccount, ...]
    #: The inventory the parts come from: read here only (only_nodes, requirements).
    _inventory: Inventory = field(repr=False, compare=False)

    @classmethod
    def of(cls, inventory: Inventory) -> ClusterPlan:
        sources = inventory.sources
        return cls(
            cluster=inventory.cluster,
            nodes=list(inventory.nodes),
            layout=Layout.of(inventory),
            ssh={node.name: inventory.node_ssh(node) for node in inventory.nodes},
            logins=Logins(
                known_hosts=inventory.known_hosts_path(),
                accept_new_host_keys=inventory.ssh.accept_new_host_keys,
                connect_timeout=inventory.ssh.connect_timeout,
                become=inventory.ssh.become,
            ),
            mpi_env=environment_of(inventory),
            stack=inventory.stack,
            network=inventory.network,
            scheduler=inventory.scheduler,
            health=inventory.health,
            sources=SourceFolders(
                cache=_resolved(inventory, sources.cache),
                artifacts=_resolved(inventory, sources.artifacts),
                mirror=sources.mirror,
                autogen=sources.autogen,
            ),
            users=_accounts(inventory),
            _inventory=inventory,
        )

    @classmethod
    def load(cls, path: str | Path) -> ClusterPlan:
        """The plan of the inventory file at `path` (InventoryError when it is not valid)."""
        return cls.of(load_inventory(path))

    def only_nodes(self, names: list[str]) -> ClusterPlan:
        """The same cluster with only these nodes (in the inventory's order)."""
        kept = [n for n in self.nodes if n.name in names]
        return ClusterPlan.of(self._inventory.model_copy(update={"nodes": kept}))

    def node_ssh(self, node: Node) -> ResolvedSsh:
        return self.ssh[node.name]

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def node_ip(self, node: Node) -> str:
        """The node's address when the inventory gives one as an IP, else ""."""
        return node.address if node.address and is_ip(node.address) else ""

    @property
    def total_gpus(self) -> int:
        return self._inventory.total_gpus

    @property
    def has_gpus(self) -> bool:
        return self._inventory.has_gpus

    @property
    def gpu_nodes(self) -> list[Node]:
        """The nodes whose GPUs the smoke tests run on (Inventory.gpu_nodes)."""
        return self._inventory.gpu_nodes

    @property
    def controller(self) -> Node | None:
        """The node that runs the scheduler's controller (None: no scheduler)."""
        return self._inventory.controller

    def partitions(self) -> list[Partition]:
        """The scheduler's partitions as they are configured: every node named, one default."""
        return self._inventory.partitions()

    @cached_property
    def python_requirements(self) -> list[str]:
        """The cluster's own packages' requirement lines (the file's, or the list)."""
        return self._inventory.python_requirements()

    def footprint(self) -> list[dict[str, Any]]:
        return self.layout.footprint(self.cluster)

    def playbook_inputs(self) -> dict[str, Any]:
        """The inputs every playbook run takes (up's site.yml and down.yml alike); each
        role declares the ones it reads in meta/argument_specs.yml."""
        return {
            "mpicluster_cluster": self.cluster,
            "mpicluster_layout": self.layout.as_vars(),
            "mpicluster_footprint": self.footprint(),
        }


def _accounts(inventory: Inventory) -> tuple[UserAccount, ...]:
    return tuple(
        UserAccount(
            name=user.name,
            uid=user.uid,
            groups=tuple(user.groups),
            sudo=user.sudo,
            keys=tuple(keys),
        )
        for user, keys in zip(inventory.users, inventory.users_keys(), strict=True)
    )


def _resolved(inventory: Inventory, value: str) -> Path:
    return inventory.resolve_path(value) or Path(value)
