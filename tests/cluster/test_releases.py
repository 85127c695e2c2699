"""More than one Debian: a local cluster whose nodes run Debian 12 (bookworm) and 13
(trixie), each from its own image. With Debian's own Open MPI on each (4.1.4 and 5.0.7:
two MPI builds that cannot make one world) the smoke test's allreduce fails and says so,
and doctor's versions check names both. With the whole source stack, the same Open MPI,
mpi4py, PyTorch and Horovod are built once per release (two fingerprints, each on one
node, relayed to the others of its release) and make one MPI world across both. And
Slurm on Debian 13 nodes alone (Slurm 24.11; one Slurm release per cluster): up, its
smoke test and `run` through srun, the package names chosen by the node's own apt
(libpmix2 is libpmix2t64 there), and `down`.
"""

from __future__ import annotations

import base64
import json
import re
import shlex

import pytest

from mpicluster.util.paths import data_path
from tests.cluster.nodes import podman_exec
from tests.conftest import inventory_with, mpicluster, start_local_cluster
from tests.seed import seed_cache

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
        "local", "up", "--name", NAME, "--count", "3", "--subnet", SUBNET,
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
    assert doctor.returncode == 5, doctor.stderr[-3000:]  # a check failed
    (versions,) = [c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "versions"]
    failed = [r for r in versions["results"] if r["status"] == "fail"]
    text = json.dumps(failed)
    assert failed and "Open MPI 4.1.4" in text and "Open MPI 5.0.7" in text, versions


def test_slurm_across_the_two_releases_is_refused_before_any_change(cluster):
    inventory = inventory_with(
        cluster.inventory,
        cluster.inventory.parent / "mixed-slurm.yaml",
        stack={"install": "packages"},
        scheduler={"type": "slurm"},
    )
    environment = podman_exec(cluster, "node2", "sha256sum /etc/environment").stdout
    done = mpicluster("up", str(inventory), check=False)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert "run 2 releases (node1: debian 12; node2, node3: debian 13)" in last, last
    assert last.endswith("nothing was changed on any node"), last
    assert podman_exec(cluster, "node2", "sha256sum /etc/environment").stdout == environment


@pytest.fixture(scope="module")
def source(cluster, tmp_path_factory):
    """The whole source stack (Open MPI 5.0.7, mpi4py, PyTorch, Horovod) built on the
    mixed cluster: `up`'s run and the inventory. Debian 13's GCC 14 and Python 3.13 need
    mpicluster's Horovod patch; its PyTorch is PyPI's CUDA build (no CPU one for cp313)."""
    work = tmp_path_factory.mktemp("releases-source")
    openmpi = seed_cache(work / "sources", "5.0.7")
    inventory = inventory_with(
        cluster.inventory,
        work / "source.yaml",
        stack={"install": "source", "openmpi": openmpi},
        sources={"cache": str(work / "sources"), "artifacts": str(work / "artifacts")},
    )
    done = mpicluster("up", str(inventory), check=False, timeout=3600)
    return {"up": done, "inventory": inventory}


#: Every rank: the world's sum, its neighbour's rank passed round the ring, its Python and
#: its MPI library.
WORLD = (
    "import sys; from mpi4py import MPI; c = MPI.COMM_WORLD; n = c.size; "
    "left = c.sendrecv(c.rank, dest=(c.rank + 1) % n, source=(c.rank - 1) % n); "
    "print('world', c.rank, c.allreduce(c.rank + 1), left, c.bcast('from 0', root=0), "
    "sys.version.split()[0], MPI.Get_library_version().split(',')[0])"
)


def test_the_source_stack_is_built_once_per_release_and_makes_one_world(source):
    done = source["up"]
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-4000:]
    built = re.findall(r"Stack (\w+) \((debian-1[23]), x86_64\): build on (node\d)\b", done.stderr)
    assert sorted((release, node) for _, release, node in built) == [
        ("debian-12", "node1"),
        ("debian-13", "node2"),
    ], done.stderr[-4000:]
    assert len({fingerprint for fingerprint, _, _ in built}) == 2
    # node3 (trixie) gets node2's build, not a third one
    relayed = re.search(r"Stack \w+ \(debian-13, x86_64\): .*node3", done.stderr)
    assert relayed, done.stderr[-4000:]

    job = mpicluster("run", str(source["inventory"]), "--", "python", "-c", WORLD, check=False)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    lines = sorted(
        line.split()[1:] for line in job.stdout.splitlines() if line.startswith("world ")
    )
    assert [line[:4] for line in lines] == [
        ["0", "6", "2", "from"],
        ["1", "6", "0", "from"],
        ["2", "6", "1", "from"],
    ], job.stdout
    pythons = [line[5] for line in lines]
    assert pythons[0].startswith("3.11.") and pythons[1].startswith("3.13."), lines
    assert all(" ".join(line[6:]) == "Open MPI v5.0.7" for line in lines), lines


