"""UCX in the from-source stack (on demand: `pytest -m ucx`, a build of its own).

A 3-node cluster (no CUDA, no RDMA device) whose stack has UCX 1.13.1 from Debian's copy
of its tree (autogen.sh, then UCX's release configure) and Open MPI 5.0.7 configured
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
import sys

import pytest

from tests.cluster.test_doctor import doctor, problems
from tests.conftest import inventory_with, mpicluster, start_local_cluster
from tests.seed import debian_orig, seed_cache

pytestmark = [pytest.mark.cluster, pytest.mark.on_demand, pytest.mark.ucx]

NAME, SUBNET = "pytest-ucx", "192.168.69.0/24"
#: An artifact cache kept from an earlier run (the build is ~20 minutes on 2 cores):
#: `up` installs its pack, whose fingerprint still covers UCX, Open MPI and the recipe.
ARTIFACTS = os.environ.get("MPICLUSTER_UCX_ARTIFACTS")
ALLREDUCE = "/etc/mpicluster/smoke/allreduce.py"
#: 1 MiB and 64 MiB of doubles.
SIZES = ("131072", "8388608")


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
            "ucx": {"enabled": True, **debian_orig("ucx", "1.13.1")},
            "horovod": {"enabled": False},
            "pytorch": {"enabled": False},
        },
        sources={"cache": str(cache), "artifacts": str(ARTIFACTS or work / "artifacts")},
    )
    done = mpicluster("up", str(inventory), check=False, timeout=3600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-4000:]
    yield {"cluster": cluster, "inventory": inventory}
    mpicluster("local", "down", "--name", NAME, check=False)


def allreduce(inventory, *env: str) -> tuple[dict, str]:
    """The smoke test's allreduce, one rank per node, with `env` set on every rank."""
    pairs = [arg for item in env for arg in ("--env", item)]
    done = mpicluster(
        "run",
        str(inventory),
        "--per-node",
        "1",
        *pairs,
        "--env",
        "OMPI_MCA_pml_base_verbose=10",
        "--",
        "python",
        ALLREDUCE,
        *SIZES,
        check=False,
        timeout=600,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    report = json.loads(next(x for x in reversed(done.stdout.splitlines()) if x.startswith("{")))
    return report, output


def test_open_mpi_is_built_with_the_stacks_ucx(ucx_cluster):
    cluster = ucx_cluster["cluster"]
    info = cluster.ssh("node2", "/opt/mpicluster/current/bin/ompi_info --parsable").stdout
    assert "mca:pml:ucx:version:" in info and "mca:osc:ucx:version:" in info
    version = cluster.ssh("node3", "/opt/mpicluster/current/bin/ucx_info -v").stdout
    assert "Version 1.13.1" in version, version
    # UCX's TCP transport is there beside the RDMA ones built against rdma-core's headers
    devices = cluster.ssh("node1", "/opt/mpicluster/current/bin/ucx_info -d").stdout
    assert "Transport: tcp" in devices, devices[-2000:]


def test_the_allreduce_runs_over_ucx_and_over_ob1(ucx_cluster):
    cluster, inventory = ucx_cluster["cluster"], ucx_cluster["inventory"]
    address = SUBNET.rsplit(".", 1)[0] + "."
    found = cluster.ssh("node1", f"ip -o -4 addr show | awk '$4 ~ /^{address}/ {{print $2}}'")
    interface = found.stdout.split()[0]
    # pml ucx forced (it declines without an RDMA device), UCX over its TCP transport
    over_ucx, said_ucx = allreduce(
        inventory,
        "OMPI_MCA_pml=ucx",
        "OMPI_MCA_pml_ucx_tls=any",
        "OMPI_MCA_pml_ucx_devices=any",
        "UCX_TLS=tcp,self",
        f"UCX_NET_DEVICES={interface}",
    )
    over_ob1, said_ob1 = allreduce(inventory, "OMPI_MCA_pml=ob1", "OMPI_MCA_btl=tcp,self")
    assert "select: component ucx selected" in said_ucx, said_ucx[-3000:]
    assert "select: component ob1 selected" in said_ob1, said_ob1[-3000:]
    rates = {}
    for name, report in (("ucx", over_ucx), ("ob1", over_ob1)):
        assert report["ranks"] == 3 and all(r["exact"] for r in report["results"]), report
        rates[name] = {r["bytes"]: round(r["busbw_gbs"], 3) for r in report["results"]}
    # the bus bandwidth in GB/s by message bytes (shown with -rP)
    sys.stdout.write(f"allreduce busbw GB/s by bytes, 3 nodes: {json.dumps(rates)}\n")


def test_doctor_reads_ucx_from_the_built_open_mpi(ucx_cluster):
    code, report = doctor(ucx_cluster["inventory"])
    assert (code, problems(report)) == (0, set()), json.dumps(report, indent=1)[-4000:]
    fabric = next(c for c in report["checks"] if c["name"] == "fabric")
    assert all("pml:ucx" in r["evidence"] for r in fabric["results"]), fabric
