"""MPI allreduce between 2 nodes against what their link carries (`iperf3 --bidir`).

Brings up the local cluster `bench-net` (2 Podman nodes, 192.168.78.0/24), provisions it
with `mpicluster up` (install: packages: Debian's Open MPI; the TCP transport settings
are the same in the from-source 5.x), installs iperf3 on both nodes from Debian's
archive, then, in one run:

  - `iperf3 -c node2 --bidir` from node1: the rate each way when both ways are busy,
    which is what an allreduce does (every rank sends and receives at once);
  - a 64 MiB allreduce (8388608 doubles, mpi4py, the smoke test's program) on 2 ranks,
    one per node, started from node1 with mpirun and the environment `up` wrote, once
    with that environment alone and once per candidate setting of Open MPI's TCP
    transport (buffers, links, fragment sizes, the allreduce algorithm), and UCX's TCP
    transport where the node's Open MPI has the ucx PML (Debian's has).

Each cell is the median of --repeat runs. Prints busbw (GB/s; for 2 ranks busbw equals
algbw: each rank sends and receives the whole buffer's worth once) and its ratio to the
iperf3 rate each way (the issue's goal: >= 0.5). Tears the cluster down unless --keep.

    .venv/bin/python benchmarks/allreduce_vs_iperf.py [--repeat 3] [--keep] [--no-up] [--source]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mpicluster.cluster.plan import ClusterPlan  # noqa: E402
from tests.conftest import LocalCluster, inventory_with, mpicluster  # noqa: E402

NAME, SUBNET = "bench-net", "192.168.78.0/24"
ELEMENTS = 8388608  # 64 MiB of doubles
SMOKE = "/etc/mpicluster/smoke/allreduce.py"

BUFFERS = ["--mca", "btl_tcp_sndbuf", "4194304", "--mca", "btl_tcp_rcvbuf", "4194304"]


def allreduce_algorithm(number: int) -> list[str]:
    """Open MPI's tuned allreduce forced to one algorithm (3: recursive doubling, 4: ring)."""
    return [
        "--mca", "coll_tuned_use_dynamic_rules", "1",
        "--mca", "coll_tuned_allreduce_algorithm", str(number),
    ]  # fmt: skip


RING = allreduce_algorithm(4)

#: (label, mpirun options): the settings tried on top of the environment `up` writes.
VARIANTS = [
    ("as up writes it", []),
    ("btl_tcp_sndbuf/rcvbuf 4 MiB", BUFFERS),
    ("btl_tcp_links 2", ["--mca", "btl_tcp_links", "2"]),
    ("btl_tcp_links 4", ["--mca", "btl_tcp_links", "4"]),
    ("btl_tcp_max_send_size 1 MiB", ["--mca", "btl_tcp_max_send_size", "1048576"]),
    ("allreduce: ring", RING),
    ("buffers 4 MiB + links 2", [*BUFFERS, "--mca", "btl_tcp_links", "2"]),
    ("buffers 4 MiB + ring", [*BUFFERS, *RING]),
    ("buffers 4 MiB + links 2 + ring", [*BUFFERS, "--mca", "btl_tcp_links", "2", *RING]),
    ("allreduce: recursive doubling", allreduce_algorithm(3)),
    ("allreduce: segmented ring", allreduce_algorithm(5)),
    ("allreduce: rabenseifner", allreduce_algorithm(6)),
    ("btl_tcp_eager_limit 1 MiB", ["--mca", "btl_tcp_eager_limit", "1048576"]),
]

#: UCX's TCP transport instead of Open MPI's own (the from-source stack has UCX, and so has
#: Debian's Open MPI; its PML is only chosen by itself where there is RDMA, so it is asked
#: for). Tried wherever the node's Open MPI lists the ucx PML.
UCX = ["--mca", "pml", "ucx", "--mca", "pml_ucx_tls", "any", "--mca", "pml_ucx_devices", "any"]
UCX_TCP = [*UCX, "-x", "UCX_TLS=tcp,self,sm"]
SEGMENTS = ["-x", "UCX_TCP_TX_SEG_SIZE=4m", "-x", "UCX_TCP_RX_SEG_SIZE=4m"]
UCX_VARIANTS = [
    ("pml ucx, UCX_TLS=tcp", UCX_TCP),
    ("pml ucx, tcp, 4 MiB segments", [*UCX_TCP, *SEGMENTS]),
    ("pml ucx, tcp, ring", [*UCX_TCP, *RING]),
]


