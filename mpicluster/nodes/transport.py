"""Run commands on many nodes over SSH (Fabric), with a bounded pool and hard timeouts.

Each node is reached through a `fabric.Connection` whose settings come from the
inventory alone: Fabric's own config files, FABRIC_* variables, ~/.ssh/config and
/etc/ssh/ssh_config are never read, and no system host keys are loaded.

Host keys are always checked against the inventory's known_hosts file: an unknown
key is refused unless the inventory opts into accept-new (trust on first use, as
OpenSSH's `StrictHostKeyChecking accept-new`), and a changed key is always refused
with both fingerprints in the message. (A fresh Connection would add any unknown key;
`connection` replaces that policy before anything connects.)

Commands run on a channel of the Connection's paramiko client rather than through
`Connection.run`: invoke's runner feeds a stdin stream to the node one byte per
10 ms poll, and the programs mpicluster sends on stdin are several kilobytes
(benchmarks/transport_overhead.py measures both).
"""

from __future__ import annotations

import base64
import hashlib
import socket
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import paramiko
from fabric import Config, Connection
from paramiko.config import SSHConfig

from mpicluster.cluster.inventory import Node, ResolvedSsh
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.nodes import host_keys
from mpicluster.nodes.host_keys import UnknownHostKey
from mpicluster.util import commandlog

DEFAULT_WORKERS = 64


@dataclass(frozen=True)
class RemoteResult:
    """What one command did on one node.

    `error` is set when the command could not run at all (unreachable, auth, host
    key, timeout); otherwise `exit_code` is the command's status.
    """

    node: str
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    error: str | None = None
    duration: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and self.exit_code == 0


def fingerprint(key: paramiko.PKey) -> str:
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def _config() -> Config:
    """Fabric settings that come from nowhere but the defaults and the inventory.

    lazy: no /etc/fabric.yaml, ~/.fabric.yaml or FABRIC_* environment variables;
    an explicit, empty SSHConfig and load_ssh_configs off: no ~/.ssh/config or
    /etc/ssh/ssh_config (no Hostname, ProxyJump, IdentityFile from there).
    """
    return Config(
        lazy=True,
        ssh_config=SSHConfig(),
        overrides={"load_ssh_configs": False, "forward_agent": False, "gateway": None},
    )


def connection(ssh: ResolvedSsh, timeout: float | None = None) -> Connection:
    """A Connection to one node, not opened yet, that checks host keys the project's way."""
    timeout = timeout or ssh.connect_timeout
    connect_kwargs: dict = {
        "look_for_keys": ssh.identity is None,
        "allow_agent": ssh.identity is None,
        # Here rather than Connection(connect_timeout=...), which truncates to int.
        "timeout": timeout,
        "banner_timeout": timeout,
        "auth_timeout": timeout,
        "channel_timeout": timeout,
    }
    if ssh.identity:
        connect_kwargs["key_filename"] = str(ssh.identity)
    conn = Connection(
        ssh.host,
        user=ssh.user,
        port=ssh.port,
        config=_config(),
        gateway=False,
        forward_agent=False,
        connect_kwargs=connect_kwargs,
    )
    host_keys.check(conn.client, ssh)
    return conn


def connect(ssh: ResolvedSsh, timeout: float | None = None) -> Connection:
    """An open, authenticated Connection to one node; raises paramiko/socket errors.

    `.client` is its paramiko SSHClient and `.transport` its Transport (keepalive
    every 15 s); close it with `close(conn)`.
    """
    conn = connection(ssh, timeout)
    try:
        conn.open()
    except BaseException:
        conn.client.close()  # a refused host key leaves a live transport behind
        raise
    conn.transport.set_keepalive(15)
    return conn


def close(conn: Connection) -> None:
    """Close a Connection, also one whose transport already died.

    Connection.close does nothing once the transport is inactive, which would leave
    the agent socket paramiko opened for authentication; SSHClient.close is idempotent.
    """
    conn.close()
    conn.client.close()


def describe_error(ssh: ResolvedSsh, exc: BaseException) -> str:
    """One line naming what went wrong reaching a node, with the likely fix."""
    target = f"{ssh.user}@{ssh.host}:{ssh.port}"
    if isinstance(exc, paramiko.BadHostKeyException):
        return (
            f"host key for {ssh.host} CHANGED: known {fingerprint(exc.expected_key)}, "
            f"offered {fingerprint(exc.key)}; if the node was reinstalled, remove the old "
            f"line from {ssh.known_hosts}"
        )
    if isinstance(exc, UnknownHostKey):
        return (
            f"host key of {ssh.host} is not in {ssh.known_hosts} ({exc.key.get_name()} "
            f"{fingerprint(exc.key)}); verify and add it, or set ssh.accept_new_host_keys: true"
        )
    if isinstance(exc, paramiko.AuthenticationException):
        key = ssh.identity or "the default keys"
        return f"authentication failed for {target} with {key}"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve {ssh.host}"
    if isinstance(exc, TimeoutError | socket.timeout):
        return f"no answer from {target} within the timeout"
    if isinstance(exc, ConnectionRefusedError):
        return f"connection refused by {target} (is sshd running?)"
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        return f"cannot connect to {target} (refused or unreachable)"
    if isinstance(exc, OSError) and exc.strerror:
        return f"cannot connect to {target}: {exc.strerror}"
    if silent_server(exc):
        return f"{target} accepted the connection but sent no SSH greeting within the timeout"
    return f"{target}: {type(exc).__name__}: {exc}"


