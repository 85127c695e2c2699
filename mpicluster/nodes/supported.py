"""Whether `up` can provision a node, judged from its probe (nodes/facts.py) before
anything changes: by what the node has, not by its name. apt is what every role installs
with (Debian, Ubuntu and their kin; the packages' names are then the ones the node's apt
offers), and the source stack's Python (mpi4py, PyTorch's wheels) needs 3.10 or newer."""

from __future__ import annotations

from mpicluster.cluster.plan import ClusterPlan
from mpicluster.util.errors import MpiclusterError

#: The oldest Python the source stack builds for (Debian 12's is 3.11, Ubuntu 22.04's 3.10).
MIN_PYTHON = (3, 10)
APT_SYSTEMS = "Debian 12 or 13, Ubuntu 22.04 or 24.04, or another system with apt"


def system_name(os_facts: dict) -> str:
    """The node's system as its /etc/os-release names it: `rocky 9.4`."""
    return " ".join(p for p in (os_facts.get("id"), os_facts.get("version_id")) if p) or "unknown"


def python_version(text: str | None) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in (text or "").split("."))
    except ValueError:
        return ()


def why_not(node_facts: dict, source_stack: bool) -> str | None:
    """Why `up` cannot provision this node (one clause), or None."""
    found = node_facts.get("os") or {}
    name = system_name(found)
    if found.get("apt") is False:  # an older probe's facts say nothing: not refused
        kin = f" (like {found['like']})" if found.get("like") else ""
        return f"{name}{kin} has no apt-get, which mpicluster installs with ({APT_SYSTEMS})"
    python = node_facts.get("python")
    version = python_version(python)
    if source_stack and version and version < MIN_PYTHON:
        wanted = ".".join(map(str, MIN_PYTHON))
        return (
            f"{name}'s Python is {python}: the source stack needs Python {wanted} or newer "
            "(stack: {install: packages} uses the system's own MPI and mpi4py)"
        )
    return None


def mixed_slurm(plan: ClusterPlan, facts: dict[str, dict]) -> str | None:
    """Why Slurm cannot run across these nodes: each installs its own distribution's
    Slurm, and two releases' (Debian 12's 22.05, 13's 24.11) are further apart than
    Slurm's daemons work across."""
    if plan.scheduler is None:
        return None
    releases: dict[str, list[str]] = {}
    for node in plan.nodes:
        found = (facts.get(node.name) or {}).get("os") or {}
        releases.setdefault(system_name(found), []).append(node.name)
    if len(releases) < 2:
        return None
    kinds = "; ".join(f"{', '.join(nodes)}: {name}" for name, nodes in releases.items())
    return (
        f"scheduler: slurm installs each node's own distribution's Slurm, and these nodes "
        f"run {len(releases)} releases ({kinds}), whose Slurm daemons do not work together: "
        "give the Slurm cluster nodes of one release"
    )


def check(plan: ClusterPlan, facts: dict[str, dict]) -> None:
    """A MpiclusterError naming the first node `up` cannot provision (and how many more),
    or why the nodes cannot make one Slurm cluster, before any change."""
    source_stack = plan.stack.install == "source"
    reasons = {
        node.name: why
        for node in plan.nodes
        if (why := why_not(facts.get(node.name) or {}, source_stack))
    }
    if not reasons:
        mixed = mixed_slurm(plan, facts)
        if mixed:
            raise MpiclusterError(f"{mixed}; nothing was changed on any node")
        return
    node, why = next(iter(reasons.items()))
    more = f" (and {len(reasons) - 1} more node(s))" if len(reasons) > 1 else ""
    raise MpiclusterError(f"{node}: {why}{more}; nothing was changed on any node")
