"""What the cluster tests do to the local cluster's nodes from outside: stop and start a
node's container, run a command in it as root (podman exec, not ssh: it works while
sshd is broken), wait for ssh, and take stock of every file `up` touches.

Shared by the down/fault tests and doctor's corpus.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time

from mpicluster.cluster.inventory import load_inventory
from mpicluster.cluster.layout import Layout
from tests.conftest import REPO, LocalCluster


def container(cluster: LocalCluster | str, node: str) -> tuple[str, dict[str, str]]:
    """(container id, podman's environment) of one node of a local cluster (or its name)."""
    from mpicluster.local.host import podman_env
    from mpicluster.local.spec import LocalSpec
    from mpicluster.local.vagrant import Vagrant

    env = podman_env()
    name = cluster if isinstance(cluster, str) else cluster.name
    spec = LocalSpec.saved(name)
    assert spec is not None, name
    return Vagrant(spec, env).container_ids()[node], env


def podman(cluster: LocalCluster | str, node: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`podman ARGS <node's container>` (stop, start, kill ...)."""
    cid, env = container(cluster, node)
    done = subprocess.run(
        ["podman", *args, cid],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


def podman_exec(
    cluster: LocalCluster | str, node: str, command: str, *, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """`sh -c COMMAND` as root inside the node's container."""
    cid, env = container(cluster, node)
    done = subprocess.run(
        ["podman", "exec", cid, "sh", "-c", command],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if check:
        assert done.returncode == 0, f"{node}: {command!r}: {done.stderr}"
    return done


def wait_for_ssh(cluster: LocalCluster, node: str, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while cluster.ssh(node, "true", check=False).returncode != 0:
        assert time.monotonic() < deadline, f"{node}: no ssh after {seconds} s"
        time.sleep(1)


#: Taken on the node by root: every path of the footprint (~/ in the MPI user's home),
#: everything in ~/.ssh, as [mode, uid, gid, sha256 | link target] or "absent".
_STOCK = r"""
import hashlib, json, os, pwd, stat, sys
footprint, user = json.loads(sys.argv[1]), sys.argv[2]
home = pwd.getpwnam(user).pw_dir
paths = set()
for entry in footprint:
    path = entry["path"]
    path = home + path[1:] if path.startswith("~") else path
    if "*" not in path:
        paths.add(path)
if os.path.isdir(home + "/.ssh"):
    paths.update(os.path.join(home, ".ssh", n) for n in os.listdir(home + "/.ssh"))
stock = {}
for path in sorted(paths):
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        stock[path] = "absent"
        continue
    facts = [oct(info.st_mode), info.st_uid, info.st_gid]
    if stat.S_ISREG(info.st_mode):
        with open(path, "rb") as handle:
            facts.append(hashlib.sha256(handle.read()).hexdigest())
    elif stat.S_ISLNK(info.st_mode):
        facts.append(os.readlink(path))
    stock[path] = facts
print(json.dumps(stock))
"""


def stock(cluster: LocalCluster, inventory, nodes: list[str]) -> dict[str, dict]:
    """node -> {path: facts} of every file `up` touches (Layout.footprint)."""
    inv = load_inventory(inventory)
    footprint = json.dumps(Layout.of(inv).footprint(inv.cluster))
    found = {}
    for node in nodes:
        user = inv.node_ssh(next(n for n in inv.nodes if n.name == node)).user
        command = f"python3 -c {shlex.quote(_STOCK)} {shlex.quote(footprint)} {shlex.quote(user)}"
        found[node] = json.loads(podman_exec(cluster, node, command).stdout)
    return found


class Started:
    """A mpicluster command running in the background (its own process group, as from a
    terminal), its stderr read line by line as it comes."""

    def __init__(self, *args: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mpicluster", *args],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        self.stdout = ""
        self._changed = threading.Condition()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        threading.Thread(target=self._read_stdout, daemon=True).start()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        self.stdout = self.proc.stdout.read()

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    def wait_for(self, text: str, timeout: float = 600) -> None:
        """Until a line of stderr holds `text` (fails if the command ends first)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not any(text in line for line in self.lines):
                assert self.proc.poll() is None, f"ended before {text!r}:\n{self.stderr[-3000:]}"
                left = deadline - time.monotonic()
                assert left > 0, f"no {text!r} in {timeout} s:\n{self.stderr[-3000:]}"
                self._changed.wait(min(left, 1.0))

    def interrupt(self, sig: int = signal.SIGINT, *, group: bool = True) -> None:
        """Ctrl-C (SIGINT to the whole group) or a `kill` of mpicluster alone."""
        if group:
            os.killpg(self.proc.pid, sig)
        else:
            os.kill(self.proc.pid, sig)

    def finish(self, timeout: float = 600) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise


#: Temporary files of an interrupted write: Ansible's atomic moves, mpicluster's own.
HALF_WRITTEN = (
    "find /etc /var/lib/mpicluster /var/tmp /home /opt -xdev \\( -name '.ansible_tmp*' "
    "-o -name '.mpicluster.*' -o -name '.environment.*' -o -name '.journal.*' "
    "-o -name '*.part' \\) -print 2>/dev/null; true"
)


def half_written(cluster: LocalCluster | str, node: str) -> list[str]:
    """Temporary files an interrupted write left on the node, and /etc/environment
    with a block opened but not closed."""
    found = podman_exec(cluster, node, HALF_WRITTEN).stdout.split()
    blocks = podman_exec(
        cluster,
        node,
        "grep -c '^# BEGIN mpicluster' /etc/environment; grep -c '^# END mpicluster' "
        "/etc/environment; true",
    ).stdout.split()
    if len(set(blocks)) != 1:
        found.append(f"/etc/environment: BEGIN/END counts {blocks}")
    return found


def playbooks_running(cluster_name: str) -> list[str]:
    """ansible-playbook processes on this machine still working for the cluster."""
    done = subprocess.run(
        ["pgrep", "-af", f"clusters/{cluster_name}/runs/"],
        capture_output=True,
        text=True,
        check=False,
    )
    return [line for line in done.stdout.splitlines() if "ansible" in line]
