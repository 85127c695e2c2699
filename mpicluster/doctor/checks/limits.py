"""Where a job would limp: the resource limits a non-interactive login gets (open files,
locked memory, processes; what mpirun's daemons and the ranks get) below what MPI needs
on this cluster, each named with the line that sets it; and /dev/shm too small for the
ranks a node runs (Open MPI then falls back to slower paths, printing "Space
Requested: 16777216 B, Space Available: 0 B")."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mpicluster.doctor.checks.common import set_at, size
from mpicluster.doctor.model import CheckReport, Result, passed, warned

if TYPE_CHECKING:
    from mpicluster.doctor.runner import Gathered

NAME = "limits"
TITLE = "Limits of a rank: open files, locked memory, processes, /dev/shm"

MiB = 1024 * 1024
SHM = "/dev/shm"  # noqa: S108 (read, never written)
#: What Open MPI's shared-memory transport asks of /dev/shm per local rank.
SHM_PER_RANK = 16 * MiB
#: A rank's own files, libraries and pipes, besides a socket to every other rank.
FILES_BASE = 256
#: Threads per rank (MPI's progress and PMIx threads, UCX, NCCL, PyTorch's pools).
THREADS_PER_RANK = 64
#: Memory RDMA registers (locks) to send from: below this a big message fails.
MEMLOCK_FLOOR = 1 << 30


def node_slots(g: Gathered) -> dict[str, int]:
    """Ranks each node runs at most (its slots; its cores where slots cannot be known)."""
    from mpicluster.cluster import hostfiles as hostfile  # the control machine's alone
    from mpicluster.util.errors import UsageError

    cores = {n: int((g.facts(n) or {}).get("nproc") or 1) for n in g.probed}
    try:
        return {n: int(s) for n, s in hostfile.slots(g.plan, cores).items()}
    except UsageError:
        return cores


def check(g: Gathered) -> CheckReport:
    report = CheckReport(NAME, TITLE, not_checked=list(g.unprobed))
    slots = node_slots(g)
    ranks = sum(slots.values())
    for node in g.probed:
        facts = g.facts(node) or {}
        report.results.extend(judge(node, facts, slots.get(node, 1), ranks))
    return report


def _shown(item: str, value: int | None) -> str:
    if value is None:
        return "unlimited"
    return size(value) if item == "memlock" else f"{value:,}"


def _set_at(limits: dict, item: str) -> str:
    lines = (limits.get("setters") or {}).get(item) or [None]
    return set_at(lines[-1], "the system's default (no limits.conf or ulimit line for it)")


def judge(node: str, facts: dict, slots: int, ranks: int) -> list[Result]:
    limits = facts.get("limits")
    results: list[Result] = []
    if limits:
        results += _limits(node, facts, limits, slots, ranks)
    results += _shm(node, facts, slots)
    if results:
        return results
    if not limits:
        return []
    shown = ", ".join(
        f"{what} {_shown(item, limits[item][0])}"
        for item, what in (
            ("nofile", "open files"),
            ("memlock", "locked memory"),
            ("nproc", "processes"),
        )
    )
    return [passed(node, f"a login's soft limits: {shown}; /dev/shm holds {slots} rank(s)")]


def _limits(node: str, facts: dict, limits: dict, slots: int, ranks: int) -> list[Result]:
    results = []
    user = (facts.get("env") or {}).get("USER") or "the MPI user"
    files = limits["nofile"][0]
    need = ranks + FILES_BASE
    if files is not None and files < need:
        results.append(
            warned(
                node,
                f"a login's open files limit is {files:,} ({_set_at(limits, 'nofile')}): a "
                f"rank of this cluster's {ranks} may hold a socket to every other rank "
                f"besides its own files: {need:,} or more",
                f"raise nofile for {user} on {node} (a line `{user} soft nofile 65536` in "
                "/etc/security/limits.d/mpicluster.conf, then log in again)",
            )
        )
    locked = limits["memlock"][0]
    if facts.get("rdma") and locked is not None and locked < MEMLOCK_FLOOR:
        results.append(
            warned(
                node,
                f"a login's locked memory limit is {size(locked)} ({_set_at(limits, 'memlock')}) "
                f"on a node with RDMA devices ({', '.join(facts['rdma'])}): UCX and NCCL "
                "register (lock) the memory they send from, and fail or fall back to TCP "
                "past the limit",
                f"set memlock unlimited for {user} on {node} (`{user} - memlock unlimited` in "
                "/etc/security/limits.d/mpicluster.conf, then log in again)",
            )
        )
    processes = limits["nproc"][0]
    need = slots * THREADS_PER_RANK + FILES_BASE
    if processes is not None and processes < need:
        results.append(
            warned(
                node,
                f"a login's processes limit is {processes:,} ({_set_at(limits, 'nproc')}): it "
                f"counts threads, and {slots} rank(s) here with MPI's, UCX's and a "
                f"framework's threads can need {need:,}",
                f"raise nproc for {user} on {node} (/etc/security/limits.d/mpicluster.conf)",
            )
        )
    return results


def _shm(node: str, facts: dict, slots: int) -> list[Result]:
    shm = (facts.get("disk") or {}).get("shm") or {}
    if "free" not in shm or shm.get("measured") != SHM or shm.get("busy"):
        return []
    need = slots * SHM_PER_RANK
    if shm["free"] >= need:
        return []
    files = facts.get("shm_files") or {}
    stale = ""
    if files.get("mpi_files"):
        stale = (
            f"; {files['mpi_files']} file(s) there are named like MPI, PMIx or NCCL "
            f"segments ({size(files['mpi_bytes'])}: {', '.join(files['mpi_names'])}), "
            "left by jobs that did not end cleanly if none runs now"
        )
    return [
        warned(
            node,
            f"{SHM} has {size(shm['free'])} free of {size(shm['total'])}: {slots} rank(s) "
            f"here ask Open MPI's shared-memory transport for {size(need)} "
            f"({size(SHM_PER_RANK)} each); below it ranks fall back to slower paths" + stale,
            f"free /dev/shm on {node} (remove the segments of jobs that no longer run), or "
            "mount it larger (containers: --shm-size)",
        )
    ]
