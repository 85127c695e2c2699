"""Free disk where the stack lives and where MPI writes as the MPI user (/tmp, $TMPDIR,
/dev/shm), each writable by that user. A judge the node's own health check shares
(remote/health.py): it imports only the standard library and the shipped judges."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mpicluster.doctor.checks.common import per_node, size
from mpicluster.doctor.model import CheckReport, Result, failed, passed, warned

if TYPE_CHECKING:
    from mpicluster.doctor.runner import Gathered

DISK = "disk"
DISK_TITLE = "Free disk (install prefix, temp directories, /dev/shm)"
MiB = 1024 * 1024
GiB = 1024 * MiB
#: (fail below, warn below) free bytes per place.
DISK_LIMITS = {
    "install": (256 * MiB, 2 * GiB),
    "tmp": (64 * MiB, 512 * MiB),
    "TMPDIR": (64 * MiB, 512 * MiB),
    "shm": (8 * MiB, 32 * MiB),
}


#: Who writes there as the MPI user, for the fix of a folder they cannot write.
WRITERS = {
    "tmp": "Open MPI keeps its session directory there, and most programs their temporary files",
    "TMPDIR": "Open MPI keeps its session directory in $TMPDIR when it is set",
    "shm": "Open MPI and NCCL put their shared-memory segments there",
}


def check_disk(g: Gathered) -> CheckReport:
    return per_node(g, DISK, DISK_TITLE, judge_disk)


def judge_disk(node: str, facts: dict) -> list[Result]:
    results: list[Result] = []
    shown = []
    for label, info in sorted((facts.get("disk") or {}).items()):
        if "error" in info:
            results.append(
                warned(node, f"cannot measure {info['path']}: {info['error']}", "check the mount")
            )
            continue
        if label == "TMPDIR" and info.get("exists") is False:
            results.append(_tmpdir_missing(node, facts, info["path"]))
            continue
        fail_below, warn_below = DISK_LIMITS.get(label, (64 * MiB, 512 * MiB))
        free = info["free"]
        where = info["path"]
        if info.get("measured") and info["measured"] != where:
            where += f" (on {info['measured']})"
        text = f"{where}: {size(free)} free of {size(info['total'])}"
        if info.get("writable") is False:
            user = (facts.get("env") or {}).get("USER") or "the MPI user"
            results.append(
                failed(
                    node,
                    f"{info['path']} is not writable by {user} (mode {info.get('mode')}, "
                    f"owner {info.get('owner')})",
                    f"chmod 1777 {info['path']} on {node}: {WRITERS.get(label, WRITERS['tmp'])}",
                )
            )
        if info.get("busy"):  # a job runs there: the room it takes is its own
            shown.append(f"{where} (a job runs: its room not judged)")
            continue
        fix = f"free space in {info['measured']} on {node}"
        if label == "shm":
            fix += " (Open MPI and NCCL put shared-memory segments there; containers: --shm-size)"
        if free < fail_below:
            results.append(failed(node, text, fix))
        elif free < warn_below:
            results.append(warned(node, text, fix))
        else:
            shown.append(f"{where} {size(free)}")
    if not results:
        results.append(passed(node, "free: " + ", ".join(shown)))
    return results


def _tmpdir_missing(node: str, facts: dict, path: str) -> Result:
    lines = ((facts.get("access") or {}).get("setters") or {}).get("TMPDIR") or []
    where = lines[-1].partition(": ")[0] if lines else None
    return failed(
        node,
        f"logins on {node} get TMPDIR={path}, which does not exist"
        + (f" (set at {where})" if where else ""),
        f"create {path} on {node} (mode 1777), or remove TMPDIR from "
        + (where if where else "the login's environment")
        + ": Open MPI keeps its session directory in $TMPDIR, and a launch there fails",
    )
