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

and the bytes this machine's own processes sent into the cluster's network during
each (an iptables OUTPUT rule that only counts: node-to-node traffic never passes it,
nor does what the nodes download through this machine's NAT, such as their apt
packages; the bridge's tx counter, which has those too, is printed beside it). Also
how long the probes (and the stack plan) and the smoke test took, and the CPU time
of the control machine's processes (mpicluster, Ansible and their ssh clients): on a
machine whose cores also run every node, the wall time of N nodes grows with N's
work; the control CPU is what a real cluster's control machine would spend. Tears the
cluster down unless --keep.

    .venv/bin/python benchmarks/up_warm.py [--nodes 3] [--stack-from INVENTORY] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import resource
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


COMMENT = "mpicluster-up-warm"


def bridge() -> str:
    out = subprocess.run(
        ["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=True
    ).stdout
    return next(line.split()[1] for line in out.splitlines() if f" {GATEWAY}/" in line)


def counting_rule(action: str, device: str) -> list[str]:
    """An OUTPUT rule with no target: it only counts what this machine sends out."""
    return ["iptables", action, "OUTPUT", "-o", device, "-m", "comment", "--comment", COMMENT]


def sent_bytes(device: str) -> tuple[int, int]:
    """(this machine's own bytes into the cluster's network, the bridge's tx bytes)."""
    out = subprocess.run(
        ["iptables", "-L", "OUTPUT", "-v", "-x", "-n"], capture_output=True, text=True, check=True
    ).stdout
    own = sum(int(line.split()[1]) for line in out.splitlines() if COMMENT in line)
    return own, int(Path(f"/sys/class/net/{device}/statistics/tx_bytes").read_text())


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def up(inventory: Path, *options: str, env: dict | None = None) -> tuple[float, tuple, dict]:
    device = bridge()
    before, started, cpu = sent_bytes(device), time.monotonic(), children_cpu()
    done = mpicluster("up", str(inventory), "--json", *options, check=False, timeout=3600, env=env)
    seconds, after = time.monotonic() - started, sent_bytes(device)
    # mpicluster, ansible-playbook, its workers and their ssh clients: all waited for
    cpu = children_cpu() - cpu
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-3000:] + "\n" + done.stdout[-3000:])
        raise SystemExit(f"up {' '.join(options)} failed ({done.returncode})")
    return seconds, (after[0] - before[0], after[1] - before[1], cpu), json.loads(done.stdout)


def figures(seconds: float, costs: tuple[int, int, float], result: dict) -> str:
    smoke = (result.get("smoke") or {}).get("seconds") or 0.0
    return (
        f"{seconds:6.1f} s (probes {result['probe_seconds']:5.1f} s, smoke test {smoke:5.1f} s)"
        f"   control sent {costs[0] / 1e6:7.1f} MB (into the network {costs[1] / 1e6:7.1f} MB)"
        f"   control CPU {costs[2]:6.1f} s"
    )


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
        "local", "up", "--name", NAME, "--count", str(args.nodes), "--subnet", SUBNET,
        "--inventory", str(generated), *cuda,
    )  # fmt: skip
    data = yaml.safe_load(generated.read_text())
    data.update(sections)
    inventory.write_text(yaml.safe_dump(data, sort_keys=False))
    device = bridge()
    subprocess.run(counting_rule("-I", device), check=True)
    try:
        seconds, sent, first = up(inventory)
        print(f"{args.nodes} nodes, stack {sections['stack'].get('install', 'source')}")
        print(f"  first up          {figures(seconds, sent, first)}")
        runs = sorted((up(inventory) for _ in range(args.repeat)), key=lambda run: run[0])
        paths = "/".join(sorted({result["path"] for _, _, result in runs}))
        print(
            f"  no-op up          {figures(*runs[len(runs) // 2])}"
            f"   (path {paths}, median of {args.repeat})"
        )
        seconds, sent, full = up(inventory, "--full")
        changes = sum(h["changed"] for h in full["hosts"].values())
        print(f"  up --full         {figures(seconds, sent, full)}   ({changes} change(s))")
        if args.free:
            seconds, _, free = up(inventory, "--full", env={"ANSIBLE_STRATEGY": "free"})
            changes = sum(h["changed"] for h in free["hosts"].values())
            print(f"  up --full, free   {seconds:6.1f} s   ({changes} change(s))")
        slowest = max(first["hosts"].values(), key=lambda h: h["seconds"])["stages"]
        top = sorted(slowest.items(), key=lambda item: -item[1])[:4]
        print("  first up, slowest node's stages: " + ", ".join(f"{k} {v} s" for k, v in top))
    finally:
        subprocess.run(counting_rule("-D", device), check=False)
        if not args.keep:
            mpicluster("local", "down", "--name", NAME, check=False)


if __name__ == "__main__":
    main()
