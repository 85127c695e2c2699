"""-v: every command mpicluster runs is shown on stderr, its secrets hidden."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mpicluster.util.commandlog import hidden
from tests.conftest import REPO
from tests.unit.test_down_question import LOOPBACK

PEM = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ\n"
    "-----END OPENSSH PRIVATE KEY-----"
)


def test_private_keys_and_secret_values_are_hidden():
    text = f"printf '%s' '{PEM}' > key; MUNGE_KEY=abc123 HF_TOKEN='x y' PATH=/usr/bin run"
    shown = hidden(text)
    assert "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ" not in shown
    assert "<private key hidden>" in shown
    assert "MUNGE_KEY=<hidden>" in shown and "abc123" not in shown
    assert "HF_TOKEN=<hidden>" in shown and "x y" not in shown
    assert "PATH=/usr/bin run" in shown  # what is not a secret stays as it was


def mpicluster(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "known_hosts").write_text("")
    (tmp_path / "loop.yaml").write_text(LOOPBACK)
    return subprocess.run(
        [sys.executable, "-m", "mpicluster", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "MPICLUSTER_HOME": str(tmp_path / "state"), "PYTHONPATH": str(REPO)},
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )


def test_v_shows_each_command_before_it_runs_even_where_the_node_cannot_be_reached(tmp_path):
    done = mpicluster(tmp_path, "-v", "hostfile", "loop.yaml")
    assert done.returncode == 4, done.stderr
    shown = [line for line in done.stderr.splitlines() if line.startswith("  run ")]
    assert {line.split(":")[0] for line in shown} == {"  run a", "  run b"}, done.stderr
    quiet = mpicluster(tmp_path, "hostfile", "loop.yaml")
    assert quiet.returncode == 4 and "  run " not in quiet.stderr


def test_v_shows_the_playbook_command(tmp_path):
    done = mpicluster(tmp_path, "--verbose", "down", "loop.yaml", "--yes")
    assert done.returncode == 4, done.stderr
    assert any(
        line.startswith("  run ansible: ") and "ansible-playbook" in line
        for line in done.stderr.splitlines()
    ), done.stderr
