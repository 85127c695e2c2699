"""How a packed stack reaches N nodes: from the control machine to each node, against
the relay `up` uses (to the first node, then node to node: a chain and a binary tree).

Brings up the local cluster `bench-relay` (N Podman nodes, 192.168.61.0/24), provisions
it with `mpicluster up` (install: packages; the cluster's ssh mesh is what the relay
travels over), makes a file of --mib MiB of random bytes (the from-source CUDA stack
packs to about 313 MB) and, in one run and interleaved, --repeat times:

  - star: `scp` from the control machine to every node at once (what a copy from the
    control machine to each node does);
  - chain and tree: `scp` to the first node, then mpicluster/remote/relay.py on it with
    the plan `up` would make (distribute.tree, fan-out 1 and 2).

For each it prints the wall time until every node has a whole copy (sha256 checked on
each) and the bytes the control machine sent (the tx counter of the cluster network's
bridge on this machine: node-to-node traffic is switched by the bridge and never
counted there). Tears the cluster down unless --keep.

On this machine every node shares the same 2 cores, so the times say more about ssh's
encryption than about a network; the bytes are what the issue asks about.

    .venv/bin/python benchmarks/stack_relay.py [--nodes 16] [--mib 300] [--repeat 2]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mpicluster import remote  # noqa: E402
from mpicluster.cluster.plan import ClusterPlan  # noqa: E402
from mpicluster.nodes.openssh import ssh_argv  # noqa: E402
from mpicluster.remote.relay import BOOT  # noqa: E402
from mpicluster.stack import relay_depth as depth  # noqa: E402
from mpicluster.stack import relay_tree as tree  # noqa: E402
from tests.conftest import LocalCluster, inventory_with, mpicluster  # noqa: E402

NAME, SUBNET, GATEWAY = "bench-relay", "192.168.61.0/24", "192.168.61.1"
INCOMING = "/tmp/bench-relay"  # noqa: S108 (on the nodes)


def bridge_tx() -> int:
    """Bytes this machine has sent into the cluster's network."""
    out = subprocess.run(
        ["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=True
    ).stdout
    for line in out.splitlines():
        if f" {GATEWAY}/" in line:
            device = line.split()[1]
            return int(Path(f"/sys/class/net/{device}/statistics/tx_bytes").read_text())
    raise SystemExit(f"no interface with {GATEWAY} on this machine")


def scp_argv(plan, node: str, source: Path) -> list[str]:
    ssh = plan.node_ssh(plan.node(node))
    options = ssh_argv(ssh)[1:]
    at = options.index("-p")
    del options[at : at + 2]  # scp names the port -P
    return [
        "scp",
        "-q",
        *options,
        "-P",
        str(ssh.port),
        str(source),
        f"{ssh.user}@{ssh.host}:{INCOMING}/p",
    ]


def check(cluster: LocalCluster, nodes: list[str], sha: str) -> None:
    for node in nodes:
        got = cluster.ssh(node, f"sha256sum {INCOMING}/p").stdout.split()[0]
        if got != sha:
            raise SystemExit(f"{node}: the copy is not whole ({got[:16]}...)")


def fresh(cluster: LocalCluster, nodes: list[str]) -> None:
    for node in nodes:
        cluster.ssh(node, f"rm -rf {INCOMING} && mkdir -m 700 {INCOMING}")


def star(cluster, plan, nodes, source) -> None:
    procs = [subprocess.Popen(scp_argv(plan, n, source)) for n in nodes]
    if any(p.wait() != 0 for p in procs):
        raise SystemExit("scp failed")


def relay(cluster, plan, nodes, source, sha, fan_out: int) -> None:
    subprocess.run(scp_argv(plan, nodes[0], source), check=True)
    plan = tree(nodes, fan_out)
    argv = ["/usr/bin/python3", "-c", BOOT, remote.source("relay"), f"{INCOMING}/p", sha,
            json.dumps(plan), f"{INCOMING}/p"]  # fmt: skip
    done = cluster.ssh(nodes[0], shlex.join(argv))
    failed = [r for r in map(json.loads, done.stdout.splitlines()) if not r["ok"]]
    if failed:
        raise SystemExit(f"relay: {failed}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--mib", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--keep", action="store_true", help="leave the cluster up")
    args = parser.parse_args()
    work = Path(tempfile.gettempdir()) / NAME
    work.mkdir(exist_ok=True)
    generated = work / "generated.yaml"
    cluster = LocalCluster(NAME, SUBNET, work / "packages.yaml")
    mpicluster("local", "down", "--name", NAME, check=False)
    started = time.monotonic()
    mpicluster(
        "local", "up", "--name", NAME, "--count", str(args.nodes), "--subnet", SUBNET,
        "--inventory", str(generated),
    )  # fmt: skip
    inventory_with(generated, cluster.inventory, stack={"install": "packages"})
    mpicluster("up", str(cluster.inventory), timeout=3600)
    print(f"{args.nodes} nodes up and provisioned in {time.monotonic() - started:.0f} s")
    plan = ClusterPlan.load(cluster.inventory)
    nodes = [n.name for n in plan.nodes]
    source = work / "pack"
    source.write_bytes(os.urandom(args.mib << 20))
    sha = hashlib.sha256(source.read_bytes()).hexdigest()
    ways = {
        "star (control to each node)": lambda: star(cluster, plan, nodes, source),
        f"chain (depth {depth(tree(nodes, 1))})": lambda: relay(
            cluster, plan, nodes, source, sha, 1
        ),
        f"tree (fan-out 2, depth {depth(tree(nodes, 2))})": lambda: relay(
            cluster, plan, nodes, source, sha, 2
        ),
    }
    times: dict[str, list[float]] = {way: [] for way in ways}
    sent: dict[str, list[int]] = {way: [] for way in ways}
    try:
        for _ in range(args.repeat):
            for way, run in ways.items():
                fresh(cluster, nodes)
                before, clock = bridge_tx(), time.monotonic()
                run()
                times[way].append(time.monotonic() - clock)
                sent[way].append(bridge_tx() - before)
                check(cluster, nodes, sha)
        size = args.mib << 20
        print(f"{args.mib} MiB to {args.nodes} nodes (median of {args.repeat}):")
        for way in ways:
            seconds, out = statistics.median(times[way]), statistics.median(sent[way])
            print(
                f"  {way:34s} {seconds:6.1f} s   control sent {out / 1e6:8.0f} MB "
                f"({out / size:5.2f} copies)"
            )
    finally:
        source.unlink(missing_ok=True)
        if not args.keep:
            mpicluster("local", "down", "--name", NAME, check=False)


if __name__ == "__main__":
    main()
