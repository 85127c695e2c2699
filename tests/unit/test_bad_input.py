"""Bad command-line input to every command: exit 2, a short answer, no traceback, and
nothing reaches a node.

The inventory's only node is 127.0.0.1 on a port this test listens on, counting the
connections it accepts: after each bad command the count must still be 0. Nothing is
started either (subprocess.Popen is refused while the command runs), and
MPICLUSTER_HOME and HOME point into tmp_path, so no state is written elsewhere.
(Bad inventories themselves: test_inventory_errors.py and test_inventory_property.py.)
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mpicluster.cli import app
from tests.unit.ssh_keys import SECRET, private_openssh

REPO = Path(__file__).resolve().parents[2]


class Listener:
    """A TCP port on 127.0.0.1 that accepts connections, counts and closes them."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.count = 0
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.count += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def listener():
    lis = Listener()
    yield lis
    lis.close()


@pytest.fixture
def place(tmp_path: Path, listener: Listener, monkeypatch) -> dict[str, str]:
    """Files the cases name, by placeholder; HOME and MPICLUSTER_HOME in tmp_path."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("MPICLUSTER_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("MPICLUSTER_DEBUG", raising=False)
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    known = tmp_path / "known_hosts"
    known.write_text("")
    inv = tmp_path / "inventory.yaml"
    inv.write_text(
        "cluster: test\n"
        f"ssh: {{user: alice, port: {listener.port}, connect_timeout: 2, "
        f"known_hosts: {known}}}\n"
        f"sources: {{cache: {tmp_path / 'cache'}, artifacts: {tmp_path / 'artifacts'}}}\n"
        "nodes:\n  - {name: n1, address: 127.0.0.1, slots: 2}\n"
    )
    bad_inv = tmp_path / "bad.yaml"
    bad_inv.write_text(inv.read_text().replace("user: alice", "user: 'alice;reboot'"))
    folder = tmp_path / "folder"
    folder.mkdir()
    latin = tmp_path / "latin1.yaml"
    latin.write_bytes(b"cluster: caf\xe9\nnodes: [{name: n1}]\n")
    loop = tmp_path / "loop.yaml"
    loop.symlink_to(loop)
    bad_env = tmp_path / "bad.env"
    bad_env.write_text("# comment\nGOOD=1\nnot a variable line\n")
    pasted = "".join(f"          {line}\n" for line in private_openssh().splitlines())
    users_private = tmp_path / "users-private.yaml"
    users_private.write_text(
        inv.read_text() + f"users:\n  - name: carol\n    keys:\n      - |\n{pasted}"
    )
    (tmp_path / "id_carol").write_text(private_openssh())
    users_private_file = tmp_path / "users-private-file.yaml"
    users_private_file.write_text(inv.read_text() + "users: [{name: carol, keys: [id_carol]}]\n")
    users_no_key = tmp_path / "users-no-key.yaml"
    users_no_key.write_text(inv.read_text() + "users: [{name: carol, keys: [carol.pub]}]\n")
    return {
        "inv": str(inv),
        "bad_inv": str(bad_inv),
        "folder": str(folder),
        "latin": str(latin),
        "loop": str(loop),
        "missing": str(tmp_path / "missing.yaml"),
        "long": str(tmp_path / ("x" * 300 + ".yaml")),
        "bad_env": str(bad_env),
        "file": str(known),
        "users_private": str(users_private),
        "users_private_file": str(users_private_file),
        "users_no_key": str(users_no_key),
    }


# (id, arguments, a fragment of the answer). Click's own usage errors are marked "usage".
CASES = [
    # arguments and options Click refuses
    ("validate-no-inventory", ["validate"], "usage", "Missing argument 'inventory'"),
    ("up-no-inventory", ["up"], "usage", "Missing argument 'inventory'"),
    ("smoke-no-inventory", ["smoke"], "usage", "Missing argument 'inventory'"),
    ("doctor-no-inventory", ["doctor"], "usage", "Missing argument 'inventory'"),
    ("hostfile-no-inventory", ["hostfile"], "usage", "Missing argument 'inventory'"),
    ("fetch-no-inventory", ["fetch"], "usage", "Missing argument 'inventory'"),
    ("run-no-inventory", ["run"], "usage", "Missing argument 'inventory'"),
    ("unknown-command", ["frobnicate", "{inv}"], "usage", "No such command"),
    ("run-unknown-option", ["run", "{inv}", "--bogus", "--", "true"], "usage", "--bogus"),
    ("doctor-timeout-word", ["doctor", "{inv}", "--timeout", "abc"], "usage", "'--timeout'"),
    ("doctor-seed-word", ["doctor", "{inv}", "--seed", "abc"], "usage", "'--seed'"),
    ("run-np-word", ["run", "{inv}", "--np", "all", "--", "true"], "usage", "'-np'"),
    (
        "run-hang-timeout-word",
        ["run", "{inv}", "--hang-timeout", "soon", "--", "true"],
        "usage",
        "'--hang-timeout'",
    ),
    ("hostfile-format-no-value", ["hostfile", "{inv}", "--format"], "usage", "'--format'"),
    ("up-smoke-with-value", ["up", "{inv}", "--smoke=maybe"], "usage", "--smoke"),
    ("local-up-zero-count", ["local", "up", "--count", "0"], "usage", "'--count'"),
    ("local-up-count-word", ["local", "up", "--count", "many"], "usage", "'--count'"),
    ("local-no-subcommand", ["local", "frob"], "usage", "No such command"),
    ("down-no-inventory", ["down"], "usage", "Missing argument 'inventory'"),
    ("nodes-no-inventory", ["nodes"], "usage", "Missing argument 'inventory'"),
    ("nodes-check-with-value", ["nodes", "{inv}", "--check=yes"], "usage", "--check"),
    ("cordon-no-reason", ["cordon", "{inv}", "n1"], "usage", "--reason"),
    ("cordon-unknown-node", ["cordon", "{inv}", "n9", "--reason", "x"], "error", "'n9': no such"),
    ("cordon-reason-lines", ["cordon", "{inv}", "n1", "--reason", "a\nb"], "error", "one line"),
    ("cordon-reason-empty", ["cordon", "{inv}", "n1", "--reason", " "], "error", "say why"),
    ("uncordon-unknown-node", ["uncordon", "{inv}", "n9"], "error", "'n9': no such node"),
    ("bench-no-inventory", ["bench"], "usage", "Missing argument 'inventory'"),
    ("bench-expect-word", ["bench", "{inv}", "--expect", "fast"], "usage", "'--expect'"),
    ("doctor-cordon-with-value", ["doctor", "{inv}", "--cordon=yes"], "usage", "--cordon"),
    ("bench-cordon-with-value", ["bench", "{inv}", "--cordon=yes"], "usage", "--cordon"),
    ("bench-cordon-one-node", ["bench", "{inv}", "--cordon"], "error", "two nodes or more"),
    ("bench-expect-zero", ["bench", "{inv}", "--expect", "0"], "error", "--expect 0.0"),
    ("bench-unknown-node", ["bench", "{inv}", "--nodes", "n9"], "error", "'n9': no such node"),
    (
        "bench-unknown-node-after-comma",
        ["bench", "{inv}", "--nodes", "n1,n9"],
        "error",
        "--nodes 'n9': no such node (one of: n1)",
    ),
    ("bench-node-twice", ["bench", "{inv}", "--nodes", "n1", "--nodes", "n1"], "error", "twice"),
    ("bench-nodes-empty", ["bench", "{inv}", "--nodes", ","], "error", "--nodes: no node named"),
    ("bench-one-node", ["bench", "{inv}"], "error", "two nodes or more"),
    ("bench-report-a-file", ["bench", "{inv}", "--report", "{inv}"], "error", "not a folder"),
    ("down-nodes-no-value", ["down", "{inv}", "--nodes"], "usage", "'--nodes'"),
    # the inventory argument itself
    ("inventory-is-a-folder", ["validate", "{folder}"], "error", "is a folder"),
    ("inventory-not-utf8", ["validate", "{latin}"], "error", "cannot read: not UTF-8 text"),
    ("inventory-symlink-loop", ["up", "{loop}"], "error", "no such file"),
    ("inventory-name-too-long", ["doctor", "{long}"], "error", "cannot read: File name too long"),
    ("inventory-missing", ["smoke", "{missing}"], "error", "no such file"),
    ("up-bad-inventory", ["up", "{bad_inv}"], "error", ":2: ssh.user: contains ';'"),
    ("doctor-bad-inventory", ["doctor", "{bad_inv}"], "error", ":2: ssh.user: contains ';'"),
    ("run-bad-inventory", ["run", "{bad_inv}", "--", "true"], "error", ":2: ssh.user"),
    ("hostfile-bad-inventory", ["hostfile", "{bad_inv}"], "error", ":2: ssh.user"),
    ("fetch-bad-inventory", ["fetch", "{bad_inv}"], "error", ":2: ssh.user"),
    ("down-bad-inventory", ["down", "{bad_inv}"], "error", ":2: ssh.user"),
    # a user's keys: a private key is refused and never printed (SECRET, in check_answer)
    (
        "validate-user-private-key",
        ["validate", "{users_private}"],
        "error",
        ":9: users[0].keys[0]: carol's key: a private key, not a public one (not printed)",
    ),
    (
        "up-user-private-key-file",
        ["up", "{users_private_file}"],
        "error",
        "id_carol:1: a private key, not a public one (not printed)",
    ),
    (
        "run-user-key-file-missing",
        ["run", "{users_no_key}", "--", "true"],
        "error",
        ":6: users[0].keys[0]: carol's key file: no such file:",
    ),
    (
        "down-nodes-unknown",
        ["down", "{inv}", "--nodes", "n9"],
        "error",
        "--nodes 'n9': no such node (one of: n1)",
    ),
    ("down-nodes-hostile", ["down", "{inv}", "--nodes", "$(id)"], "error", "no such node"),
    ("down-nodes-only-one", ["down", "{inv}", "--nodes", "n1"], "error", "the cluster's only node"),
    (
        "down-nodes-two",
        ["down", "{inv}", "--nodes", "n1,n2"],
        "error",
        "down takes one node at a time",
    ),
    # run
    ("run-no-program", ["run", "{inv}"], "error", "no program to run"),
    ("run-empty-program", ["run", "{inv}", "--"], "error", "no program to run"),
    ("run-np-zero", ["run", "{inv}", "--np", "0", "--", "true"], "error", "-np must be at least"),
    ("run-np-negative", ["run", "{inv}", "-np", "-4", "--", "true"], "error", "-np must be"),
    (
        "run-np-huge",
        ["run", "{inv}", "--np", "99999999999999999999999", "--", "true"],
        "error",
        "-np 99999999999999999999999: more than",
    ),
    ("run-per-node-zero", ["run", "{inv}", "--per-node", "0", "--", "true"], "error", "--per-node"),
    (
        "run-per-node-huge",
        ["run", "{inv}", "--per-node", str(2**40), "--", "true"],
        "error",
        "--per-node",
    ),
    (
        "run-hang-timeout-negative",
        ["run", "{inv}", "--hang-timeout", "-5", "--", "true"],
        "error",
        "--hang-timeout must be more than 0",
    ),
    (
        "run-hang-timeout-nan",
        ["run", "{inv}", "--hang-timeout", "nan", "--", "true"],
        "error",
        "--hang-timeout must be more than 0",
    ),
    (
        "run-hang-timeout-inf",
        ["run", "{inv}", "--hang-timeout", "inf", "--", "true"],
        "error",
        "--hang-timeout",
    ),
    (
        "run-inspect-hang-timeout-negative",
        ["run", "{inv}", "--inspect", "--hang-timeout", "-5"],
        "error",
        "--hang-timeout must be more than 0",
    ),
    ("run-keep-hung-alone", ["run", "{inv}", "--keep-hung", "--", "true"], "error", "--keep-hung"),
    ("run-sync-to-alone", ["run", "{inv}", "--sync-to", "/x", "--", "true"], "error", "--sync-to"),
    ("run-setup-empty", ["run", "{inv}", "--setup", " ", "--", "true"], "error", "--setup"),
    (
        "run-collect-absolute",
        ["run", "{inv}", "--collect", "/etc", "--", "true"],
        "error",
        "--collect /etc: give a path relative to the job's folder",
    ),
    (
        "run-collect-outside",
        ["run", "{inv}", "--collect", "a/../../b", "--", "true"],
        "error",
        "a path outside the job's folder",
    ),
    (
        "run-collect-from-word",
        ["run", "{inv}", "--collect", "out", "--collect-from", "rank0", "--", "true"],
        "error",
        "--collect-from 'rank0': one of all, head",
    ),
    (
        "run-collect-from-alone",
        ["run", "{inv}", "--collect-from", "head", "--", "true"],
        "error",
        "--collect-from needs --collect",
    ),
    (
        "run-env-unset",
        ["run", "{inv}", "--env", "NOT_SET_ANYWHERE", "--", "true"],
        "error",
        "--env",
    ),
    ("run-env-bad-name", ["run", "{inv}", "--env", "1BAD=x", "--", "true"], "error", "--env"),
    ("run-env-space-name", ["run", "{inv}", "--env", "A B=x", "--", "true"], "error", "--env"),
    ("run-env-empty", ["run", "{inv}", "--env", "", "--", "true"], "error", "--env"),
    (
        "run-env-substitution-name",
        ["run", "{inv}", "--env", "$(reboot)=x", "--", "true"],
        "error",
        "--env",
    ),
    (
        "run-env-file-missing",
        ["run", "{inv}", "--env-file", "{missing}", "--", "true"],
        "error",
        "--env-file: no such file",
    ),
    (
        "run-env-file-folder",
        ["run", "{inv}", "--env-file", "{folder}", "--", "true"],
        "error",
        "--env-file: no such file",
    ),
    (
        "run-env-file-bad-line",
        ["run", "{inv}", "--env-file", "{bad_env}", "--", "true"],
        "error",
        "bad.env:3: not NAME=VALUE",
    ),
    (
        "run-sync-missing",
        ["run", "{inv}", "--sync", "{missing}", "--", "true"],
        "error",
        "--sync: no such folder",
    ),
    (
        "run-sync-file",
        ["run", "{inv}", "--sync", "{file}", "--", "true"],
        "error",
        "--sync: no such folder",
    ),
    (
        "run-sync-to-newline",
        ["run", "{inv}", "--sync", "{folder}", "--sync-to", "a\nb", "--", "true"],
        "error",
        "--sync-to: not a path",
    ),
    (
        "run-sync-to-blank",
        ["run", "{inv}", "--sync", "{folder}", "--sync-to", " ", "--", "true"],
        "error",
        "--sync-to: not a path",
    ),
    ("run-launcher-unknown", ["run", "{inv}", "--launcher", "srun", "--", "true"], "error", "srun"),
    (
        "run-torchrun-with-np",
        ["run", "{inv}", "--launcher", "torchrun", "--np", "2", "--", "true"],
        "error",
        "-np is for the mpirun launcher",
    ),
    (
        "run-nodes-unknown",
        ["run", "{inv}", "--nodes", "n9", "--", "true"],
        "error",
        "--nodes 'n9': no such node (one of: n1)",
    ),
    ("run-nodes-twice", ["run", "{inv}", "--nodes", "n1,n1", "--", "true"], "error", "twice"),
    (
        "run-nodes-twice-repeated",
        ["run", "{inv}", "--nodes", "n1", "--nodes", "n1", "--", "true"],
        "error",
        "--nodes names 'n1' twice",
    ),
    (
        "run-nodes-hostile",
        ["run", "{inv}", "--nodes", "n1;reboot", "--", "true"],
        "error",
        "--nodes 'n1;reboot': no such node",
    ),
    (
        "run-detach-slurm-hang-timeout",
        ["run", "{inv}", "--via", "slurm", "--detach", "--hang-timeout", "60", "--", "true"],
        "error",
        "a detached Slurm job ends at its time limit",
    ),
    # the detached jobs' commands: an id is checked before any node is asked
    ("logs-id-hostile", ["logs", "{inv}", "../../x;id"], "error", "is not a job id"),
    ("logs-id-short", ["logs", "{inv}", "abc"], "error", "is not a job id"),
    ("stop-id-upper", ["stop", "{inv}", "0123456789AB"], "error", "is not a job id"),
    ("collect-id-empty", ["collect", "{inv}", ""], "error", "is not a job id"),
    (
        "collect-from-unknown",
        ["collect", "{inv}", "0123456789ab", "--collect-from", "some"],
        "error",
        "--collect-from 'some'",
    ),
    (
        "collect-path-outside",
        ["collect", "{inv}", "0123456789ab", "--path", "../x"],
        "error",
        "outside the job's folder",
    ),
    ("logs-no-job", ["logs", "{inv}"], "usage", "Missing argument 'job'"),
    # doctor, hostfile, fetch
    ("doctor-timeout-zero", ["doctor", "{inv}", "--timeout", "0"], "error", "--timeout 0.0"),
    ("doctor-timeout-negative", ["doctor", "{inv}", "--timeout", "-3"], "error", "--timeout"),
    ("doctor-timeout-nan", ["doctor", "{inv}", "--timeout", "nan"], "error", "--timeout nan"),
    ("doctor-timeout-inf", ["doctor", "{inv}", "--timeout", "inf"], "error", "--timeout inf"),
    ("doctor-check-unknown", ["doctor", "{inv}", "--check", "bogus"], "error", "not a check"),
    (
        "doctor-check-one-unknown",
        ["doctor", "{inv}", "--check", "ssh", "--check", "ssh;id"],
        "error",
        "--check 'ssh;id'",
    ),
    ("hostfile-format-xml", ["hostfile", "{inv}", "--format", "xml"], "error", "--format 'xml'"),
    ("hostfile-format-empty", ["hostfile", "{inv}", "--format", ""], "error", "--format ''"),
    ("fetch-python-word", ["fetch", "{inv}", "--python", "abc"], "error", "--python 'abc'"),
    ("fetch-python-two", ["fetch", "{inv}", "--python", "2.7"], "error", "--python '2.7'"),
    (
        "fetch-arch-hostile",
        ["fetch", "{inv}", "--python", "3.11", "--arch", "x86_64;id"],
        "error",
        "--arch 'x86_64;id'",
    ),
    # local
    ("local-up-bad-name", ["local", "up", "--name", "Bad_Name"], "error", "--name 'Bad_Name'"),
    ("local-up-hostile-name", ["local", "up", "--name", "a$(id)"], "error", "--name"),
    ("local-up-too-many", ["local", "up", "--count", "201"], "error", "--count 201"),
    ("local-up-bad-subnet", ["local", "up", "--subnet", "nonsense"], "error", "--subnet"),
    ("local-up-small-subnet", ["local", "up", "--subnet", "10.0.0.0/30"], "error", "too small"),
    ("local-up-provider", ["local", "up", "--provider", "kvm"], "error", "--provider 'kvm'"),
    ("local-up-release", ["local", "up", "--release", "sid"], "error", "--release 'sid': one of"),
    (
        "local-up-releases-count",
        ["local", "up", "--count", "3", "--release", "bookworm,trixie"],
        "error",
        "one release for every node, or one per node (3)",
    ),
    (
        "local-up-cuda-home",
        ["local", "up", "--cuda", "--cuda-home", "{folder}"],
        "error",
        "no CUDA toolkit there",
    ),
    ("local-down-bad-name", ["local", "down", "--name", "a;b"], "error", "--name 'a;b'"),
    ("local-status-unknown", ["local", "status", "--name", "nosuch"], "error", "no local cluster"),
]


def test_there_are_enough_cases():
    assert len({c[0] for c in CASES}) == len(CASES) >= 40
    commands = {c[1][0] for c in CASES}
    every = {"validate", "up", "down", "smoke", "doctor", "bench", "hostfile", "fetch", "run"}
    every |= {"local"}
    assert commands >= every


def fill(args: list[str], place: dict[str, str]) -> list[str]:
    out = []
    for arg in args:
        for key, value in place.items():
            arg = arg.replace("{" + key + "}", value)
        out.append(arg)
    return out


def check_answer(output: str, kind: str, expected: str) -> None:
    assert "Traceback" not in output, output
    assert SECRET not in output, "a private key was printed"
    lines = output.strip().splitlines()
    assert lines, "nothing printed"
    if kind == "usage":
        assert any(line.startswith("Error: ") for line in lines), output
        assert len(lines) <= 6, output
    else:
        assert all(line.startswith("error: ") for line in lines), output
        assert len(lines) == 1, output
    assert expected in output, output


@pytest.fixture
def nothing_starts(monkeypatch):
    """No program may be started while the command runs."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"a bad input started a program: {args[:1]}")

    monkeypatch.setattr(subprocess, "Popen", refuse)


