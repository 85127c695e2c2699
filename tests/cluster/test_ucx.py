"""UCX without CUDA in the from-source stack (on demand: `pytest -m ucx`, a build of its
own; `pytest -m cuda_build` builds UCX with CUDA, and UCC, and runs the same checks).

A 3-node cluster (no CUDA, no RDMA device) whose stack has the lockfile's UCX from its
tag archive (../shared/sources), its configure made on this machine and shipped with the
tree (sources.autogen: control), or the release MPICLUSTER_UCX_VERSION names, and Open
MPI 5.0.7 configured
--with-ucx against it; Horovod and PyTorch off, to keep the build short. Without
InfiniBand, Open MPI's pml ucx declines by itself (its default transport and device
lists name only RDMA ones): the test forces it, with UCX over its TCP transport, and
runs the smoke test's allreduce with it and with Open MPI's own ob1/btl tcp, both
exact, both rates printed. Doctor's fabric check reads UCX's components from the
built Open MPI.

Then, on the same cluster, a site's own UCX (stack.ucx.prefix, issue 54) with Debian's
libucx-dev in /usr standing in for DOCA's: `up` first refuses a prefix no node has
(exit 2, one line, nothing changed), then builds Open MPI against /usr's UCX with
nothing of UCX in the stack, and the allreduce runs over pml ucx with it.
"""

from __future__ import annotations

import json
import os
import re

import pytest
import yaml

from mpicluster.cluster.state import cluster_dir
from tests.cluster.conftest import PREFIX
from tests.cluster.fabric_runs import check_ucx, ucx_and_ob1_rates
from tests.cluster.test_doctor import doctor, problems
from tests.conftest import inventory_with, mpicluster, start_local_cluster
from tests.seed import debian_orig, seed_cache, seed_shared

pytestmark = [pytest.mark.cluster, pytest.mark.on_demand, pytest.mark.ucx]

NAME, SUBNET = "pytest-ucx", "192.168.69.0/24"
#: An artifact cache kept from an earlier run (the build is ~20 minutes on 2 cores):
#: `up` installs its pack, whose fingerprint still covers UCX, Open MPI and the recipe.
ARTIFACTS = os.environ.get("MPICLUSTER_UCX_ARTIFACTS")
#: Another pinned release to build (1.13.1 comes from Debian's copy of its tree).
VERSION = os.environ.get("MPICLUSTER_UCX_VERSION")


def ucx_source(cache) -> dict:
    """The inventory's stack.ucx: the default from ../shared/sources, or VERSION."""
    if VERSION == "1.13.1":
        return {"enabled": True, **debian_orig("ucx", VERSION)}
    seed_shared(cache, ("ucx",))
    return {"enabled": True} | ({"version": VERSION} if VERSION else {})


@pytest.fixture(scope="module")
def ucx_cluster(tmp_path_factory):
    work = tmp_path_factory.mktemp("ucx")
    cache = work / "sources"
    openmpi = seed_cache(cache, "5.0.7")
    generated = work / "generated.yaml"
    mpicluster("local", "down", "--name", NAME, check=False)
    cluster = start_local_cluster(NAME, 3, SUBNET, generated)
    inventory = inventory_with(
        generated,
        work / "ucx.yaml",
        stack={
            "install": "source",
            "openmpi": openmpi,
            "ucx": ucx_source(cache),
            "horovod": {"enabled": False},
            "pytorch": {"enabled": False},
        },
        # UCX's configure made here and shipped with its tree (the CUDA build's builder
        # runs autogen.sh itself)
        sources={
            "cache": str(cache),
            "artifacts": str(ARTIFACTS or work / "artifacts"),
            "autogen": "control",
        },
    )
    done = mpicluster("up", str(inventory), check=False, timeout=3600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-4000:]
    yield {"cluster": cluster, "inventory": inventory}
    mpicluster("local", "down", "--name", NAME, check=False)


def test_open_mpi_is_built_with_the_stacks_ucx_without_cuda(ucx_cluster):
    check_ucx(ucx_cluster["cluster"], cuda=False, version_wanted=VERSION)


def test_the_allreduce_runs_over_ucx_and_over_ob1(ucx_cluster):
    ucx_and_ob1_rates(ucx_cluster["cluster"], ucx_cluster["inventory"], SUBNET)


def doctor_finds_pml_ucx(inventory) -> None:
    """doctor passes, and its fabric check reads pml ucx from every node's Open MPI."""
    code, report = doctor(inventory)
    assert (code, problems(report)) == (0, set()), json.dumps(report, indent=1)[-4000:]
    fabric = next(c for c in report["checks"] if c["name"] == "fabric")
    assert all("pml:ucx" in r["evidence"] for r in fabric["results"]), fabric


def test_doctor_reads_ucx_from_the_built_open_mpi(ucx_cluster):
    doctor_finds_pml_ucx(ucx_cluster["inventory"])


