"""How long `mpicluster bench` takes: 3 and 16 local nodes, its default schedule (every
pair up to 8 nodes; a ring and a seeded sample above) and --all-pairs, and --quick.

Brings up the local cluster `bench-time` (Podman nodes, 192.168.77.0/24) with Debian's
Open MPI and mpi4py (install: packages: bench measures whatever MPI the cluster has),
runs each form once with --json and prints its wall time, its pairs, rounds and what
it flagged (a healthy cluster: nothing). Tears the cluster down unless --keep.

    .venv/bin/python benchmarks/bench_time.py [--nodes 3 16] [--keep]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.conftest import inventory_with, mpicluster  # noqa: E402

NAME, SUBNET = "bench-time", "192.168.77.0/24"


def timed(*args: str, check: bool = True) -> tuple[float, subprocess.CompletedProcess]:
    """The real command (the tests' runner) and its wall time."""
    started = time.monotonic()
    done = mpicluster(*args, check=check, timeout=3600)
    return time.monotonic() - started, done


def provision(nodes: int, work: Path) -> Path:
    generated = work / f"generated-{nodes}.yaml"
    mpicluster("local", "down", "--name", NAME, check=False)
    timed(
        "local", "up", "--name", NAME, "--count", str(nodes), "--subnet", SUBNET,
        "--inventory", str(generated),
    )  # fmt: skip
    inventory = inventory_with(
        generated, work / f"bench-{nodes}.yaml", stack={"install": "packages"}
    )
    seconds, _ = timed("up", str(inventory))
    print(f"{nodes} nodes: up (packages) in {seconds:.0f} s", flush=True)
    return inventory


def measure(inventory: Path, nodes: int, label: str, *args: str) -> None:
    seconds, done = timed("bench", str(inventory), "--json", *args, check=False)
    if done.returncode not in (0, 5, 6):  # a report: nothing flagged, flagged, warnings
        sys.stderr.write(done.stderr[-3000:])
        raise SystemExit(f"bench {label} failed ({done.returncode})")
    try:
        report = json.loads(done.stdout)
    except ValueError:
        sys.stderr.write(done.stderr[-3000:])
        raise SystemExit(f"bench {label} printed no report ({done.returncode})") from None
    rounds = sum(1 for line in done.stderr.splitlines() if "  round " in line)
    flagged = ", ".join(f"{f['kind']} {'-'.join(f['nodes'])}" for f in report["flagged"])
    last = report["allreduce"][-1]
    print(
        f"{nodes:>3} nodes  {label:<10} {seconds:7.1f} s  {len(report['pairs']):>3} pairs"
        f"  allreduce {last['busbw_gbs']:.3f} GB/s busbw at {last['bytes'] >> 20} MiB"
        f"  flagged: {flagged or 'nothing'}" + (f" (rounds seen: {rounds})" if rounds else ""),
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[3, 16])
    parser.add_argument("--keep", action="store_true")
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mpicluster-bench-time-"))
    try:
        for nodes in options.nodes:
            inventory = provision(nodes, work)
            measure(inventory, nodes, "default")
            measure(inventory, nodes, "--all-pairs", "--all-pairs")
            measure(inventory, nodes, "--quick", "--quick")
    finally:
        if not options.keep:
            mpicluster("local", "down", "--name", NAME, check=False)


if __name__ == "__main__":
    main()
