"""A newer mpicluster takes over a cluster an older one made: the previous release's `up`
provisions a local cluster, this release's `up` runs on it, and `down` of this release
gives every node back as it was before either.

The previous release is the tree of PREVIOUS (the last landed release of mpicluster),
taken from this clone's history with `git archive` and run with this venv's Python (the
two releases need the same libraries). On its own marker: a cluster of its own and two
full `up`s (112 s on 2 cores, 2026-11-29), run before a release.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.cluster.nodes import podman_exec
from tests.conftest import REPO, inventory_with, mpicluster, start_local_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.on_demand, pytest.mark.upgrade]

#: The previous release: the last commit of mpicluster that landed before this one.
PREVIOUS = "f523c34f3f02d7a4e841916b59aaa940a27f40e5"
NAME, SUBNET = "pytest-upgrade", "192.168.77.0/24"
NODES = ["node1", "node2"]
#: What up manages on a node, read as root: a node's files before, between and after.
FILES = (
    "cat /etc/environment /etc/hosts; ls -la /etc/mpicluster 2>&1; "
    "cat /home/vagrant/.ssh/authorized_keys"
)


@pytest.fixture(scope="module")
def previous(tmp_path_factory) -> Path:
    """The previous release's tree (`git archive` of PREVIOUS)."""
    found = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", PREVIOUS],
        capture_output=True,
        check=False,
    )
    assert found.returncode == 0, (
        f"this clone lacks the previous release {PREVIOUS[:12]} (a shallow clone?): "
        f"{found.stderr.decode()[-500:]}"
    )
    tree = tmp_path_factory.mktemp("previous")
    with tarfile.open(fileobj=io.BytesIO(found.stdout)) as archive:
        archive.extractall(tree, filter="data")
    return tree


def old_mpicluster(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The previous release's mpicluster, as its user ran it."""
    return subprocess.run(
        [sys.executable, "-m", "mpicluster", *args],
        capture_output=True,
        text=True,
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree)},
        timeout=1800,
        check=False,
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    generated = tmp_path_factory.mktemp("upgrade") / "generated.yaml"
    mpicluster("local", "down", "--name", NAME, check=False)  # leftovers of a killed run
    started = start_local_cluster(NAME, len(NODES), SUBNET, generated)
    yield started
    mpicluster("local", "down", "--name", NAME, check=False)


def test_this_release_takes_over_the_previous_releases_cluster(cluster, previous):
    inventory = inventory_with(
        cluster.inventory, cluster.inventory.parent / "packages.yaml", stack={"install": "packages"}
    )
    before = {node: podman_exec(cluster, node, FILES).stdout for node in NODES}

    old = old_mpicluster(previous, "up", str(inventory), "--json")
    assert old.returncode == 0, old.stderr[-3000:]
    assert json.loads(old.stdout)["smoke"]["ok"]

    # this release's up: its code differs, so every task runs once, and the cluster passes
    new = mpicluster("up", str(inventory), "--json")
    result = json.loads(new.stdout)
    assert result["path"] == "full", result["why"]
    # what the record names first: the new playbooks, or what they write (the new health
    # check, the paths of the new release's files)
    assert result["why"] in (
        "mpicluster (its playbooks or the programs they install) changed since the last up",
        "the inventory (what up writes on the nodes) changed since the last up",
    ), result["why"]
    assert result["smoke"]["ok"], result["smoke"]
    for node in NODES:
        environment = podman_exec(cluster, node, "cat /etc/environment").stdout
        assert environment.count("# BEGIN mpicluster") == 1, environment  # one block, not two
        assert 'PRTE_MCA_odls_base_max_threads="0"' in environment

    # then it is this release's cluster: a second up changes nothing
    again = json.loads(mpicluster("up", str(inventory), "--json", "--no-smoke").stdout)
    assert again["path"] == "unchanged", again["why"]
    doctor = mpicluster("doctor", str(inventory), "--json", check=False)
    assert doctor.returncode == 0, doctor.stdout[-3000:]

    # down of this release takes back what both ups added: the journal the previous
    # release wrote before its first change is the one that counts
    mpicluster("down", str(inventory), "--yes")
    after = {node: podman_exec(cluster, node, FILES).stdout for node in NODES}
    assert after == before
