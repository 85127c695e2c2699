"""The plan of an inventory text, as a command would build it (features take only plans)."""

from __future__ import annotations

from pathlib import Path

from mpicluster.cluster.inventory import parse_inventory
from mpicluster.cluster.plan import ClusterPlan


def plan_of(text: str, *, path: Path | None = None) -> ClusterPlan:
    return ClusterPlan.of(parse_inventory(text, path=path))
