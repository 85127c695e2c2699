"""One persistent SSH connection per node, and the probe conversation over it.

The connection is a fabric Connection from mpicluster.nodes.transport.connect (host keys
always checked, the inventory's identity, no ~/.ssh/config); the probe runs on a raw
channel of its transport. The probe is started with a one-line bootstrap that reads
the script from stdin, so stdin stays open to exchange JSON lines with it.

Several requests may be out at once (the pairs and the launches): each carries an id
(`request`), and one reader thread per session files every message as it comes, where
the thread waiting for it finds it (`answer`). Every wait has a deadline: a silent node
costs one timeout.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import shlex
import socket
import threading
import time
from dataclasses import dataclass, field

import paramiko
from fabric import Connection

from mpicluster import remote
from mpicluster.cluster.inventory import Node, ResolvedSsh
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.nodes import transport
from mpicluster.util.text import last_line

BOOTSTRAP = "import sys;exec(compile(sys.stdin.buffer.read(int(sys.argv[1])),'probe','exec'))"


def probe_script() -> bytes:
    """The probe as sent: nodeinfo's facts, then doctor's own conversation."""
    return remote.script("probe").encode()


class ProbeError(Exception):
    """The probe could not be run or stopped answering."""


#: How a node failed to answer: the network (nothing answers), or ssh itself (a host
#: key, authentication), or the probe (the node answers but the probe does not run).
NETWORK, SSH, PROBE_FAILED = "network", "ssh", "probe"
#: Lines a login may print before the probe's first message.
BANNER_LINES = 20
#: The kinds of answer a request gets (the pairs' request: its clock, then its pairs).
ANSWERS = ("clock", "pairs", "retried", "launched")
#: What the probe sends unasked: its facts, then (spec "later") its slowest facts.
UNASKED = ("facts", "later facts")


@dataclass
class NodeSession:
    node: Node
    ssh: ResolvedSsh
    #: The open Connection (None until `open` succeeds).
    client: Connection | None = None
    channel: paramiko.Channel | None = None
    error: str | None = None
    error_kind: str | None = None
    connect_seconds: float = 0.0
    server_version: str = ""
    host_key: str = ""
    facts: dict | None = None
    messages: list[dict] = field(default_factory=list)
    #: What the login printed before the probe's first message (a shell startup file's
    #: echo): rsync and scp/sftp break on such logins, doctor reads past it.
    banner: list[str] = field(default_factory=list)
    _buffer: bytes = b""
    #: Messages read (with when) and not taken by `answer` yet; why the conversation ended.
    _inbox: list[tuple[dict, float]] = field(default_factory=list)
    _ended: str | None = None
    _reader: threading.Thread | None = None
    _arrived: threading.Condition = field(default_factory=threading.Condition)
    _sending: threading.Lock = field(default_factory=threading.Lock)
    _ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def connected(self) -> bool:
        return self.client is not None

    @property
    def probed(self) -> bool:
        return self.facts is not None

    def open(self, timeout: float) -> None:
        """Connect; on failure record why (never raise)."""
        started = time.monotonic()
        try:
            self.client = transport.connect(self.ssh, timeout=timeout)
        except Exception as exc:  # every way of not connecting is a finding, not a crash
            self.error, self.error_kind = describe(self.ssh, exc), _kind_of(exc)
            self.client = None
            return
        finally:
            self.connect_seconds = time.monotonic() - started
        link = self.client.transport
        if link is not None:
            self.server_version = link.remote_version or ""
            key = link.get_remote_server_key()
            self.host_key = f"{key.get_name()} {transport.fingerprint(key)}"

    def start_probe(self, spec: dict, timeout: float) -> None:
        """Start the probe with its spec (its messages are read once one is waited for)."""
        script = probe_script()
        command = " ".join(
            shlex.quote(a) for a in (remote.PYTHON, "-c", BOOTSTRAP, str(len(script)))
        )
        link = self.client.transport if self.client is not None else None
        if link is None or not link.is_active():
            raise ProbeError("the connection closed")
        try:
            channel = link.open_session(timeout=timeout)
            channel.exec_command(command)
        except (paramiko.SSHException, OSError) as exc:
            raise ProbeError(f"could not start the probe: {exc}") from None
        self.channel = channel
        try:
            channel.sendall(script + json.dumps({"spec": spec}).encode() + b"\n")
        except (paramiko.SSHException, OSError) as exc:
            # A command that ended before it read the whole probe (a nologin shell prints
            # why and exits at once) closes the channel under the send: what it printed
            # and its exit status, read as any probe's death, say why, not the send.
            if not channel.eof_received:
                raise ProbeError(f"could not start the probe: {exc}") from None

    def send(self, message: dict | None) -> None:
        """Send one message; None ends the conversation (end of input)."""
        if self.channel is None:
            return
        try:
            with self._sending:  # one message's bytes never mix with another's
                if message is None:
                    self.channel.shutdown_write()
                else:
                    self.channel.sendall(json.dumps(message).encode() + b"\n")
        except (paramiko.SSHException, OSError) as exc:
            raise ProbeError(f"the probe stopped listening: {exc}") from None

    def request(self, message: dict) -> int:
        """Send a request under a new id (its answers carry it); ProbeError if it cannot."""
        if self.channel is None:
            raise ProbeError("the probe is not running")
        number = next(self._ids)
        self.send({**message, "id": number})
        return number

    def cancel(self, number: int) -> None:
        """Ask the probe to stop request `number`'s launches (its answer still comes)."""
        with contextlib.suppress(ProbeError):
            self.send({"cancel": number})

    def answer(self, kind: str, deadline: float, number: int | None = None) -> dict:
        """The message of `kind` (the answer to request `number`, or one the probe sends
        unasked when None), as soon as it came; ProbeError past `deadline` (monotonic)
        or once the conversation ended without it."""
        return self.answer_at(kind, deadline, number)[0]

    def answer_at(
        self, kind: str, deadline: float, number: int | None = None
    ) -> tuple[dict, float]:
        """`answer`, and when it arrived (time.time(): a clock's round trip ends there)."""
        if self.channel is None:
            raise ProbeError("the probe is not running")
        with self._arrived:
            entry = self._wait_for(kind, deadline, number)
            if entry is not None:
                self._inbox.remove(entry)
                return entry
            if self._ended is not None:
                raise ProbeError(self._ended)
            raise ProbeError("the probe did not answer in time")

    def answered(self, kind: str, deadline: float, number: int | None = None) -> bool:
        """Whether what `answer` would return has come by `deadline` (monotonic): it stays
        for `answer`. True once the conversation ended too (`answer` then says why)."""
        if self.channel is None:
            return True
        with self._arrived:
            return self._wait_for(kind, deadline, number) is not None or self._ended is not None

    def _wait_for(self, kind: str, deadline: float, number: int | None) -> tuple | None:
        """The inbox's entry of `kind` for `number`, left in it; None once the deadline
        passed or the conversation ended without it (called with `_arrived` held; the
        first wait starts the reader thread)."""
        if self._reader is None:
            self._reader = threading.Thread(target=self._read, daemon=True)
            self._reader.start()
        while True:
            for entry in self._inbox:
                if entry[0].get("kind") == kind and entry[0].get("id") == number:
                    return entry
            remaining = deadline - time.monotonic()
            if self._ended is not None or remaining <= 0:
                return None
            self._arrived.wait(remaining)

    def _read(self) -> None:
        """The reader thread: every message into the inbox, until the conversation ends."""
        channel = self.channel
        assert channel is not None  # noqa: S101 (started by start_probe)
        channel.settimeout(None)
        while True:
            try:
                message = self._next_message(channel)
                if message.get("kind") not in (*ANSWERS, *UNASKED):
                    raise ProbeError(f"unexpected answer {message.get('kind')!r}")
            except ProbeError as exc:
                with self._arrived:
                    self._ended = str(exc)
                    self._arrived.notify_all()
                return
            with self._arrived:
                self.messages.append(message)
                self._inbox.append((message, time.time()))
                self._arrived.notify_all()

    def _next_message(self, channel: paramiko.Channel) -> dict:
        """The next JSON object the probe prints (a login's banner lines kept aside)."""
        while True:
            while b"\n" not in self._buffer:
                try:
                    chunk = channel.recv(65536)
                except (paramiko.SSHException, OSError) as exc:
                    raise ProbeError(f"the connection broke: {exc}") from None
                if not chunk:
                    raise ProbeError(self._death())
                self._buffer += chunk
            line, _, self._buffer = self._buffer.partition(b"\n")
            try:
                message = json.loads(line)
            except json.JSONDecodeError:
                message = None
            if isinstance(message, dict):
                return message
            if self.messages or len(self.banner) >= BANNER_LINES:
                raise ProbeError(f"the probe printed {line[:120]!r}")
            self.banner.append(line.decode("utf-8", "replace").strip()[:200])

    def _death(self) -> str:
        channel = self.channel
        if channel is None:
            return "the probe is not running"
        err = b""
        channel.settimeout(2)
        try:
            while channel.recv_stderr_ready() or not channel.exit_status_ready():
                chunk = channel.recv_stderr(65536)
                if not chunk:
                    break
                err += chunk
        except (TimeoutError, paramiko.SSHException, OSError):
            pass
        code = channel.recv_exit_status() if channel.exit_status_ready() else None
        last = last_line(err.decode("utf-8", "replace"), "") or last_line(
            "\n".join(self.banner), "no output"
        )
        if code == 127 or ("No such file" in last and remote.PYTHON in last):
            return f"{remote.PYTHON} is missing on the node ({last})"
        return f"the probe exited ({code}): {last}"

    def close(self) -> None:
        if self.channel is not None:
            with contextlib.suppress(paramiko.SSHException, OSError):
                self.channel.close()
        if self.client is not None:
            transport.close(self.client)


def sessions_for(plan: ClusterPlan) -> dict[str, NodeSession]:
    return {n.name: NodeSession(n, plan.node_ssh(n)) for n in plan.nodes}


def describe(ssh: ResolvedSsh, exc: BaseException) -> str:
    """transport.describe_error, plus paramiko's ways of saying "authentication failed"."""
    text = str(exc)
    confused = "encountered" in text and "key, expected" in text
    if type(exc) is paramiko.SSHException and (
        confused or "No authentication methods available" in text
    ):
        key = ssh.identity or "the default keys"
        return f"authentication failed for {ssh.user}@{ssh.host}:{ssh.port} with {key}"
    return transport.describe_error(ssh, exc)


def _kind_of(exc: BaseException) -> str:
    if isinstance(
        exc,
        paramiko.BadHostKeyException | transport.UnknownHostKey | paramiko.AuthenticationException,
    ):
        return SSH
    if isinstance(exc, TimeoutError | socket.timeout | socket.gaierror | OSError):
        return NETWORK
    if transport.silent_server(exc):
        return NETWORK
    return SSH
