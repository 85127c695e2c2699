"""doctor's conversation with its probes, end to end on this machine: an in-process
paramiko SSH server on 127.0.0.1 that runs what it is asked to as a real process (the
probe, with this machine's /usr/bin/python3), so that NodeSession, the probe and the
runner talk as they do with a node. And a node whose SSH port drops every packet, as a
firewall does: doctor names it within one connect timeout.

Several requests are out at once (the pairs while the launches run), each answer goes
to whoever waits for it, a cancelled launch stops at once, the end of the conversation
stops what still runs, and the slowest facts come in a message of their own.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest

from mpicluster import remote
from mpicluster.cluster.inventory import parse_inventory
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.doctor import session as doctor_session
from mpicluster.doctor.checks import ssh_access
from mpicluster.doctor.model import Status
from mpicluster.doctor.runner import Options, gather
from mpicluster.doctor.session import NodeSession, ProbeError
from tests.unit.test_doctor_probe import spec as probe_spec
from tests.unit.test_transport import new_key

#: The firewalled node's address: another loopback address than the node that answers.
SILENT = "127.0.0.2"
#: A login shell that refuses to run commands (Debian's package login).
NOLOGIN = "/usr/sbin/nologin"

pytestmark = pytest.mark.skipif(
    not Path(remote.PYTHON).exists(), reason=f"the probe runs with {remote.PYTHON}"
)


class _Server(paramiko.ServerInterface):
    """Accepts one key; runs each exec request with the login shell's `-c` (sh unless
    told), its stdin, stdout, stderr and exit status over the channel, as sshd does."""

    def __init__(
        self, authorized: paramiko.PKey, processes: list[subprocess.Popen], shell: str = "sh"
    ):
        self.authorized = authorized
        self.processes = processes
        self.shell = shell

    def get_allowed_auths(self, username):
        return "publickey"

    def check_auth_publickey(self, username, key):
        if key.asbytes() == self.authorized.asbytes():
            return paramiko.AUTH_SUCCESSFUL
        return paramiko.AUTH_FAILED

    def check_channel_request(self, kind, chanid):
        return paramiko.OPEN_SUCCEEDED if kind == "session" else paramiko.OPEN_FAILED_UNKNOWN

    def check_channel_exec_request(self, channel, command):
        process = subprocess.Popen(
            [self.shell, "-c", command.decode()],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.processes.append(process)
        threading.Thread(target=_relay, args=(channel, process), daemon=True).start()
        return True


def _relay(channel: paramiko.Channel, process: subprocess.Popen) -> None:
    assert process.stdin and process.stdout and process.stderr

    def into() -> None:
        with contextlib.suppress(OSError):  # a command that ended reads no more
            while chunk := channel.recv(65536):
                process.stdin.write(chunk)
                process.stdin.flush()
            process.stdin.close()

    def errors() -> None:
        while chunk := process.stderr.read1(65536):
            channel.sendall_stderr(chunk)

    threading.Thread(target=into, daemon=True).start()
    threading.Thread(target=errors, daemon=True).start()
    with contextlib.suppress(OSError):
        while chunk := process.stdout.read1(65536):
            channel.sendall(chunk)
    code = process.wait()
    channel.send_exit_status(code if code >= 0 else 128 - code)  # killed: 128 + signal
    channel.close()


@pytest.fixture
def node(tmp_path) -> Iterator[tuple[int, Path, Path]]:
    """(port, identity, known_hosts) of a node on 127.0.0.1 that runs what it is sent."""
    yield from _serving(tmp_path)


@pytest.fixture
def nologin_node(tmp_path) -> Iterator[tuple[int, Path, Path]]:
    """A node whose login shell is nologin (this machine's /usr/sbin/nologin, which
    prints "This account is currently not available." and exits 1). Its channel window
    is smaller than the probe: doctor is still sending the probe when the login ends and
    the channel closes, the order that sshd's own timing gave on a real node."""
    if not Path(NOLOGIN).exists():
        pytest.skip(f"{NOLOGIN} is not installed")
    yield from _serving(tmp_path, shell=NOLOGIN, window=2**15)


