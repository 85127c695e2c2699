"""mpicluster.nodes.transport on fabric.Connection: host keys, settings, results.

The end-to-end tests talk to an in-process paramiko SSH server on 127.0.0.1 (an
ephemeral port, keys made on the spot), so they need no sshd and skip nothing.
"""

from __future__ import annotations

import base64
import io
import shlex
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import paramiko
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from fabric import Connection

from mpicluster.cluster.inventory import Inventory, ResolvedSsh, parse_inventory
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.doctor import session
from mpicluster.nodes import host_keys, transport


def new_key() -> tuple[paramiko.Ed25519Key, str]:
    """A fresh ed25519 key, and its private key file text (OpenSSH format)."""
    text = (
        Ed25519PrivateKey.generate()
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
        .decode()
    )
    return paramiko.Ed25519Key.from_private_key(io.StringIO(text)), text


def resolved(tmp_path: Path, **changes) -> ResolvedSsh:
    values = {
        "host": "node1.example",
        "user": "mpi",
        "port": 2222,
        "identity": tmp_path / "id",
        "known_hosts": tmp_path / "known_hosts",
        "accept_new_host_keys": False,
        "connect_timeout": 7,
    }
    return ResolvedSsh(**(values | changes))


# --- pure logic: fingerprints, messages, policies


def test_fingerprint_is_openssh_sha256():
    key, _ = new_key()
    import hashlib

    digest = base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")
    assert transport.fingerprint(key) == f"SHA256:{digest}"
    assert "=" not in transport.fingerprint(key)


def test_describe_error_names_each_way_of_failing(tmp_path):
    ssh = resolved(tmp_path)
    known, _ = new_key()
    offered, _ = new_key()
    target = "mpi@node1.example:2222"

    changed = transport.describe_error(
        ssh, paramiko.BadHostKeyException("node1.example", offered, known)
    )
    assert "CHANGED" in changed
    assert transport.fingerprint(known) in changed
    assert transport.fingerprint(offered) in changed
    assert str(ssh.known_hosts) in changed

    unknown = transport.describe_error(ssh, transport.UnknownHostKey("node1.example", offered))
    assert f"is not in {ssh.known_hosts}" in unknown
    assert f"ssh-ed25519 {transport.fingerprint(offered)}" in unknown
    assert "accept_new_host_keys" in unknown

    auth = transport.describe_error(ssh, paramiko.AuthenticationException("no"))
    assert auth == f"authentication failed for {target} with {tmp_path / 'id'}"
    no_identity = resolved(tmp_path, identity=None)
    assert transport.describe_error(no_identity, paramiko.AuthenticationException()).endswith(
        "with the default keys"
    )

    assert transport.describe_error(ssh, socket.gaierror(-2, "Name or service not known")) == (
        "cannot resolve node1.example"
    )
    assert transport.describe_error(ssh, TimeoutError()) == (
        f"no answer from {target} within the timeout"
    )
    assert transport.describe_error(ssh, ConnectionRefusedError(111, "refused")) == (
        f"connection refused by {target} (is sshd running?)"
    )
    refused = paramiko.ssh_exception.NoValidConnectionsError(
        {("10.0.0.1", 2222): ConnectionRefusedError(111, "refused")}
    )
    assert transport.describe_error(ssh, refused) == (
        f"cannot connect to {target} (refused or unreachable)"
    )
    assert transport.describe_error(ssh, OSError(113, "No route to host")) == (
        f"cannot connect to {target}: No route to host"
    )
    assert transport.describe_error(ssh, ValueError("odd")) == f"{target}: ValueError: odd"


def test_reject_unknown_raises_with_the_offered_key():
    key, _ = new_key()
    with pytest.raises(transport.UnknownHostKey) as caught:
        host_keys._RejectUnknown().missing_host_key(None, "[10.0.0.1]:2222", key)
    assert caught.value.hostname == "[10.0.0.1]:2222"
    assert caught.value.key is key
    assert isinstance(caught.value, paramiko.SSHException)


def test_accept_new_records_the_key_in_the_inventory_file(tmp_path):
    path = tmp_path / "deeper" / "known_hosts"
    first, _ = new_key()
    second, _ = new_key()
    policy = host_keys._AcceptNewPolicy(path)
    policy.missing_host_key(None, "[10.0.0.1]:2222", first)
    policy.missing_host_key(None, "node2", second)
    keys = paramiko.HostKeys(str(path))
    assert keys.lookup("[10.0.0.1]:2222")["ssh-ed25519"] == first
    assert keys.lookup("node2")["ssh-ed25519"] == second


