"""`mpicluster run --sync DIR`: the same tree at the same path on every node before a job.

Two hops, both rsync (fast when nothing changed: only what differs crosses): the control
machine sends DIR to the head node over the inventory's SSH settings (host keys checked
against its known_hosts), then the head sends it on to the other nodes in parallel over
the cluster's own mesh, so the control machine's uplink carries the tree once. Files
matching `.mpiclusterignore` (rsync filter rules, one pattern per line, like
.gitignore) in any folder of the tree stay behind; files gone from DIR are deleted.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mpicluster.cluster.inventory import Node
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.nodes import transport
from mpicluster.nodes.openssh import ssh_argv
from mpicluster.util.errors import MpiclusterError, ToolMissingError, UsageError
from mpicluster.util.text import telling_line

IGNORE_FILE = ".mpiclusterignore"
RSYNC_OPTIONS = ["-a", "--delete", "--stats", f"--filter=:- {IGNORE_FILE}"]
TRANSFERRED = re.compile(r"^Number of regular files transferred:\s*([\d,]+)", re.MULTILINE)
DEFAULT_ROOT = "mpicluster-run"  # in the MPI user's home on every node
TIMEOUT = 600


@dataclass
class SyncResult:
    destination: str  # on every node: absolute, or relative to the MPI user's home
    files: dict[str, int] = field(default_factory=dict)  # node -> regular files sent to it
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return self.__dict__.copy()


def destination_for(source: Path, to: str | None) -> str:
    if to:
        if "\n" in to or not to.strip():
            raise UsageError("--sync-to: not a path")
        return to.rstrip("/") or "/"
    return f"{DEFAULT_ROOT}/{source.resolve().name}"


def transferred(output: str) -> int | None:
    match = TRANSFERRED.search(output)
    return int(match.group(1).replace(",", "")) if match else None


def fan_out_script(destination: str, nodes: list[str]) -> str:
    """What the head runs: rsync to every other node at once, one line per node:
    `@@ NODE EXIT FILES LAST-LINE`."""
    dest = shlex.quote(destination)
    options = " ".join(shlex.quote(o) for o in RSYNC_OPTIONS)
    # every piece quoted on its own: inside "..." the head's shell would still expand
    # $(...), `...` and $NAME in the destination
    rsync_path = shlex.quote(f"mkdir -p {dest} && rsync")
    one = (
        "one() { out=$(rsync " + options + f" --rsync-path={rsync_path} "
        f'{dest}/ "$1":{shlex.quote(destination + "/")} 2>&1); rc=$?; '
        "files=$(printf '%s\\n' \"$out\" | sed -n 's/^Number of regular files transferred: "
        "//p' | tr -d ,); last=$(printf '%s\\n' \"$out\" | tail -n 1); "
        'echo "@@ $1 $rc ${files:-?} $last"; }'
    )
    starts = " ".join(f"one {shlex.quote(n)} &" for n in nodes)
    return f"{one}; {starts} wait"


def sync_tree(
    plan: ClusterPlan,
    source: Path,
    destination: str,
    head: Node,
    others: list[Node],
    progress: Callable[[str], None],
) -> SyncResult:
    if not source.is_dir():
        raise UsageError(f"--sync: no such folder: {source}")
    if shutil.which("rsync") is None:
        raise ToolMissingError("rsync is not installed here (apt-get install rsync)")
    started = time.monotonic()
    result = SyncResult(destination)
    ssh = plan.node_ssh(head)
    progress(f"Syncing {source} to {head.name}:{destination}")
    argv = [
        "rsync",
        *RSYNC_OPTIONS,
        "-e",
        shlex.join(ssh_argv(ssh)),
        "--rsync-path",
        f"mkdir -p {shlex.quote(destination)} && rsync",
        f"{source}/",
        f"{ssh.user}@{ssh.host}:{destination}/",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    if done.returncode != 0:
        why = telling_line(done.stderr or done.stdout)
        hint = "run `mpicluster up` (it installs rsync)" if "rsync: not found" in why else None
        raise MpiclusterError(f"--sync to {head.name} failed ({done.returncode}): {why}", hint=hint)
    result.files[head.name] = transferred(done.stdout) or 0
    if others:
        progress(f"Syncing from {head.name} to {len(others)} other node(s)")
        names = [n.name for n in others]
        answer = transport.run_on(plan, head, fan_out_script(destination, names), timeout=TIMEOUT)
        if answer.error:
            raise MpiclusterError(f"--sync from {head.name}: {answer.error}")
        seen = {}
        for line in answer.stdout.splitlines():
            parts = line.split(" ", 4)
            if len(parts) >= 4 and parts[0] == "@@":
                seen[parts[1]] = (parts[2], parts[3], parts[4] if len(parts) > 4 else "")
        for name in names:
            rc, files, last = seen.get(name, ("?", "?", "no answer"))
            if rc != "0":
                raise MpiclusterError(
                    f"--sync from {head.name} to {name} failed ({rc}): {last}",
                    hint="run `mpicluster doctor INVENTORY` (the mesh between the nodes)",
                )
            result.files[name] = int(files) if files.isdigit() else 0
    result.seconds = time.monotonic() - started
    return result
