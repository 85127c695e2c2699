"""Shared fixtures. Cluster tests run against real Podman nodes brought up by the CLI."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Tests stop commands with SIGINT, as Ctrl-C does. A test run started in the background
# by a non-interactive shell (`make test &`, nohup) has SIGINT ignored, and every command
# it starts would inherit that and never see the interrupt: give it back its handler
# (commands exec'd from here then start with the default).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def mpicluster(
    *args: str, check: bool = True, timeout: float = 1800, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the real mpicluster command, as a user would."""
    done = subprocess.run(
        [sys.executable, "-m", "mpicluster", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )
    if check and done.returncode != 0:
        raise AssertionError(
            f"mpicluster {' '.join(args)} exited {done.returncode}\n"
            f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
        )
    return done


@dataclass(frozen=True)
class LocalCluster:
    name: str
    subnet: str
    inventory: Path

    def ssh(
        self, node: str, command: str, *, check: bool = True, user: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """ssh from the control machine to a node, as the inventory says, host keys checked."""
        from mpicluster.cluster.inventory import load_inventory

        inv = load_inventory(self.inventory)
        target = next(n for n in inv.nodes if n.name == node)
        ssh = inv.node_ssh(target)
        argv = [
            "ssh",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            f"UserKnownHostsFile={ssh.known_hosts}",
            "-o",
            "IdentitiesOnly=yes",
            "-i",
            str(ssh.identity),
            "-p",
            str(ssh.port),
            f"{user or ssh.user}@{ssh.host}",
            command,
        ]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"{node}: {command!r} exited {done.returncode}: {done.stderr}")
        return done


def start_local_cluster(
    name: str, nodes: int, subnet: str, inventory: Path, *options: str
) -> LocalCluster:
    mpicluster(
        "local",
        "up",
        "--name",
        name,
        "--count",
        str(nodes),
        "--subnet",
        subnet,
        "--inventory",
        str(inventory),
        *options,
    )
    return LocalCluster(name, subnet, inventory)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory) -> Iterator[LocalCluster]:
    """A 3-node local cluster for the whole session, removed at the end."""
    inventory = tmp_path_factory.mktemp("inventories") / "pytest.yaml"
    mpicluster("local", "down", "--name", "pytest", check=False)  # leftovers of a killed run
    yield start_local_cluster("pytest", 3, "192.168.63.0/24", inventory)
    mpicluster("local", "down", "--name", "pytest", check=False)


def inventory_with(generated: Path, target: Path, **sections: object) -> Path:
    """A copy of a generated inventory with top-level sections (stack, sources) replaced."""
    import yaml

    data = yaml.safe_load(generated.read_text())
    data.update(sections)
    target.write_text(yaml.safe_dump(data, sort_keys=False))
    return target
