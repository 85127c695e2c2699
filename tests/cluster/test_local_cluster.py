"""The local cluster itself: real Podman containers driven by Vagrant, reached over SSH."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from mpicluster.local.podman import LABEL
from mpicluster.local.spec import LocalSpec, local_dir
from tests.conftest import mpicluster, start_local_cluster

pytestmark = pytest.mark.cluster

NAME = "pytest-lc"
SUBNET = "192.168.64.0/24"
NETWORK = f"mpicluster-{NAME}"


def podman(*args: str) -> str:
    from mpicluster.local.host import podman_env

    env = {**__import__("os").environ, **podman_env()}
    return subprocess.run(
        ["podman", *args], capture_output=True, text=True, check=True, env=env
    ).stdout


def our_containers() -> list[str]:
    return podman("ps", "-a", "-q", "--no-trunc", "--filter", f"label={LABEL}={NETWORK}").split()


def test_every_node_is_reachable_at_its_inventory_address(cluster):
    from mpicluster.cluster.inventory import load_inventory

    inv = load_inventory(cluster.inventory)
    assert [n.name for n in inv.nodes] == ["node1", "node2", "node3"]
    seen_hosts = set()
    for node in inv.nodes:
        out = cluster.ssh(node.name, "hostname; ip -4 -o addr show scope global; id -un").stdout
        hostname, *addresses, user = out.strip().splitlines()
        assert hostname == node.name
        assert any(f"inet {node.address}/24" in line for line in addresses), out
        assert user == "vagrant"
        seen_hosts.add(hostname)
    assert len(seen_hosts) == 3


def test_nodes_have_their_own_host_keys(cluster):
    keys = {
        cluster.ssh(n, "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.split()[1]
        for n in ("node1", "node2", "node3")
    }
    assert len(keys) == 3


def test_lifecycle_up_again_leftovers_and_down(tmp_path):
    inventory = tmp_path / "lc.yaml"
    mpicluster("local", "down", "--name", NAME, check=False)
    start_local_cluster(NAME, 2, SUBNET, inventory)
    first_ids = sorted(our_containers())
    assert len(first_ids) == 2

    # A second up is quick: no image build, the same containers, the same inventory.
    text = inventory.read_text()
    again = mpicluster(
        "local",
        "up",
        "--name",
        NAME,
        "--count",
        "2",
        "--subnet",
        SUBNET,
        "--inventory",
        str(inventory),
    )
    assert "Building node image" not in again.stderr
    assert sorted(our_containers()) == first_ids
    assert inventory.read_text() == text

    # Leftovers: Vagrant's state wiped while the containers still run (a killed run, a
    # deleted state folder). A new up must clear them and come up, not collide on addresses.
    spec = LocalSpec.saved(NAME)
    assert spec is not None
    shutil.rmtree(spec.dotfile_path)
    rebuilt = mpicluster(
        "local",
        "up",
        "--name",
        NAME,
        "--count",
        "2",
        "--subnet",
        SUBNET,
        "--inventory",
        str(inventory),
    )
    assert "left by an earlier run" in rebuilt.stderr
    new_ids = sorted(our_containers())
    assert len(new_ids) == 2 and not set(new_ids) & set(first_ids)
    status = mpicluster("local", "status", "--name", NAME)
    assert status.stdout.count("reachable") == 2 and "unreachable" not in status.stdout

    # Down leaves no containers, network or Vagrant state behind.
    mpicluster("local", "down", "--name", NAME)
    assert our_containers() == []
    networks = json.loads(podman("network", "ls", "--format", "json"))
    assert NETWORK not in {n["name"] for n in networks}
    assert not local_dir(NAME).exists()
    # ... and says so when there is nothing to show.
    gone = mpicluster("local", "status", "--name", NAME, check=False)
    assert gone.returncode == 2 and "no local cluster named" in gone.stderr


def test_local_up_refuses_bad_options():
    done = mpicluster("local", "up", "--name", NAME, "--subnet", "300.1.2.0/24", check=False)
    assert done.returncode == 2
    assert done.stderr.strip().startswith("error: --subnet '300.1.2.0/24': not an IPv4 network")
    assert "Traceback" not in done.stderr