def test_result_ok_and_no_reached():
    assert transport.RemoteResult("n", exit_code=0).ok
    assert not transport.RemoteResult("n", exit_code=1).ok
    assert not transport.RemoteResult("n", error="no answer").ok
    assert not hasattr(transport.RemoteResult("n"), "reached")


# --- the Connection's settings: the inventory's and nothing else


@pytest.fixture
def hostile_home(tmp_path, monkeypatch) -> Path:
    """A HOME whose ssh and Fabric files would send us elsewhere, were they read."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        "Host *\n  HostName elsewhere.invalid\n  User mallory\n  Port 1\n"
        "  ProxyJump jump.invalid\n  IdentityFile ~/.ssh/other\n  ForwardAgent yes\n"
    )
    (home / ".fabric.yaml").write_text(
        "user: mallory\nport: 1\nforward_agent: true\nconnect_kwargs: {key_filename: /x}\n"
    )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("FABRIC_USER", "mallory")
    monkeypatch.setenv("FABRIC_FORWARD_AGENT", "true")

    def never(self, path):
        raise AssertionError(f"read an ssh config file: {path}")

    monkeypatch.setattr("fabric.config.Config._load_ssh_file", never)
    return home


def test_connection_takes_the_inventory_settings_only(tmp_path, hostile_home):
    key, _ = new_key()
    (tmp_path / "known_hosts").write_text(f"[node1.example]:2222 ssh-ed25519 {key.get_base64()}\n")
    (hostile_home / ".ssh" / "known_hosts").write_text(f"node9 ssh-ed25519 {key.get_base64()}\n")
    conn = transport.connection(resolved(tmp_path), timeout=2.5)
    assert isinstance(conn, Connection)
    assert (conn.host, conn.user, conn.port) == ("node1.example", "mpi", 2222)
    assert not conn.gateway
    assert conn.forward_agent is False
    assert conn.ssh_config == {"hostname": "node1.example"}  # what an empty SSHConfig says
    assert conn.connect_timeout is None  # the float timeout travels in connect_kwargs
    assert conn.connect_kwargs == {
        "look_for_keys": False,
        "allow_agent": False,
        "timeout": 2.5,
        "banner_timeout": 2.5,
        "auth_timeout": 2.5,
        "channel_timeout": 2.5,
        "key_filename": [str(tmp_path / "id")],
    }
    assert conn.config.authentication.strategy_class is None
    client = conn.client
    assert type(client._policy) is host_keys._RejectUnknown
    assert client.get_host_keys().lookup("[node1.example]:2222")["ssh-ed25519"] == key
    assert client.get_host_keys().lookup("node9") is None
    assert len(client._system_host_keys) == 0


def test_connection_without_identity_uses_agent_and_default_keys(tmp_path, hostile_home):
    conn = transport.connection(resolved(tmp_path, identity=None, accept_new_host_keys=True))
    assert conn.connect_kwargs["look_for_keys"] is True
    assert conn.connect_kwargs["allow_agent"] is True
    assert "key_filename" not in conn.connect_kwargs
    assert conn.connect_kwargs["timeout"] == 7  # the inventory's connect_timeout
    policy = conn.client._policy
    assert type(policy) is host_keys._AcceptNewPolicy
    assert policy.path == tmp_path / "known_hosts"
    assert len(conn.client.get_host_keys()) == 0  # no file yet: nothing loaded


def test_connect_closes_the_client_when_opening_fails(tmp_path, monkeypatch):
    closed = []

    class Client:
        def close(self):
            closed.append(True)

    class Failing:
        client = Client()

        def open(self):
            raise transport.UnknownHostKey("h", new_key()[0])

    monkeypatch.setattr(transport, "connection", lambda ssh, timeout=None: Failing())
    with pytest.raises(transport.UnknownHostKey):
        transport.connect(resolved(tmp_path))
    assert closed == [True]


# --- run_everywhere: bounded, one result per node, failures become results


def inventory_of(count: int) -> Inventory:
    nodes = "".join(f"  - {{name: n{i}}}\n" for i in range(count))
    return parse_inventory(f"cluster: t\nssh: {{user: mpi}}\nnodes:\n{nodes}")


def test_run_everywhere_is_bounded_and_keyed_by_node(monkeypatch):
    lock = threading.Lock()
    running, peak, seen = [0], [0], []

    def fake_run_on(inventory, node, command, *, timeout, stdin):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            seen.append((node.name, command, timeout, stdin))
        time.sleep(0.02)
        with lock:
            running[0] -= 1
        return transport.RemoteResult(node.name, stdout=command, exit_code=int(node.name == "n3"))

    monkeypatch.setattr(transport, "run_on", fake_run_on)
    inv = inventory_of(12)
    results = transport.run_everywhere(
        ClusterPlan.of(inv), lambda node: f"echo {node.name}", workers=3, timeout=9, stdin="x"
    )
    assert list(results) == [f"n{i}" for i in range(12)]
    assert results["n5"].stdout == "echo n5"
    # which nodes succeeded and which failed, as Fabric's GroupResult says
    assert list(results.failed) == ["n3"] and results.failed["n3"].exit_code == 1
    assert list(results.succeeded) == [f"n{i}" for i in range(12) if i != 3]
    assert peak[0] <= 3
    assert {(t, s) for _, _, t, s in seen} == {(9, "x")}
    assert transport.run_everywhere(ClusterPlan.of(inv), "true", nodes=[]) == {}


def test_run_on_turns_connect_failures_into_results(monkeypatch):
    def refuse(ssh, timeout=None):
        raise paramiko.AuthenticationException("denied")

    monkeypatch.setattr(transport, "connect", refuse)
    inv = inventory_of(1)
    result = transport.run_on(ClusterPlan.of(inv), inv.nodes[0], "true")
    assert result.error is not None
    assert result.error.startswith("authentication failed for mpi@n0:22")
    assert result.exit_code is None
    assert not result.ok


# --- end to end against an in-process SSH server on loopback


@dataclass
class FakeNode:
    port: int
    host_key: paramiko.Ed25519Key
    client_key: paramiko.Ed25519Key
    identity: Path
    logins: list[str]


class _Server(paramiko.ServerInterface):
    def __init__(self, link: paramiko.Transport, authorized: paramiko.PKey, logins: list[str]):
        self.authorized = authorized
        self.logins = logins
        # paramiko answers an exec request after check_channel_exec_request returns; a
        # command that wrote and closed before that answer would look like a channel
        # closed under the client (sshd never does that): commands wait for the answer.
        self.answered = threading.Event()
        send = link._send_user_message

        def send_and_note(message):
            send(message)
            if message.asbytes()[:1] == paramiko.common.cMSG_CHANNEL_SUCCESS:
                self.answered.set()

        link._send_user_message = send_and_note

    def get_allowed_auths(self, username):
        return "publickey"

    def check_auth_publickey(self, username, key):
        if key.asbytes() == self.authorized.asbytes():
            self.logins.append(username)
            return paramiko.AUTH_SUCCESSFUL
        return paramiko.AUTH_FAILED

    def check_channel_request(self, kind, chanid):
        if kind == "session":
            return paramiko.OPEN_SUCCEEDED
        return paramiko.OPEN_FAILED_ADMINISTRATIVELY_PROHIBITED

    def check_channel_exec_request(self, channel, command):
        threading.Thread(
            target=_execute, args=(channel, command.decode(), self.answered), daemon=True
        ).start()
        return True


def _execute(channel: paramiko.Channel, command: str, answered: threading.Event) -> None:
    """The few commands the tests send: echo WORDS, fail, count-stdin, hang."""
    answered.wait(5)
    try:
        if command.startswith("echo "):
            channel.sendall(command[5:].encode() + b"\n")
            code = 0
        elif command == "fail":
            channel.sendall(b"partial\n")
            channel.sendall_stderr(b"boom\n")
            code = 3
        elif command == "count-stdin":
            received = 0
            while chunk := channel.recv(65536):
                received += len(chunk)
            channel.sendall(f"{received}\n".encode())
            code = 0
        elif command == "hang":
            while not channel.closed:
                time.sleep(0.05)
            return
        else:
            channel.sendall_stderr(f"unknown command {command}\n".encode())
            code = 127
        channel.send_exit_status(code)
    finally:
        if not channel.closed:
            channel.close()


@pytest.fixture
def fake_node(tmp_path) -> Iterator[FakeNode]:
    host_key, _ = new_key()
    client_key, client_text = new_key()
    identity = tmp_path / "id_ed25519"
    identity.write_text(client_text)
    identity.chmod(0o600)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    stop = threading.Event()
    links: list[paramiko.Transport] = []
    logins: list[str] = []

    def serve() -> None:
        while not stop.is_set():
            try:
                sock, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            link = paramiko.Transport(sock)
            link.add_server_key(host_key)
            links.append(link)
            try:
                link.start_server(server=_Server(link, client_key, logins))
            except (paramiko.SSHException, EOFError, OSError):
                link.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield FakeNode(port, host_key, client_key, identity, logins)
    finally:
        stop.set()
        listener.close()
        thread.join(5)
        for link in links:
            link.close()


def node_inventory(
    tmp_path: Path, node: FakeNode, *, known: str | None = "right", accept_new=False
) -> Inventory:
    """An inventory for the fake node; known_hosts holds its key, another, or nothing."""
    known_hosts = tmp_path / "known_hosts"
    if known == "right":
        known_hosts.write_text(
            f"[127.0.0.1]:{node.port} ssh-ed25519 {node.host_key.get_base64()}\n"
        )
    elif known == "other":
        known_hosts.write_text(f"[127.0.0.1]:{node.port} ssh-ed25519 {new_key()[0].get_base64()}\n")
    else:
        known_hosts.write_text("")
    return parse_inventory(
        "cluster: t\n"
        f"ssh: {{user: mpi, port: {node.port}, identity: {node.identity}, "
        f"known_hosts: {known_hosts}, accept_new_host_keys: {str(accept_new).lower()}, "
        "connect_timeout: 5}\n"
        "nodes: [{name: n1, address: 127.0.0.1}]\n"
    )


def test_runs_a_command_and_keeps_failures_apart(tmp_path, fake_node, hostile_home):
    inv = node_inventory(tmp_path, fake_node)
    node = inv.nodes[0]
    good = transport.run_on(ClusterPlan.of(inv), node, "echo hello there", timeout=10)
    assert (good.ok, good.exit_code, good.error, good.stdout) == (True, 0, None, "hello there\n")
    failed = transport.run_on(ClusterPlan.of(inv), node, "fail", timeout=10)
    assert (failed.ok, failed.exit_code, failed.error) == (False, 3, None)
    assert (failed.stdout, failed.stderr) == ("partial\n", "boom\n")
    assert fake_node.logins == ["mpi", "mpi"]  # the inventory's user, not ~/.ssh/config's


def test_sends_stdin_and_ends_it(tmp_path, fake_node):
    inv = node_inventory(tmp_path, fake_node)
    payload = "print('x')\n" * 20000  # 220 kB: more than one channel window
    result = transport.run_on(
        ClusterPlan.of(inv), inv.nodes[0], "count-stdin", timeout=20, stdin=payload
    )
    assert result.ok, result
    assert result.stdout == f"{len(payload)}\n"


def test_a_command_past_its_timeout_is_an_error(tmp_path, fake_node):
    inv = node_inventory(tmp_path, fake_node)
    started = time.monotonic()
    result = transport.run_on(ClusterPlan.of(inv), inv.nodes[0], "hang", timeout=1)
    assert time.monotonic() - started < 5
    assert result.error == "command timed out after 1 s"
    assert result.exit_code is None


def test_unknown_host_key_is_refused_and_not_recorded(tmp_path, fake_node, hostile_home):
    inv = node_inventory(tmp_path, fake_node, known=None)
    # the user's own known_hosts knows the key: it must not count
    (hostile_home / ".ssh" / "known_hosts").write_text(
        f"[127.0.0.1]:{fake_node.port} ssh-ed25519 {fake_node.host_key.get_base64()}\n"
    )
    result = transport.run_on(ClusterPlan.of(inv), inv.nodes[0], "echo hi", timeout=10)
    assert result.error is not None
    assert f"is not in {tmp_path / 'known_hosts'}" in result.error
    assert transport.fingerprint(fake_node.host_key) in result.error
    assert result.exit_code is None
    assert (tmp_path / "known_hosts").read_text() == ""
    assert fake_node.logins == []


def test_accept_new_records_then_checks(tmp_path, fake_node):
    inv = node_inventory(tmp_path, fake_node, known=None, accept_new=True)
    assert transport.run_on(ClusterPlan.of(inv), inv.nodes[0], "echo one", timeout=10).ok
    recorded = paramiko.HostKeys(str(tmp_path / "known_hosts"))
    assert recorded.lookup(f"[127.0.0.1]:{fake_node.port}")["ssh-ed25519"] == fake_node.host_key
    assert transport.run_on(ClusterPlan.of(inv), inv.nodes[0], "echo two", timeout=10).ok
    assert len((tmp_path / "known_hosts").read_text().splitlines()) == 1


def test_changed_host_key_is_refused_even_with_accept_new(tmp_path, fake_node):
    inv = node_inventory(tmp_path, fake_node, known="other", accept_new=True)
    result = transport.run_on(ClusterPlan.of(inv), inv.nodes[0], "echo hi", timeout=10)
    assert result.error is not None
    assert "CHANGED" in result.error
    assert transport.fingerprint(fake_node.host_key) in result.error
    assert fake_node.logins == []


def test_wrong_identity_is_an_auth_error(tmp_path, fake_node):
    _, other = new_key()
    fake_node.identity.write_text(other)
    inv = node_inventory(tmp_path, fake_node)
    result = transport.run_on(ClusterPlan.of(inv), inv.nodes[0], "echo hi", timeout=10)
    assert result.error == (
        f"authentication failed for mpi@127.0.0.1:{fake_node.port} with {fake_node.identity}"
    )


def test_refused_and_silent_ports_are_errors(tmp_path):
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    silent = socket.create_server(("127.0.0.1", 0))  # accepts, never says a word
    try:
        for sock in (closed, silent):
            ssh = resolved(tmp_path, host="127.0.0.1", port=sock.getsockname()[1])
            started = time.monotonic()
            with pytest.raises((paramiko.SSHException, OSError)) as caught:
                transport.connect(ssh, timeout=0.5)  # a float timeout, not truncated to 0
            assert time.monotonic() - started < 3
            if sock is closed:
                assert transport.describe_error(ssh, caught.value) == (
                    f"cannot connect to mpi@127.0.0.1:{ssh.port} (refused or unreachable)"
                )
    finally:
        closed.close()
        silent.close()


def test_run_everywhere_reaches_every_node(tmp_path, fake_node):
    base = node_inventory(tmp_path, fake_node)
    inv = base.model_copy(
        update={"nodes": [base.nodes[0].model_copy(update={"name": f"n{i}"}) for i in range(6)]}
    )
    results = transport.run_everywhere(
        ClusterPlan.of(inv), lambda n: f"echo {n.name}", timeout=10, workers=3
    )
    assert {name: (r.error, r.stdout) for name, r in results.items()} == {
        f"n{i}": (None, f"n{i}\n") for i in range(6)
    }


def test_doctor_session_opens_a_connection_and_a_raw_channel(tmp_path, fake_node):
    inv = node_inventory(tmp_path, fake_node)
    node_session = session.sessions_for(ClusterPlan.of(inv))["n1"]
    node_session.open(timeout=5)
    try:
        assert node_session.error is None, node_session.error
        assert isinstance(node_session.client, Connection)
        assert node_session.connected
        assert node_session.server_version.startswith("SSH-2.0")
        assert node_session.host_key == f"ssh-ed25519 {transport.fingerprint(fake_node.host_key)}"
        # what start_probe does, on the same transport
        channel = node_session.client.transport.open_session(timeout=5)
        channel.exec_command("count-stdin")
        channel.sendall(b"12345")
        channel.shutdown_write()
        assert channel.makefile("rb").read() == b"5\n"
        assert channel.recv_exit_status() == 0
    finally:
        node_session.close()
    assert not node_session.client.is_connected


def test_doctor_session_records_why_it_could_not_connect(tmp_path, fake_node):
    inv = node_inventory(tmp_path, fake_node, known=None)
    node_session = session.sessions_for(ClusterPlan.of(inv))["n1"]
    node_session.open(timeout=5)
    assert not node_session.connected
    assert node_session.error_kind == session.SSH
    assert "is not in" in (node_session.error or "")


def test_openssh_under_ansible_and_rsync_takes_the_same_policy(tmp_path):
    """One host-key policy: the playbooks' ssh and `run --sync`'s ssh check keys as the
    transport does, against the inventory's known_hosts."""
    from mpicluster.nodes import ansible_run, openssh

    for accept_new, checking in ((False, "yes"), (True, "accept-new")):
        known = tmp_path / "known hosts"
        known.touch()
        inv = parse_inventory(
            "cluster: c\n"
            f"ssh: {{user: u, known_hosts: '{known}', "
            f"accept_new_host_keys: {str(accept_new).lower()}}}\n"
            "nodes: [{name: n1, address: 10.0.0.1}]\n"
        )
        expected = [f"StrictHostKeyChecking={checking}", f"UserKnownHostsFile={known}"]
        assert host_keys.openssh_options(known, accept_new) == expected
        ansible = shlex.split(ansible_run.ssh_args(ClusterPlan.of(inv)))
        rsync = openssh.ssh_argv(inv.node_ssh(inv.nodes[0]))
        for argv in (ansible, rsync):
            options = [argv[i + 1] for i, word in enumerate(argv) if word == "-o"]
            assert [
                o
                for o in options
                if o.split("=")[0] in ("StrictHostKeyChecking", "UserKnownHostsFile")
            ] == expected
