"""How long the node's own health check (mpicluster-health, remote/health.py) takes on a
healthy node: the goal is under 1 s.

On a provisioned cluster (default: the demo's, inventories/local.yaml, after `make
demo`), runs `sudo mpicluster-health --json` --repeat times on every node at once and
prints, per node, the median and the slowest of the check's own time (what Slurm's
HealthCheckProgram and a job's prolog wait for) and of the whole ssh round trip.

    .venv/bin/python benchmarks/node_health.py [--repeat 10] [--inventory FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mpicluster.cluster.plan import ClusterPlan  # noqa: E402
from mpicluster.nodes import transport  # noqa: E402

COMMAND = "sudo /usr/local/sbin/mpicluster-health --json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--inventory", type=Path, default=REPO / "inventories" / "local.yaml")
    args = parser.parse_args()
    plan = ClusterPlan.load(args.inventory)
    own: dict[str, list[float]] = {n.name: [] for n in plan.nodes}
    trips: list[float] = []
    for _ in range(args.repeat):
        started = time.monotonic()
        answers = transport.run_everywhere(plan, COMMAND, timeout=60)
        trips.append(time.monotonic() - started)
        for name, answer in answers.items():
            found = json.loads(answer.stdout)
            if not found["healthy"]:
                raise SystemExit(f"{name} is not healthy: {answer.stdout}")
            own[name].append(found["seconds"])
    print(f"mpicluster-health on {len(own)} node(s), {args.repeat} runs each")
    for name, seconds in own.items():
        print(f"  {name}: median {statistics.median(seconds):.3f} s, slowest {max(seconds):.3f} s")
    print(f"  every node at once over ssh: median {statistics.median(trips):.3f} s")


if __name__ == "__main__":
    main()