#: Every rank: Horovod's sum over the world (PyTorch tensors through its MPI), its
#: PyTorch and its Python.
HOROVOD = (
    "import sys, torch, horovod.torch as hvd; hvd.init(); "
    "total = hvd.allreduce(torch.tensor([hvd.rank() + 1.0]), op=hvd.Sum); "
    "print('hvd', hvd.rank(), hvd.size(), int(total.item()), torch.__version__, "
    "sys.version.split()[0])"
)


def test_horovod_is_built_on_both_releases_and_sums_across_them(source):
    done = source["up"]
    assert done.returncode == 0, done.stderr[-4000:]
    # Debian 13's PyTorch is PyPI's CUDA build on nodes without GPUs: the plan says so
    assert re.search(
        r"Stack \w+: PyTorch 2\.13\.0 is a CUDA build, on nodes without GPUs", done.stderr
    )
    job = mpicluster("run", str(source["inventory"]), "--", "python", "-c", HOROVOD, check=False)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    lines = sorted(line.split()[1:] for line in job.stdout.splitlines() if line.startswith("hvd "))
    assert [line[:3] for line in lines] == [["0", "3", "6"], ["1", "3", "6"], ["2", "3", "6"]], (
        lines
    )
    assert lines[0][3] == "2.13.0+cpu" and lines[0][4].startswith("3.11."), lines
    for line in lines[1:]:  # PyPI's build for Python 3.13 (no +cpu one there)
        assert line[3].startswith("2.13.0") and line[4].startswith("3.13."), lines


def test_doctor_finds_the_same_mpi_on_two_releases_fine(source):
    assert source["up"].returncode == 0
    doctor = mpicluster(
        "doctor", str(source["inventory"]), "--check", "versions", "--json", check=False
    )
    assert doctor.returncode == 0, doctor.stdout[-3000:] + doctor.stderr[-3000:]
    (versions,) = [c for c in json.loads(doctor.stdout)["checks"] if c["name"] == "versions"]
    assert {r["status"] for r in versions["results"]} == {"pass"}, versions
    assert "mixes 2 releases" in json.dumps(versions), versions


def test_a_second_up_changes_nothing_on_either_release(source):
    again = mpicluster("up", str(source["inventory"]), check=False, timeout=1800)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-4000:]
    for release, nodes in (("debian-12", "node1"), ("debian-13", "node2, node3")):
        assert f"({release}, x86_64): already active on {nodes}" in again.stderr, again.stderr
    assert "unchanged since the last up" in again.stdout + again.stderr, again.stdout


TRIXIE, TRIXIE_SUBNET = "pytest-trixie-slurm", "192.168.76.0/24"


@pytest.fixture(scope="module")
def trixie_slurm(tmp_path_factory):
    generated = tmp_path_factory.mktemp("trixie-slurm") / "generated.yaml"
    mpicluster("local", "down", "--name", TRIXIE, check=False)
    started = start_local_cluster(TRIXIE, 2, TRIXIE_SUBNET, generated, "--release", "trixie")
    inventory = inventory_with(
        generated,
        generated.parent / "slurm.yaml",
        stack={"install": "packages"},
        scheduler={"type": "slurm", "default_time": "30:00"},
    )
    yield started, inventory
    mpicluster("local", "down", "--name", TRIXIE, check=False)


#: mpicluster_packages' own choice of names, made by a node's python3 with its apt.
APT_NAMES = (
    "import sys; space = {'__name__': 'probe'}; "
    "exec(open(sys.argv[1]).read(), space); print(' '.join(space['apt_names'](sys.argv[2:])))"
)


def test_slurm_runs_on_debian_13_and_packages_go_by_the_names_its_apt_offers(trixie_slurm):
    cluster, inventory = trixie_slurm
    done = mpicluster("up", str(inventory), "--json", check=False, timeout=1800)
    assert done.returncode == 0, done.stderr[-4000:]
    slurm = json.loads(done.stdout)["smoke"]["slurm"]
    assert slurm["ok"], slurm  # munge, ping, every node idle, srun, srun --mpi=pmix, sbatch
    job = mpicluster("run", str(inventory), "--", "python3", "-c", WORLD, check=False)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    sums = [line.split()[2] for line in job.stdout.splitlines() if line.startswith("world ")]
    assert sums == ["3", "3"], job.stdout
    # the module Slurm's packages are installed with, asked on a Debian 13 node: libpmix2
    # (what Debian 12's and Ubuntu 24.04's Slurm need beside Open MPI's) is libpmix2t64 here
    module = data_path("playbooks") / "library" / "mpicluster_packages.py"
    source = base64.b64encode(module.read_bytes()).decode()
    names = podman_exec(
        cluster,
        "node1",
        f"echo {source} | base64 -d > /tmp/packages.py && "
        f"python3 -c {shlex.quote(APT_NAMES)} /tmp/packages.py libpmix2 munge",
    )
    assert names.stdout.split() == ["libpmix2t64", "munge"], names
    down = mpicluster("down", str(inventory), check=False, timeout=900)
    assert down.returncode == 0, down.stderr[-3000:]
    status = "dpkg-query -W -f '${db:Status-Abbrev}' slurmd 2>/dev/null || true"
    for node in ("node1", "node2"):
        assert not podman_exec(cluster, node, status).stdout.startswith("ii"), node
