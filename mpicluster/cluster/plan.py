"""The cluster plan: what a command decides once, from the inventory, before it reaches
any node: the layout on the nodes, each node's resolved SSH settings, the MPI settings
that follow from the network, and the playbook inputs `up` and `down` share. The
command builds it; what runs below takes it and derives none of it again."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from mpicluster.cluster.inventory import Inventory, Node, ResolvedSsh
from mpicluster.cluster.layout import Layout
from mpicluster.cluster.mpi_settings import environment_of
from mpicluster.cluster.validators import is_ip


@dataclass(frozen=True)
class ClusterPlan:
    inventory: Inventory
    layout: Layout
    #: Each node's SSH settings, the inventory's defaults resolved per node.
    ssh: Mapping[str, ResolvedSsh]
    #: The MPI and NCCL variables of the /etc/environment block.
    mpi_env: Mapping[str, str]

    @classmethod
    def of(cls, inventory: Inventory) -> ClusterPlan:
        return cls(
            inventory,
            Layout.of(inventory),
            {node.name: inventory.node_ssh(node) for node in inventory.nodes},
            environment_of(inventory),
        )

    @property
    def cluster(self) -> str:
        return self.inventory.cluster

    @property
    def nodes(self) -> list[Node]:
        return self.inventory.nodes

    def node_ssh(self, node: Node) -> ResolvedSsh:
        return self.ssh[node.name]

    def node_ip(self, node: Node) -> str:
        """The node's address when the inventory gives one as an IP, else ""."""
        return node.address if node.address and is_ip(node.address) else ""

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