@pytest.mark.parametrize(
    ("args", "kind", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_argument(args, kind, expected, place, listener, nothing_starts):
    if "{long}" in args and os.pathconf("/tmp", "PC_NAME_MAX") > 300:
        pytest.skip("this file system takes 300-character names")
    result = CliRunner().invoke(app, fill(args, place))
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    check_answer(result.output, kind, expected)
    assert listener.count == 0, "a bad input reached the node"


def test_the_listener_sees_a_good_command(place, listener):
    """The harness itself: a valid `run` does reach the node's port (and fails there)."""
    result = CliRunner().invoke(app, ["run", place["inv"], "--", "true"])
    assert result.exit_code not in (0, 2), result.output
    assert listener.count >= 1


def test_nodes_says_a_node_it_cannot_log_in_to_is_unreachable(place, listener):
    """`nodes` end to end on this machine: the node's port answers no SSH (exit 4)."""
    result = CliRunner().invoke(app, ["nodes", place["inv"], "--json"])
    assert result.exit_code == 4, result.output
    report = json.loads(result.output[result.output.index("{") :])
    (node,) = report["nodes"]
    assert (node["name"], node["state"], node["cordon"]) == ("n1", "unreachable", None)
    assert listener.count >= 1


SUBPROCESS_CASES = [
    "inventory-not-utf8",
    "inventory-name-too-long",
    "run-np-huge",
    "run-hang-timeout-nan",
    "doctor-timeout-word",
    "run-env-file-bad-line",
    "fetch-python-word",
    "local-down-bad-name",
    "validate-user-private-key",
    "up-user-private-key-file",
]


@pytest.mark.parametrize("case", SUBPROCESS_CASES)
def test_real_process_has_no_traceback(case, place, listener):
    _, args, kind, expected = next(c for c in CASES if c[0] == case)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "mpicluster", *fill(args, place)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=place["folder"],
        env=env,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    check_answer(done.stderr, kind, expected)
    assert listener.count == 0