# --- a site's own UCX: Debian's libucx-dev in /usr, as DOCA's would be -----------------

NODES = ("node1", "node2", "node3")
#: What `up` changes on a node: the active stack, the environment block, its record.
SNAPSHOT = (
    f"readlink {PREFIX}/current; sha256sum /etc/environment /etc/mpicluster/applied.json "
    "2>/dev/null; true"
)
#: Where Debian's libucx0 puts libucp (its multiarch folder).
DEBIAN_LIBUCP = "/usr/lib/x86_64-linux-gnu/libucp.so.0"


def with_site_ucx(inventory, prefix: str, name: str):
    """A copy of the cluster's inventory whose stack.ucx names a site's UCX (and nothing
    else: no version, url or sha256 of a UCX to build)."""
    data = yaml.safe_load(inventory.read_text())
    data["stack"]["ucx"] = {"prefix": prefix}
    target = inventory.with_name(name)
    target.write_text(yaml.safe_dump(data, sort_keys=False))
    return target


def test_a_site_ucx_no_node_has_stops_up_before_any_change(ucx_cluster):
    cluster = ucx_cluster["cluster"]
    missing = with_site_ucx(ucx_cluster["inventory"], "/opt/no-such-ucx", "no-such-ucx.yaml")
    runs = cluster_dir(NAME) / "runs"
    runs_before = sorted(runs.iterdir())
    before = {node: cluster.ssh(node, SNAPSHOT).stdout for node in NODES}
    done = mpicluster("up", str(missing), check=False, timeout=600)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [
        "error: stack.ucx.prefix: node1 has no /opt/no-such-ucx/lib/libucp.so* (and 2 more "
        "node(s)): install the site's UCX there on every node, or remove stack.ucx.prefix "
        "to build UCX"
    ], done.stderr
    assert sorted(runs.iterdir()) == runs_before  # no playbook ran
    assert {node: cluster.ssh(node, SNAPSHOT).stdout for node in NODES} == before


@pytest.fixture(scope="module")
def site_ucx(ucx_cluster):
    """The cluster's stack built again, against Debian's UCX in /usr on every node."""
    cluster = ucx_cluster["cluster"]
    for node in NODES:
        cluster.ssh(
            node,
            "sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y "
            "--no-install-recommends libucx-dev >/dev/null",
        )
    inventory = with_site_ucx(ucx_cluster["inventory"], "/usr", "site-ucx.yaml")
    done = mpicluster("up", str(inventory), check=False, timeout=3600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-4000:]
    assert "Open MPI built against the site's UCX in /usr" in done.stdout + done.stderr
    return {"cluster": cluster, "inventory": inventory}


def test_open_mpi_is_built_against_the_sites_ucx_and_the_stack_has_none(site_ucx):
    cluster = site_ucx["cluster"]
    for node in NODES:
        info = cluster.ssh(node, f"{PREFIX}/current/bin/ompi_info --parsable").stdout
        assert "mca:pml:ucx:version:" in info and "mca:osc:ucx:version:" in info, node
    # pml ucx (in libmpi with Open MPI 5; a DSO of its own with 4.1) loads /usr's libucp
    linked = cluster.ssh(
        "node1",
        f"ldd {PREFIX}/current/lib/libmpi.so; "
        f"for f in {PREFIX}/current/lib/openmpi/mca_pml_ucx.so; do [ -e $f ] && ldd $f; done; "
        "true",
    ).stdout
    # the loader may name it by /lib, the same folder on a merged-/usr Debian
    where = DEBIAN_LIBUCP.removeprefix("/usr")
    assert re.search(rf"libucp\.so\.0 => (/usr)?{where} ", linked), linked
    # nothing of UCX was built into the stack
    found = cluster.ssh(
        "node2", f"find {PREFIX}/current/ -name 'libucp*' -o -name ucx_info -o -name 'ucx.pc'"
    ).stdout
    assert found.strip() == "", found
    record = json.loads(cluster.ssh("node3", f"cat {PREFIX}/current/FINGERPRINT.json").stdout)
    assert record["inputs"]["options"]["ucx"] == {"prefix": "/usr"}
    assert "ucx" not in record["inputs"]["sources"] and "ucx" not in record["versions"]
    # /usr's libraries need no line of their own: the block names the stack's alone
    block = cluster.ssh("node1", "grep '^LD_LIBRARY_PATH=' /etc/environment").stdout
    assert block.strip() == f'LD_LIBRARY_PATH="{PREFIX}/current/lib"', block


def test_the_allreduce_runs_over_the_sites_ucx(site_ucx):
    ucx_and_ob1_rates(site_ucx["cluster"], site_ucx["inventory"], SUBNET)


def test_doctor_reads_pml_ucx_from_the_open_mpi_built_against_the_sites_ucx(site_ucx):
    doctor_finds_pml_ucx(site_ucx["inventory"])
