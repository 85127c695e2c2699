"""UCX in a built stack: what was built, checked on the nodes, and the smoke test's
allreduce forced over each of Open MPI's PMLs with `mpicluster run`:
pml ucx over UCX's TCP transport (without an RDMA device pml ucx declines by itself: its
default transport and device lists name only RDMA ones) and ob1 over Open MPI's own
btl tcp. Each must be exact; the bus bandwidth of both is printed (shown with -rP)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mpicluster.cluster.inventory import load_inventory
from mpicluster.cluster.lockfile import default_version
from mpicluster.smoke import ucx_info
from tests.cluster.conftest import PREFIX
from tests.conftest import mpicluster

ALLREDUCE = "/etc/mpicluster/smoke/allreduce.py"
#: 1 MiB and 64 MiB of doubles.
SIZES = ("131072", "8388608")


def allreduce(inventory: Path, *env: str) -> tuple[dict, str]:
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


def ucx_and_ob1_rates(cluster, inventory: Path, subnet: str) -> dict[str, dict[int, float]]:
    """Bus bandwidth in GB/s by message bytes over pml ucx (UCX over TCP) and over ob1."""
    address = subnet.rsplit(".", 1)[0] + "."
    found = cluster.ssh("node1", f"ip -o -4 addr show | awk '$4 ~ /^{address}/ {{print $2}}'")
    interface = found.stdout.split()[0]
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
    nodes = len(load_inventory(inventory).nodes)  # a node may have been added since
    rates = {}
    for name, report in (("ucx", over_ucx), ("ob1", over_ob1)):
        assert report["ranks"] == nodes and all(r["exact"] for r in report["results"]), report
        rates[name] = {r["bytes"]: round(r["busbw_gbs"], 3) for r in report["results"]}
    sys.stdout.write(f"allreduce busbw GB/s by bytes, {nodes} nodes: {json.dumps(rates)}\n")
    return rates


def check_ucx(cluster, *, cuda: bool, version_wanted: str | None = None) -> None:
    """The lockfile's UCX in the stack, Open MPI built with it (pml ucx, osc ucx); beside a
    CUDA-aware Open MPI, UCX's CUDA transports too, linked against stubs of libcuda and
    libnvidia-ml that stayed in the build folder (no driver here)."""
    for node in ("node1", "node2", "node3"):
        info = cluster.ssh(node, f"{PREFIX}/current/bin/ompi_info --parsable").stdout
        assert "mca:pml:ucx:version:" in info and "mca:osc:ucx:version:" in info, node
    version = cluster.ssh("node3", f"{PREFIX}/current/bin/ucx_info -v").stdout
    # "# Library version: 1.22.0" (1.20 on), "# Version 1.13.1" before
    said = ucx_info.parse(version)
    assert said and said["version"] == (version_wanted or default_version("ucx")), version
    assert ("--with-cuda=" in version) == cuda, version
    # UCX's TCP transport (what the allreduce over pml ucx runs on here) beside the
    # RDMA ones built against rdma-core's headers
    devices = cluster.ssh("node2", f"{PREFIX}/current/bin/ucx_info -d").stdout
    assert "Transport: tcp" in devices, devices[-2000:]
    modules = cluster.ssh("node2", f"ls {PREFIX}/current/lib/ucx").stdout.split()
    assert "libuct_ib.so" in modules, modules
    assert ("libuct_cuda.so" in modules) == cuda, modules
    stubs = cluster.ssh("node1", f"find {PREFIX} -name 'libnvidia-ml.so*' | head -1").stdout
    assert stubs.strip() == ""
    if cuda:
        check_ucc(cluster)


def check_ucc(cluster) -> None:
    """Beside UCX on GPU nodes: UCC with its CUDA executor and its CUDA and NCCL transport
    layers, Open MPI's coll/ucc built against it and on in the stack's MCA defaults."""
    for node in ("node1", "node3"):
        info = cluster.ssh(node, f"{PREFIX}/current/bin/ompi_info --parsable").stdout
        assert "mca:coll:ucc:version:" in info, node
    parts = cluster.ssh("node2", f"ls {PREFIX}/current/lib/ucc").stdout.split()
    for part in (
        "libucc_ec_cuda.so",
        "libucc_mc_cuda.so",
        "libucc_tl_cuda.so",
        "libucc_tl_nccl.so",
    ):
        assert part in parts, parts
    defaults = cluster.ssh("node2", f"cat {PREFIX}/current/etc/openmpi-mca-params.conf").stdout
    assert "coll_ucc_enable = 1" in defaults, defaults
