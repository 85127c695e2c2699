"""`down` asks first on a terminal (a real pty), never waits without one.

The inventory names loopback addresses on a closed port: where `down` goes on, its
playbook finds both nodes unreachable at once (exit 4), and nothing else is reached.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO

LOOPBACK = """\
cluster: asking
nodes:
  - {name: a, address: 127.0.0.1}
  - {name: b, address: 127.0.0.2}
ssh: {user: nobody, port: 1, known_hosts: known_hosts}
stack: {install: packages}
"""


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    (tmp_path / "known_hosts").write_text("")
    path = tmp_path / "asking.yaml"
    path.write_text(LOOPBACK)
    return path


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "MPICLUSTER_HOME": str(tmp_path / "state"),
        "COLUMNS": "200",
        "PYTHONPATH": str(REPO),
    }


def on_a_terminal(
    argv: list[str], env: dict[str, str], answer: bytes | None, timeout: float = 60
) -> tuple[str, int]:
    """Run `mpicluster ARGV` with a pty as its input and output; once it asks, send
    `answer` (None: end of input, as Ctrl-D). Its output and exit code."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: the pty is its terminal
        # the real command, exec'd in the pty's child: no shell, argv as given
        os.execvpe(sys.executable, [sys.executable, "-m", "mpicluster", *argv], env)  # noqa: S606
    out = b""
    asked = False
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # the child closed the terminal: it ended
                break
            if not chunk:
                break
            out += chunk
        if not asked and b"Go on? [y/N]" in out:
            asked = True
            os.write(fd, answer if answer is not None else b"\x04")
    else:
        os.kill(pid, 9)
        raise AssertionError(f"still running after {timeout} s: {out.decode()}")
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return out.decode(errors="replace"), os.waitstatus_to_exitcode(status)


@pytest.mark.parametrize("answer", [b"n\n", b"\n", None], ids=["no", "enter", "ctrl-d"])
def test_down_asks_on_a_terminal_and_a_no_changes_nothing(inventory, env, answer):
    out, code = on_a_terminal(["down", str(inventory)], env, answer)
    assert "Go on? [y/N]" in out
    assert "takes back what up added on 2 node(s) of cluster asking: a, b" in out
    assert "the MPI stack under /opt/mpicluster: removed" in out
    assert "nothing was changed on any node" in out
    assert "Running playbooks/down.yml" not in out  # no node was reached
    assert code == 1


def test_down_node_says_the_other_nodes_are_provisioned_again(inventory, env):
    out, code = on_a_terminal(["down", str(inventory), "--nodes", "b"], env, b"no\n")
    assert "the other 1 node(s) (a) are provisioned again without b" in out
    assert "Go on? [y/N]" in out and code == 1


def test_down_yes_on_a_terminal_asks_nothing(inventory, env):
    out, code = on_a_terminal(["down", str(inventory), "--yes"], env, b"n\n")
    assert "Go on?" not in out
    assert "Running playbooks/down.yml on 2 node(s)" in out
    assert code == 4  # both nodes unreachable: it went on


def test_down_without_a_terminal_never_waits(inventory, env):
    done = subprocess.run(
        [sys.executable, "-m", "mpicluster", "down", str(inventory)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert "Go on?" not in done.stdout + done.stderr
    # what it will do is said all the same, then done
    assert "the MPI stack under /opt/mpicluster: removed" in done.stderr
    assert done.returncode == 4, done.stderr[-2000:]
