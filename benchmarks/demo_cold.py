"""Where a cold `make demo` spends its time, and how long a no-op `up` takes after it.

Brings up the local cluster `demo-cold` (3 Podman nodes, 192.168.79.0/24) with the
demo's inventory (the default stack: Open MPI, UCX, mpi4py, PyTorch, Horovod from
source) and empty caches of its own (sources, artifacts and pip's cache in a temporary
folder: nothing the machine fetched or built before is used), then times:

  - `mpicluster local up` (the nodes);
  - the cold `up`: the control machine's part (probes, fetching the sources and the
    wheelhouse, planning) and the playbook's, broken down by role and by the stack's
    build steps (from the run's own ansible-runner events: the time from one task's
    start to the next, which is what the run waited for with Ansible's linear strategy),
    then the smoke test by part;
  - --repeat no-op `up`s: the median, with its probes and smoke test by part (with
    --no-up, after one `up` that is not counted: a kept cluster's record may be of
    other code, and then the first `up` runs every task).

`make demo`'s remaining step, the virtual environment (`pip install -e .[dev]`), is not
timed here (it is the machine's, before any node).

    .venv/bin/python benchmarks/demo_cold.py [--repeat 5] [--keep] [--no-up]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from itertools import pairwise
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.conftest import mpicluster  # noqa: E402

NAME, SUBNET = "demo-cold", "192.168.79.0/24"
WORK = Path(tempfile.gettempdir()) / NAME


def timed(*args: str, env: dict[str, str] | None = None) -> tuple[float, str]:
    started = time.monotonic()
    done = mpicluster(*args, timeout=7200, env=env)
    return time.monotonic() - started, done.stdout


def events_of(log: Path) -> list[dict]:
    """The run's ansible-runner events, in order."""
    folder = log.parent / "runner" / "artifacts"
    files = sorted(folder.glob("*/job_events/*.json"), key=lambda f: int(f.name.split("-")[0]))
    return [json.loads(f.read_text()) for f in files]


def task_walls(events: list[dict]) -> list[tuple[str, str, float]]:
    """(where, task, seconds) for every task: `where` is the role and, in stack_build,
    the tasks file (openmpi, ucx, python...); seconds from its start to the next one's."""
    marks = []
    for event in events:
        kind, data = event.get("event"), event.get("event_data", {})
        if kind in ("playbook_on_task_start", "playbook_on_stats"):
            created = datetime.fromisoformat(event["created"]).timestamp()
            path = Path((data.get("task_path") or "").split(":")[0])
            role = data.get("role") or (data.get("play") or "play").split(":")[0].lower()
            where = f"{role}/{path.stem}" if role == "stack_build" else role
            marks.append((where, (data.get("task") or "").split(" : ")[-1], created))
    return [
        (where, task, following[2] - created)
        for (where, task, created), following in pairwise(marks)
    ]


def breakdown(result: dict) -> list[str]:
    walls = task_walls(events_of(Path(result["log"])))
    by_where: dict[str, float] = defaultdict(float)
    for where, _, seconds in walls:
        by_where[where] += seconds
    lines = [f"  playbook by role (and stack_build by step), {sum(by_where.values()):.0f} s:"]
    lines += [
        f"    {where:32s} {seconds:7.1f} s"
        for where, seconds in sorted(by_where.items(), key=lambda item: -item[1])
        if seconds >= 1
    ]
    lines.append("  slowest tasks:")
    lines += [
        f"    {seconds:7.1f} s  {where}: {task}"
        for where, task, seconds in sorted(walls, key=lambda wall: -wall[2])[:15]
    ]
    return lines


def smoke_parts(result: dict) -> str:
    smoke = result.get("smoke") or {}
    parts = smoke.get("parts") or {}
    inner = ", ".join(f"{part} {seconds:.1f} s" for part, seconds in parts.items())
    return f"smoke test {smoke.get('seconds', 0):.1f} s" + (f" ({inner})" if inner else "")


def up(inventory: Path, env: dict[str, str]) -> tuple[float, dict]:
    seconds, out = timed("up", str(inventory), "--json", env=env)
    return seconds, json.loads(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="no-op ups")
    parser.add_argument("--keep", action="store_true", help="leave the cluster up")
    parser.add_argument("--no-up", action="store_true", help="no-op ups on a kept cluster")
    args = parser.parse_args()
    inventory = WORK / "inventory.yaml"
    env = {"PIP_CACHE_DIR": str(WORK / "pip")}
    if not args.no_up:
        mpicluster("local", "down", "--name", NAME, check=False)
        shutil.rmtree(WORK, ignore_errors=True)
        WORK.mkdir()
        seconds, _ = timed(
            "local", "up", "--name", NAME, "--count", "3", "--subnet", SUBNET,
            "--inventory", str(WORK / "generated.yaml"),
        )  # fmt: skip
        print(f"local up (3 nodes)  {seconds:6.1f} s")
        data = yaml.safe_load((WORK / "generated.yaml").read_text())
        data["sources"] = {"cache": str(WORK / "sources"), "artifacts": str(WORK / "artifacts")}
        inventory.write_text(yaml.safe_dump(data, sort_keys=False))
        seconds, result = up(inventory, env)
        print(
            f"cold up             {seconds:6.1f} s: probes, sources and plan "
            f"{result['probe_seconds']:.1f} s, {smoke_parts(result)}"
        )
        print("\n".join(breakdown(result)))
    elif not inventory.exists():
        raise SystemExit(f"--no-up: no cluster from an earlier --keep run ({inventory})")
    try:
        if args.no_up:  # code changed since the kept cluster's last up runs every task once
            up(inventory, env)
        runs = sorted((up(inventory, env) for _ in range(args.repeat)), key=lambda r: r[0])
        seconds, result = runs[len(runs) // 2]
        print(
            f"no-op up            {seconds:6.1f} s (median of {len(runs)}: "
            f"{', '.join(f'{s:.1f}' for s, _ in runs)}; path {result['path']}): "
            f"probes {result['probe_seconds']:.1f} s, {smoke_parts(result)}"
        )
        print(f"  spread: {statistics.pstdev(s for s, _ in runs):.2f} s")
    finally:
        if not args.keep:
            mpicluster("local", "down", "--name", NAME, check=False)


if __name__ == "__main__":
    main()
