"""How often a job whose ranks exit at once leaves `mpicluster run` waiting for ever.

Open MPI 5.0.x's remote daemons (PRRTE 3.0.x) can lose a rank that exits before their
launch thread has recorded it running: the job never completes and mpirun waits. The
cluster's /etc/environment turns those threads off (cluster/mpi_settings.py: RUNTIME);
`--threads N` gives the job's mpirun N of them again, to measure the difference.

On a provisioned cluster (default: the demo's, inventories/local.yaml, after `make
demo`), runs `mpicluster run INVENTORY -- true` --repeat times, one after the other;
a run still going after --timeout seconds is counted as hung and killed (its control
channel's end stops the job on every node). Prints the hung count and the runs' times.

    .venv/bin/python benchmarks/launch_exits.py [--repeat 500] [--threads 16]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=500)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--threads", type=int, help="the remote daemons' launch threads")
    parser.add_argument("--inventory", type=Path, default=REPO / "inventories" / "local.yaml")
    args = parser.parse_args()
    command = [sys.executable, "-m", "mpicluster", "run", str(args.inventory)]
    if args.threads is not None:
        command += ["--env", f"PRTE_MCA_odls_base_max_threads={args.threads}"]
    command += ["--", "true"]
    seconds: list[float] = []
    hung: list[int] = []
    for index in range(args.repeat):
        started = time.monotonic()
        job = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            _, err = job.communicate(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            job.kill()
            job.communicate()
            hung.append(index + 1)
            print(f"run {index + 1}: still going after {args.timeout:g} s", flush=True)
            continue
        if job.returncode != 0:
            raise SystemExit(f"run {index + 1} failed ({job.returncode}): {err.decode()[-500:]}")
        seconds.append(time.monotonic() - started)
    threads = "default" if args.threads is None else args.threads
    print(f"`mpicluster run -- true`, {args.repeat} runs (remote launch threads: {threads})")
    print(f"  hung: {len(hung)}" + (f" (runs {', '.join(map(str, hung))})" if hung else ""))
    if seconds:
        print(f"  ended: median {statistics.median(seconds):.2f} s, slowest {max(seconds):.2f} s")


if __name__ == "__main__":
    main()
