"""More than one Debian: a local cluster whose nodes run Debian 12 (bookworm) and 13
(trixie), each from its own image. With Debian's own Open MPI on each (4.1.4 and 5.0.7:
two MPI builds that cannot make one world) the smoke test's allreduce fails and says so,
and doctor's versions check names both.
"""

from __future__ import annotations

import json

import pytest

from tests.cluster.nodes import podman_exec
from tests.conftest import inventory_with, mpicluster, start_local_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.on_demand, pytest.mark.releases]

NAME, SUBNET = "pytest-releases", "192.168.73.0/24"
RELEASES = ["bookworm", "trixie", "trixie"]
NODES = ["node1", "node2", "node3"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    generated = tmp_path_factory.mktemp("releases") / "generated.yaml"
    mpicluster("local", "down", "--name", NAME, check=False)  # leftovers of a killed run
    started = start_local_cluster(
        NAME, len(RELEASES), SUBNET, generated, "--release", ",".join(RELEASES)
    )
    yield started
    mpicluster("local", "down", "--name", NAME, check=False)


def test_each_node_runs_the_release_it_was_given(cluster):
    facts = {
        node: podman_exec(
            cluster, node, ". /etc/os-release; echo $VERSION_CODENAME; python3 -V"
        ).stdout.split()
        for node in NODES
    }
    assert facts["node1"][0] == "bookworm" and facts["node1"][2].startswith("3.11."), facts
    assert facts["node2"][0] == "trixie" and facts["node2"][2].startswith("3.13."), facts
    # a node keeps its release: asking for another is refused, nothing is changed
    done = mpicluster(
        "local", "up", "--name", NAME, "--nodes", "3", "--subnet", SUBNET,
        "--release", "trixie", "--inventory", str(cluster.inventory), check=False,
    )  # fmt: skip
    assert done.returncode == 2 and "node1 runs bookworm, not trixie" in done.stderr, done.stderr


def test_up_and_doctor_name_two_mpi_builds_across_the_two_releases(cluster):
    inventory = inventory_with(
        cluster.inventory, cluster.inventory.parent / "packages.yaml", stack={"install": "packages"}
    )
    done = mpicluster("up", str(inventory), check=False)
    assert done.returncode != 0, done.stderr[-3000:]  # the smoke test's allreduce
    assert "Traceback" not in done.stderr
    mixed = (
        "the nodes run different MPI builds (node1: Open MPI 4.1.4; node2, node3: Open MPI 5.0.7)"
    )
    assert mixed in done.stderr, done.stderr[-3000:]
    doctor = mpicluster("doctor", str(inventory), "--json", check=False)
    assert doctor.returncode == 2, doctor.stderr[-3000:]
    (versions,) = [c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "versions"]
    failed = [r for r in versions["results"] if r["status"] == "fail"]
    text = json.dumps(failed)
    assert failed and "Open MPI 4.1.4" in text and "Open MPI 5.0.7" in text, versions
