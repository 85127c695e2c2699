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
"""

from __future__ import annotations

import json
import os

import pytest

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


def test_doctor_reads_ucx_from_the_built_open_mpi(ucx_cluster):
    code, report = doctor(ucx_cluster["inventory"])
    assert (code, problems(report)) == (0, set()), json.dumps(report, indent=1)[-4000:]
    fabric = next(c for c in report["checks"] if c["name"] == "fabric")
    assert all("pml:ucx" in r["evidence"] for r in fabric["results"]), fabric
