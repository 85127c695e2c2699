"""Hostfiles for Open MPI, MPICH/Hydra, Horovod and DeepSpeed, from the plan, each
rendered from its template in templates/ (`up` writes these, `mpicluster hostfile` prints
them).

Slots per node: the inventory's `slots`, else its GPU count, else its cores.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from mpicluster.cluster import layout
from mpicluster.util.errors import UsageError

if TYPE_CHECKING:
    from mpicluster.cluster.plan import ClusterPlan

FORMATS = ("openmpi", "mpich", "horovod", "deepspeed")
#: Where `up` writes each format on the nodes.
PATHS = {
    layout.HOSTFILE: "openmpi",
    layout.HOSTFILE_MPICH: "mpich",
    layout.HOSTFILE_HOROVOD: "horovod",
    layout.HOSTFILE_DEEPSPEED: "deepspeed",
}


def slots(
    plan: ClusterPlan, cores: Mapping[str, int], names: Collection[str] | None = None
) -> dict[str, int]:
    """Slots per node name (of `names` only, where given: a cordoned node's are not
    needed); `cores` is needed only for nodes with neither slots nor GPUs."""
    result = {}
    for node in plan.nodes:
        if names is not None and node.name not in names:
            continue
        if node.slots:
            result[node.name] = node.slots
        elif node.gpus:
            result[node.name] = node.gpus
        elif node.name in cores:
            result[node.name] = max(1, cores[node.name])
        else:
            raise UsageError(f"{node.name}: no core count to derive slots from")
    return result


def needs_cores(plan: ClusterPlan) -> list[str]:
    return [n.name for n in plan.nodes if not n.slots and not n.gpus]


def render(node_slots: Mapping[str, int], fmt: str) -> str:
    """One format's hostfile, from its template (templates/hostfile.FORMAT.j2)."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown hostfile format {fmt!r} (one of: {', '.join(FORMATS)})")
    from mpicluster.util import templates  # Jinja2: only when a hostfile is written

    return templates.render(f"hostfile.{fmt}.j2", slots=dict(node_slots))


def parse(text: str) -> dict[str, int]:
    """Slots per node from an Open MPI (or DeepSpeed) hostfile: `host slots=N` lines."""
    found = {}
    for line in text.splitlines():
        match = re.match(r"^\s*(\S+)\s+slots=(\d+)", line)
        if match:
            found[match.group(1)] = int(match.group(2))
    return found


def rendered(node_slots: Mapping[str, int]) -> dict[str, str]:
    """Every hostfile `up` writes, by its path on the nodes."""
    return {path: render(node_slots, fmt) for path, fmt in PATHS.items()}
