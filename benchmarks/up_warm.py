"""`up` with a warm artifact cache, then a no-op `up`, then `up --full`, on N local nodes.

Brings up the local cluster `bench-warm` (N Podman nodes, 192.168.61.0/24; `--cuda`
nodes when the stack wants CUDA) and, with the stack and sources sections of
--stack-from (an inventory whose artifact cache holds the built stack, such as the
`source.yaml` the test suite's build leaves in pytest's temporary folder), or with
`install: packages` without it, times:

  - the first `up` (for a source stack: installed from the artifact cache, no build);
  - --repeat no-op `up`s (the fast path: one probe per node, then the smoke test);
  - `up --full` (every task runs and changes nothing, then the smoke test), and with
    --free once more under Ansible's `free` strategy (ANSIBLE_STRATEGY=free: each node
    runs its tasks without waiting for the others; measured, not what `up` uses);

and the bytes this machine sent into the cluster's network during each (the tx
counter of the network's bridge: node-to-node traffic never passes it). Tears the
cluster down unless --keep.

    .venv/bin/python benchmarks/up_warm.py [--nodes 3] [--stack-from INVENTORY] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.conftest import mpicluster  # noqa: E402

NAME, SUBNET, GATEWAY = "bench-warm", "192.168.61.0/24", "192.168.61.1"


def bridge_tx() -> int:
    out = subprocess.run(
        ["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=True
    ).stdout
    device = next(line.split()[1] for line in out.splitlines() if f" {GATEWAY}/" in line)
    return int(Path(f"/sys/class/net/{device}/statistics/tx_bytes").read_text())


def up(inventory: Path, *options: str, env: dict | None = None) -> tuple[float, int, dict]:
    before, started = bridge_tx(), time.monotonic()
    done = mpicluster("up", str(inventory), "--json", *options, check=False, timeout=3600, env=env)
    seconds, sent = time.monotonic() - started, bridge_tx() - before
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-3000:] + "\n" + done.stdout[-3000:])
        raise SystemExit(f"up {' '.join(options)} failed ({done.returncode})")
    return seconds, sent, json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--stack-from", type=Path, help="an inventory with a warm cache")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="leave the cluster up")
    parser.add_argument(
        "--free", action="store_true", help="also time up --full under Ansible's free strategy"
    )
    args = parser.parse_args()
    sections = {"stack": {"install": "packages"}}
    if args.stack_from:
        given = yaml.safe_load(args.stack_from.read_text())
        sections = {"stack": given["stack"], "sources": given["sources"]}
    # CUDA nodes for a stack built on them (the test suite's: gpus_present false)
    cuda = ["--cuda"] if "gpus_present" in sections["stack"] else []
    work = Path(tempfile.mkdtemp(prefix=f"{NAME}-"))
    generated, inventory = work / "generated.yaml", work / "inventory.yaml"
    mpicluster("local", "down", "--name", NAME, check=False)
    mpicluster(
        "local", "up", "--name", NAME, "--nodes", str(args.nodes), "--subnet", SUBNET,
        "--inventory", str(generated), *cuda,
    )  # fmt: skip
    data = yaml.safe_load(generated.read_text())
    data.update(sections)
    inventory.write_text(yaml.safe_dump(data, sort_keys=False))
    try:
        seconds, sent, first = up(inventory)
        print(f"{args.nodes} nodes, stack {sections['stack'].get('install', 'source')}")
        print(f"  first up          {seconds:6.1f} s   control sent {sent / 1e6:8.1f} MB")
        runs = [up(inventory) for _ in range(args.repeat)]
        paths = "/".join(sorted({result["path"] for _, _, result in runs}))
        median = statistics.median(s for s, _, _ in runs)
        print(
            f"  no-op up ({paths}) {median:6.1f} s"
            f"   control sent {statistics.median(b for _, b, _ in runs) / 1e6:8.1f} MB"
            f"   (median of {args.repeat})"
        )
        seconds, sent, full = up(inventory, "--full")
        changes = sum(h["changed"] for h in full["hosts"].values())
        print(
            f"  up --full         {seconds:6.1f} s   control sent {sent / 1e6:8.1f} MB"
            f"   ({changes} change(s))"
        )
        if args.free:
            seconds, _, free = up(inventory, "--full", env={"ANSIBLE_STRATEGY": "free"})
            changes = sum(h["changed"] for h in free["hosts"].values())
            print(f"  up --full, free   {seconds:6.1f} s   ({changes} change(s))")
        slowest = max(first["hosts"].values(), key=lambda h: h["seconds"])["stages"]
        top = sorted(slowest.items(), key=lambda item: -item[1])[:4]
        print("  first up, slowest node's stages: " + ", ".join(f"{k} {v} s" for k, v in top))
    finally:
        if not args.keep:
            mpicluster("local", "down", "--name", NAME, check=False)


if __name__ == "__main__":
    main()
