"""The plan of an inventory text, as a command would build it (features take only plans)."""

from __future__ import annotations

from pathlib import Path

from mpicluster.cluster.inventory import parse_inventory
from mpicluster.cluster.plan import ClusterPlan


def plan_of(text: str, *, path: Path | None = None) -> ClusterPlan:
    return ClusterPlan.of(parse_inventory(text, path=path))


#: A Debian 12 CPU node's facts as up's probe reports them (no CUDA, no stack yet).
FACTS = {
    "nproc": 2,
    "os": {"id": "debian", "version_id": "12"},
    "arch": "x86_64",
    "python": "3.11",
    "gcc": "4:12.2.0-3",
    "cuda": None,
    "gpus": [],
    "current": None,
}
