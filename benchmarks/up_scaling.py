"""How `mpicluster up` scales: a fresh up on 1 node vs 3 nodes, and adding a node.

Runs on real local clusters (Podman nodes) with the from-source stack of the test suite
(Open MPI 5.0.7, mpi4py, Horovod + PyTorch CPU), from a source cache seeded the same
way the tests seed it. Every fresh run starts from an empty artifact cache, so it
builds. Prints one line per scenario and a summary. Takes about an hour on 2 cores.

    .venv/bin/python benchmarks/up_scaling.py [--warm-only]

--warm-only skips the two builds and measures installs from a warm artifact cache.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.conftest import inventory_with  # noqa: E402
from tests.seed import seed_cache  # noqa: E402

NAME, SUBNET = "bench-up", "192.168.68.0/24"


def mpicluster(*args: str) -> float:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "mpicluster", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    seconds = time.monotonic() - started
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-3000:])
        raise SystemExit(f"mpicluster {' '.join(args)} failed ({done.returncode})")
    return seconds


def cluster(nodes: int, work: Path, openmpi: dict, *, fresh: bool) -> Path:
    if fresh:
        mpicluster("local", "down", "--name", NAME)
    generated = work / "generated.yaml"
    mpicluster(
        "local",
        "up",
        "--name",
        NAME,
        "--count",
        str(nodes),
        "--subnet",
        SUBNET,
        "--inventory",
        str(generated),
    )
    return inventory_with(
        generated,
        work / "bench.yaml",
        stack={"install": "source", "openmpi": openmpi},
        sources={"cache": str(work / "sources"), "artifacts": str(work / "artifacts")},
    )


def record(rows: list, label: str, seconds: float) -> None:
    rows.append((label, seconds))
    print(f"{label:<42}  {seconds:8.1f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm-only", action="store_true")
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mpicluster-bench-"))
    openmpi = seed_cache(work / "sources", "5.0.7")
    rows = []
    try:
        if not options.warm_only:
            inv = cluster(1, work, openmpi, fresh=True)
            record(rows, "fresh up, 1 node (builds)", mpicluster("up", str(inv)))
            shutil.rmtree(work / "artifacts")
            inv = cluster(3, work, openmpi, fresh=True)
            record(rows, "fresh up, 3 nodes (builds once)", mpicluster("up", str(inv)))
        else:
            inv = cluster(1, work, openmpi, fresh=True)
            mpicluster("up", str(inv))
        inv = cluster(3, work, openmpi, fresh=True)
        record(rows, "fresh up, 3 nodes, warm artifact cache", mpicluster("up", str(inv)))
        record(rows, "second up, 3 nodes (no changes)", mpicluster("up", str(inv)))
        inv = cluster(4, work, openmpi, fresh=False)
        record(rows, "add a 4th node to the provisioned cluster", mpicluster("up", str(inv)))
    finally:
        subprocess.run(
            [sys.executable, "-m", "mpicluster", "local", "down", "--name", NAME],
            cwd=REPO,
            capture_output=True,
            check=False,
        )
        shutil.rmtree(work, ignore_errors=True)
    times = dict(rows)
    one, three = (
        times.get("fresh up, 1 node (builds)"),
        times.get("fresh up, 3 nodes (builds once)"),
    )
    if one and three:
        print(f"3 nodes / 1 node: {three / one:.2f}x (one build either way)")


if __name__ == "__main__":
    main()
