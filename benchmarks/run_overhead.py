"""What `mpicluster run` adds over the hand-written mpirun on the head node, 3 nodes.

Brings up the local cluster `benchrun` (3 Podman nodes, 192.168.62.0/24) and provisions
it with `mpicluster up` (install: packages: Debian's Open MPI), then times, interleaved,
--repeat times each, one rank per node running `true`:

  - hand: `ssh HEAD mpirun --host node1:1,node2:1,node3:1 -np 3 true` from the control
    machine (OpenSSH, the inventory's key and known_hosts): what a user types;
  - run: `mpicluster run INVENTORY -- true` (Python start, the head's facts, the
    launcher, the tagged output);
  - run --sync: the same with `--sync examples` when nothing changed (two rsync hops).

Prints the median of each and the differences; the issue's goal: run - hand <= 1 s.
Tears the cluster down at the end unless --keep.

    .venv/bin/python benchmarks/run_overhead.py [--repeat 10] [--keep] [--inventory FILE]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

NAME, SUBNET = "benchrun", "192.168.62.0/24"
WORK = Path(tempfile.gettempdir()) / "mpicluster-bench-run"


def timed(argv: list[str]) -> float:
    started = time.monotonic()
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} failed ({done.returncode}): {done.stderr[-2000:]}")
    return seconds


def mpicluster(*args: str) -> list[str]:
    return [sys.executable, "-m", "mpicluster", *args]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--keep", action="store_true", help="leave the cluster up")
    parser.add_argument(
        "--inventory", type=Path, help="time this provisioned cluster instead (no up, no down)"
    )
    args = parser.parse_args()

    from mpicluster.cluster.plan import ClusterPlan
    from mpicluster.nodes.openssh import ssh_argv

    WORK.mkdir(parents=True, exist_ok=True)
    generated, inventory = WORK / "generated.yaml", WORK / "packages.yaml"
    if args.inventory:
        inventory, args.keep = args.inventory, True
    else:
        timed(
            mpicluster(
                "local",
                "up",
                "--name",
                NAME,
                "--count",
                "3",
                "--subnet",
                SUBNET,
                "--inventory",
                str(generated),
            )
        )
        data = yaml.safe_load(generated.read_text())
        data["stack"] = {"install": "packages"}
        inventory.write_text(yaml.safe_dump(data, sort_keys=False))
        print(f"up: {timed(mpicluster('up', str(inventory))):.1f} s", flush=True)
    plan = ClusterPlan.load(inventory)
    head = plan.node_ssh(plan.nodes[0])
    hosts = ",".join(f"{n.name}:1" for n in plan.nodes)
    hand = [*ssh_argv(head), f"{head.user}@{head.host}", f"mpirun --host {hosts} -np 3 true"]
    cells = {
        "hand-written mpirun over ssh": hand,
        "mpicluster run": mpicluster("run", str(inventory), "--", "true"),
        "mpicluster run --sync (no change)": mpicluster(
            "run", str(inventory), "--sync", "examples", "--", "true"
        ),
    }
    times: dict[str, list[float]] = {name: [] for name in cells}
    try:
        for _ in range(args.repeat):
            for name, argv in cells.items():
                times[name].append(timed(argv))
    finally:
        if not args.keep:
            subprocess.run(mpicluster("local", "down", "--name", NAME), check=False)
    medians = {name: statistics.median(values) for name, values in times.items()}
    for name, value in medians.items():
        print(f"{name:36s} median {value:6.3f} s  (min {min(times[name]):.3f}, n={args.repeat})")
    base = medians["hand-written mpirun over ssh"]
    print(f"run - hand:          {medians['mpicluster run'] - base:+.3f} s (goal <= 1 s)")
    print(f"run --sync - hand:   {medians['mpicluster run --sync (no change)'] - base:+.3f} s")


if __name__ == "__main__":
    main()