def iperf_rate(cluster: LocalCluster, seconds: int) -> float:
    """GB/s each way (the lower of the two directions) with both ways busy."""
    cluster.ssh("node2", "iperf3 -s -1 -D")
    done = cluster.ssh("node1", f"iperf3 -c node2 --bidir -t {seconds} -J")
    end = json.loads(done.stdout)["end"]
    sent = end["sum_sent"]["bits_per_second"]
    received = end["sum_sent_bidir_reverse"]["bits_per_second"]
    return min(sent, received) / 8 / 1e9


def allreduce(cluster: LocalCluster, options: list[str], layout) -> float:
    """busbw (GB/s) of a 64 MiB allreduce on 2 ranks, one per node."""
    command = (
        f"{layout.mpi_bin}/mpirun -np 2 --host node1,node2 --mca btl tcp,self "
        + " ".join(options)
        + f" {layout.python} {SMOKE} {ELEMENTS}"
    )
    done = cluster.ssh("node1", command)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    (result,) = report["results"]
    assert result["exact"], report
    return result["busbw_gbs"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seconds", type=int, default=5, help="each iperf3 run")
    parser.add_argument("--keep", action="store_true", help="leave the cluster up")
    parser.add_argument("--no-up", action="store_true", help="use the cluster --keep left")
    parser.add_argument(
        "--source",
        action="store_true",
        help="the from-source stack (Open MPI 5 with UCX; the default caches, so a warm "
        "artifact cache installs it without a build)",
    )
    args = parser.parse_args()
    work = Path(tempfile.gettempdir()) / NAME
    work.mkdir(exist_ok=True)
    generated = work / "generated.yaml"
    cluster = LocalCluster(NAME, SUBNET, work / "packages.yaml")
    if not args.no_up:
        mpicluster("local", "down", "--name", NAME, check=False)
        mpicluster(
            "local", "up", "--name", NAME, "--count", "2", "--subnet", SUBNET,
            "--inventory", str(generated),
        )  # fmt: skip
        stack = {"install": "source"} if args.source else {"install": "packages"}
        inventory_with(generated, cluster.inventory, stack=stack)
        mpicluster("up", str(cluster.inventory), timeout=1800)
    elif not cluster.inventory.exists():
        raise SystemExit(f"--no-up: no cluster from an earlier --keep run ({cluster.inventory})")
    for node in ("node1", "node2"):
        cluster.ssh(
            node,
            "command -v iperf3 >/dev/null || "
            "sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iperf3 >/dev/null",
        )
    try:
        rates = [iperf_rate(cluster, args.seconds) for _ in range(args.repeat)]
        link = statistics.median(rates)
        print(f"iperf3 --bidir, each way: {link:.3f} GB/s (median of {len(rates)})")
        baseline = None
        layout = ClusterPlan.load(cluster.inventory).layout
        has_ucx = cluster.ssh(
            "node1", f"{layout.mpi_bin}/ompi_info --parsable | grep -c '^mca:pml:ucx:'", check=False
        ).stdout.strip() not in ("", "0")
        print(f"Open MPI's ucx PML: {'present' if has_ucx else 'absent (UCX rows skipped)'}")
        for label, options in VARIANTS + (UCX_VARIANTS if has_ucx else []):
            runs = [allreduce(cluster, options, layout) for _ in range(args.repeat)]
            busbw = statistics.median(runs)
            baseline = baseline or busbw
            print(
                f"allreduce 64 MiB, {label:32s} busbw {busbw:.3f} GB/s  "
                f"{busbw / link:.2f}x iperf3  {busbw / baseline:.2f}x as written"
            )
    finally:
        if not args.keep:
            mpicluster("local", "down", "--name", NAME, check=False)


if __name__ == "__main__":
    main()
