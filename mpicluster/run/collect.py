"""`mpicluster run --collect PATH`: the job's results (checkpoints, logs, metrics) brought
back from the nodes after it ends, whatever its exit code (a failed job's logs matter
most).

PATH is relative to the job's folder (--chdir, --sync's, else the MPI user's home).
Each node's copy goes into the cluster's state folder on this machine,
`~/.local/state/mpicluster/clusters/NAME/jobs/JOB/NODE/`, by rsync over the
inventory's SSH settings (host keys checked), all nodes at once. A node without PATH
is reported, not an error.

Nothing here prints.
"""

from __future__ import annotations

import posixpath
import shlex
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from mpicluster.cluster.inventory import Node
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.cluster.state import cluster_dir
from mpicluster.nodes.openssh import ssh_argv
from mpicluster.run.sync import transferred
from mpicluster.util import exitcodes
from mpicluster.util.errors import ToolMissingError, UsageError
from mpicluster.util.text import telling_line

TIMEOUT = 3600
WORKERS = 8
#: rsync's exit when its ssh could not reach the node (ssh's own 255)
SSH_FAILED = 255
#: rsync's words when the source is not there (exit 23, a partial transfer)
MISSING = "No such file or directory"


def checked_path(path: str) -> str:
    """--collect's PATH as given, or a one-line UsageError: relative, inside the job's
    folder."""
    if not path.strip() or "\n" in path or "\x00" in path:
        raise UsageError("--collect: not a path")
    if posixpath.isabs(path):
        raise UsageError(f"--collect {path}: give a path relative to the job's folder")
    if ".." in posixpath.normpath(path).split("/"):
        raise UsageError(f"--collect {path}: a path outside the job's folder")
    return posixpath.normpath(path)


@dataclass
class NodeCopy:
    ok: bool
    files: int = 0
    missing: bool = False
    error: str = ""
    #: False: the copy failed because ssh could not reach the node
    reached: bool = True


@dataclass
class Collected:
    path: str
    into: str  # the job's folder on this machine; each node's copy in a folder of its own
    nodes: dict[str, NodeCopy] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def failed(self) -> list[str]:
        return [name for name, copy in self.nodes.items() if not copy.ok]

    @property
    def exit_code(self) -> int:
        """0 every copy worked; 1 a node's copy failed there; else 4 a node could not be
        reached."""
        if any(self.nodes[name].reached for name in self.failed):
            return exitcodes.FAILED
        return exitcodes.HOSTS_UNREACHABLE if self.failed else exitcodes.OK

    def to_dict(self) -> dict:
        return {
            "path": self.path,
            "into": self.into,
            "nodes": {name: copy.__dict__.copy() for name, copy in self.nodes.items()},
            "seconds": round(self.seconds, 1),
        }


def jobs_dir(cluster: str, job_id: str) -> Path:
    return cluster_dir(cluster) / "jobs" / job_id


def remote_source(path: str, cwd: str | None) -> str:
    """PATH on the node as rsync reads it: relative paths start from the MPI user's home."""
    return posixpath.join(cwd, path) if cwd else path


def collect(
    plan: ClusterPlan, nodes: list[Node], path: str, cwd: str | None, job_id: str
) -> Collected:
    """PATH from every node of `nodes` into jobs_dir(cluster, job_id)/NODE/."""
    if shutil.which("rsync") is None:
        raise ToolMissingError("rsync is not installed here (apt-get install rsync)")
    started = time.monotonic()
    into = jobs_dir(plan.cluster, job_id)
    result = Collected(path, str(into))
    source = remote_source(path, cwd)
    with ThreadPoolExecutor(max_workers=max(1, min(WORKERS, len(nodes)))) as pool:
        copies = pool.map(lambda node: _one(plan, node, source, into / node.name), nodes)
        result.nodes = {node.name: copy for node, copy in zip(nodes, copies, strict=True)}
    result.seconds = time.monotonic() - started
    return result


def _one(plan: ClusterPlan, node: Node, source: str, target: Path) -> NodeCopy:
    ssh = plan.node_ssh(node)
    target.mkdir(parents=True, exist_ok=True, mode=0o700)
    argv = [
        "rsync",
        "-a",
        "--protect-args",
        "--stats",
        "-e",
        shlex.join(ssh_argv(ssh)),
        f"{ssh.user}@{ssh.host}:{source}",
        f"{target}/",
    ]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        return NodeCopy(False, error=f"no end after {TIMEOUT} s")
    if done.returncode == 0:
        return NodeCopy(True, files=transferred(done.stdout) or 0)
    if done.returncode == 23 and MISSING in done.stderr:
        if not any(target.iterdir()):
            target.rmdir()
        return NodeCopy(True, missing=True)
    said = f"rsync exited {done.returncode}: {telling_line(done.stderr)}"
    return NodeCopy(False, error=said, reached=done.returncode != SSH_FAILED)