def _serving(
    tmp_path: Path, shell: str = "sh", window: int | None = None
) -> Iterator[tuple[int, Path, Path]]:
    host_key, _ = new_key()
    client_key, client_text = new_key()
    identity = tmp_path / "id_ed25519"
    identity.write_text(client_text)
    identity.chmod(0o600)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} ssh-ed25519 {host_key.get_base64()}\n")
    processes: list[subprocess.Popen] = []
    links: list[paramiko.Transport] = []

    def serve() -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            sizes = {"default_window_size": window} if window else {}
            link = paramiko.Transport(sock, **sizes)
            link.add_server_key(host_key)
            links.append(link)
            with contextlib.suppress(paramiko.SSHException, EOFError, OSError):
                link.start_server(server=_Server(client_key, processes, shell))

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield port, identity, known_hosts
    finally:
        listener.close()
        for link in links:
            link.close()
        for process in processes:
            with contextlib.suppress(OSError):
                process.kill()


@pytest.fixture
def dropping_port() -> Iterator[int]:
    """A port whose connections hang unanswered, as behind a firewall that drops them:
    a listener that never accepts, its one-connection queue already full."""
    listener = socket.socket()
    listener.bind((SILENT, 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(3):
        filler = socket.socket()
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect((SILENT, port))
        fillers.append(filler)
    time.sleep(0.1)
    with pytest.raises(TimeoutError):  # what the queue being full looks like from outside
        socket.create_connection((SILENT, port), timeout=0.5)
    try:
        yield port
    finally:
        for sock in (*fillers, listener):
            sock.close()


def plan_of(nodes: list[tuple[str, str, int, Path | None]], known_hosts: Path) -> ClusterPlan:
    """Nodes (name, address, ssh port, identity) on this machine's loopback addresses."""
    known_hosts.touch()
    lines = "".join(
        f"  - {{name: {name}, address: {address}, ssh: {{port: {port}"
        + (f", identity: {identity}" if identity else "")
        + "}}\n"
        for name, address, port, identity in nodes
    )
    text = f"cluster: t\nssh: {{user: me, known_hosts: {known_hosts}}}\nnodes:\n{lines}"
    return ClusterPlan.of(parse_inventory(text))


def started(node, **extra) -> NodeSession:
    """A session to the fake node with the real probe running, its facts read."""
    port, identity, known_hosts = node
    plan = plan_of([("n1", "127.0.0.1", port, identity)], known_hosts)
    session = doctor_session.sessions_for(plan)["n1"]
    session.open(timeout=10)
    assert session.connected, session.error
    session.start_probe({**probe_spec(listen=False), **extra}, 10)
    return session


def launch_order(*items: tuple[list[str], float], workers: int = 4) -> dict:
    listed = [{"id": i, "argv": argv, "timeout": t} for i, (argv, t) in enumerate(items)]
    return {"launch": {"items": listed, "workers": workers, "budget": 60}}


def test_answers_find_their_requests_while_others_run(node):
    """A slow launch and a fast one sent at once: the fast one's answer is read first,
    each by its own number; the slowest facts came in a message of their own."""
    session = started(node, later=True)
    try:
        facts = session.answer("facts", time.monotonic() + 30)
        assert "stack_files" not in facts and "rank_env" not in facts
        later = session.answer("later facts", time.monotonic() + 30)
        assert set(later) == {"kind", "stack_files", "rank_env"}
        slow = session.request(launch_order((["sleep", "2"], 10)))
        fast = session.request(launch_order((["echo", "fast"], 10)))
        deadline = time.monotonic() + 30
        answer, fast_at = session.answer_at("launched", deadline, fast)
        assert answer["results"][0]["output"] == "fast\n"
        answer, slow_at = session.answer_at("launched", deadline, slow)
        assert answer["results"][0]["rc"] == 0
        assert fast_at < slow_at  # the fast one did not wait for the slow one sent first
    finally:
        session.close()


def test_a_cancelled_launch_stops_at_once(node, tmp_path):
    session = started(node)
    try:
        session.answer("facts", time.monotonic() + 30)
        pidfile = tmp_path / "pid"
        hang = ["sh", "-c", f"echo $$ > {pidfile}; exec sleep 300"]
        number = session.request(launch_order((hang, 200), (["sleep", "300"], 200), workers=1))
        deadline = time.monotonic() + 10
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        started_at = time.monotonic()
        session.cancel(number)
        answer = session.answer("launched", started_at + 30, number)
        assert time.monotonic() - started_at < 5
        # the running one stopped (not a hang: it was cancelled), the other never started
        assert [(r["id"], r["hung"]) for r in answer["results"]] == [(0, False)]
        assert answer["results"][0]["rc"] < 0
        assert not Path(f"/proc/{int(pidfile.read_text())}").exists() or _zombie(pidfile)
    finally:
        session.close()


def _zombie(pidfile: Path) -> bool:
    stat = Path(f"/proc/{int(pidfile.read_text())}/stat")
    with contextlib.suppress(FileNotFoundError):
        return stat.read_text().split()[2] == "Z"
    return True


def test_the_end_of_the_conversation_stops_running_launches(node, tmp_path):
    session = started(node)
    pidfile = tmp_path / "pid"
    try:
        session.answer("facts", time.monotonic() + 30)
        session.request(launch_order((["sh", "-c", f"echo $$ > {pidfile}; exec sleep 300"], 200)))
        deadline = time.monotonic() + 10
        while not pidfile.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        session.send(None)  # end of input: the probe stops what runs, then exits
        deadline = time.monotonic() + 10
        while not _zombie(pidfile) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _zombie(pidfile)
    finally:
        session.close()


def test_a_probe_that_ends_ends_every_wait(node):
    session = started(node)
    try:
        session.answer("facts", time.monotonic() + 30)
        session.send(None)
        started_at = time.monotonic()
        with pytest.raises(ProbeError, match="exited"):
            session.answer("later facts", started_at + 30)
        assert time.monotonic() - started_at < 10
    finally:
        session.close()


def test_a_firewalled_node_is_named_within_one_connect_timeout(node, dropping_port):
    """One node answers, the other's SSH port drops every packet: the whole gather
    (the probe, its facts, the pairs) ends one connect timeout after it began, not one
    per phase, and the silent node is named with what to check."""
    port, identity, known_hosts = node
    nodes = [("n1", "127.0.0.1", port, identity), ("n2", SILENT, dropping_port, None)]
    plan = plan_of(nodes, known_hosts)
    timeout = 3.0
    options = Options(checks=("ssh", "env", "clock"), timeout=timeout)
    started_at = time.monotonic()
    found = gather(plan, options, lambda message: None)
    seconds = time.monotonic() - started_at
    assert seconds < timeout + 10, seconds  # the probe's own facts take a few seconds here
    firewalled = found.sessions["n2"]
    assert firewalled.error_kind == doctor_session.NETWORK
    assert firewalled.error == f"no answer from me@{SILENT}:{dropping_port} within the timeout"
    assert found.probed == ["n1"] and found.unprobed == ["n2"]
    assert "n1" in found.clocks


def test_a_nologin_shell_is_named_though_it_ends_before_the_probe_is_sent(nologin_node):
    """The login shell refuses the probe's command and the channel closes while doctor
    is still sending the probe: what the shell printed (read after the failed send) is
    the verdict, nologin and chsh, not "could not start the probe"."""
    port, identity, known_hosts = nologin_node
    plan = plan_of([("n1", "127.0.0.1", port, identity)], known_hosts)
    found = gather(plan, Options(checks=("ssh", "env"), timeout=5), lambda message: None)
    session = found.sessions["n1"]
    assert session.banner == ["This account is currently not available."]
    assert session.error == "the probe exited (1): This account is currently not available."
    result = ssh_access.judge(session)
    assert result.status == Status.FAIL
    assert "the login shell refused to run a command" in result.evidence
    assert "nologin" in (result.fix or "") and "chsh" in (result.fix or "")


def test_connect_to_a_dropping_port_costs_the_timeout_and_no_more(dropping_port, tmp_path):
    plan = plan_of([("n1", SILENT, dropping_port, None)], tmp_path / "known_hosts")
    session = doctor_session.sessions_for(plan)["n1"]
    for timeout in (0.5, 2.0):
        started_at = time.monotonic()
        session.open(timeout)
        assert timeout <= time.monotonic() - started_at < timeout + 1.5
        assert session.error_kind == doctor_session.NETWORK