def silent_server(exc: BaseException) -> bool:
    """Something answers the port but says nothing: as good as silent. paramiko says
    so as a banner error, or as "No existing session" when the connect and banner
    timeouts are equal."""
    text = str(exc).lower()
    return isinstance(exc, paramiko.SSHException) and (
        "banner" in text or "no existing session" in text
    )


def run_command(
    client: paramiko.SSHClient, command: str, timeout: float, stdin: str | None = None
) -> tuple[int, str, str]:
    """Run one command on an open client (a Connection's `.client`); raise TimeoutError
    past `timeout` seconds."""
    channel_in, stdout, _ = client.exec_command(command, timeout=timeout)
    channel = stdout.channel
    if stdin is not None:
        channel_in.write(stdin)
        channel_in.flush()
        channel.shutdown_write()
    deadline = time.monotonic() + timeout
    out, err = bytearray(), bytearray()
    while True:
        if channel.recv_ready():
            out += channel.recv(65536)
        elif channel.recv_stderr_ready():
            err += channel.recv_stderr(65536)
        elif channel.exit_status_ready() and (channel.eof_received or channel.closed):
            break  # sshd may send the exit status before the last output: wait for EOF
        elif time.monotonic() > deadline:
            channel.close()
            raise TimeoutError(f"command did not finish within {timeout:.0f} s")
        else:
            channel.status_event.wait(0.02)
    # The data, the EOF and the exit status can all arrive between the checks above: what
    # is still buffered is part of the output (found losing a whole stdout under load).
    while channel.recv_ready():
        out += channel.recv(65536)
    while channel.recv_stderr_ready():
        err += channel.recv_stderr(65536)
    code = channel.recv_exit_status()
    return code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")


def run_on(
    plan: ClusterPlan,
    node: Node,
    command: str,
    *,
    timeout: float = 30,
    stdin: str | None = None,
) -> RemoteResult:
    ssh = plan.node_ssh(node)
    started = time.monotonic()
    commandlog.ran(node.name, command, stdin=stdin)
    try:
        conn = connect(ssh)
    except Exception as exc:  # every failure to connect becomes a result, never a crash
        return RemoteResult(
            node.name, error=describe_error(ssh, exc), duration=time.monotonic() - started
        )
    try:
        code, out, err = run_command(conn.client, command, timeout, stdin)
    except TimeoutError:
        return RemoteResult(
            node.name,
            error=f"command timed out after {timeout:.0f} s",
            duration=time.monotonic() - started,
        )
    except (paramiko.SSHException, OSError) as exc:
        return RemoteResult(
            node.name, error=describe_error(ssh, exc), duration=time.monotonic() - started
        )
    finally:
        close(conn)
    return RemoteResult(node.name, out, err, code, duration=time.monotonic() - started)


class GroupResult(dict[str, "RemoteResult"]):
    """Each node's result of one command run on a group of nodes, by node name and in the
    group's order (as Fabric's GroupResult): which nodes succeeded and which failed."""

    @property
    def succeeded(self) -> dict[str, RemoteResult]:
        return {name: result for name, result in self.items() if result.ok}

    @property
    def failed(self) -> dict[str, RemoteResult]:
        return {name: result for name, result in self.items() if not result.ok}


def run_everywhere(
    plan: ClusterPlan,
    command: str | Callable[[Node], str],
    *,
    nodes: Iterable[Node] | None = None,
    timeout: float = 30,
    workers: int = DEFAULT_WORKERS,
    stdin: str | None = None,
) -> GroupResult:
    """Run a command on every node (or `nodes`) in parallel, at most `workers` at once."""
    targets = list(nodes if nodes is not None else plan.nodes)
    if not targets:
        return GroupResult()

    def one(node: Node) -> RemoteResult:
        text = command(node) if callable(command) else command
        return run_on(plan, node, text, timeout=timeout, stdin=stdin)

    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(targets)))) as pool:
        results = list(pool.map(one, targets))
    return GroupResult((result.node, result) for result in results)
