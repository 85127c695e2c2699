"""How long a whole `mpicluster doctor` takes on a running cluster, and how long the
command line takes to start.

Runs, --runs times each and interleaved, real processes as a user starts them:

  - `mpicluster doctor INVENTORY --json`, every check with its defaults (the launch
    proof included): a fresh process each time, so nothing is carried from one run to
    the next; its wall time from start to exit (the Python start and imports included),
    the CPU time the process itself used (the nodes' is not in it), and the report's
    pass/warn/fail counts;
  - `mpicluster --help` and `mpicluster doctor --help`: the command line's own start.

With --baseline DIR (another checkout of mpicluster), the same runs of that checkout
are interleaved with these, so that both see the same load: the figures to compare a
change by on a busy machine. Each tree's modules are compiled first (as an installed
package has them), so a start measures imports, not compiling.

It changes nothing on the nodes (doctor only reads, its launches run MPI programs that
print and exit), and brings up no cluster: give the inventory of one that is up (3 local
nodes: `mpicluster local up`; 16: `mpicluster local up --count 16 --name n16 --subnet
192.168.67.0/24`, then `up` on its inventory).

    .venv/bin/python benchmarks/doctor_speed.py INVENTORY [--runs 5] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def timed(tree: Path, *args: str, timeout: float = 600) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the process, stdout) of `python -m mpicluster ARGS`
    run from the checkout `tree`."""
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "mpicluster", *args],
        cwd=tree,
        env={**os.environ, "PYTHONPATH": str(tree), "COLUMNS": "100"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        raise SystemExit(f"{tree}: mpicluster {' '.join(args)} ran past {timeout:.0f} s") from None
    seconds = time.monotonic() - started
    if process.returncode not in (0, 5, 6):  # a report: passed, failures, warnings only
        sys.stderr.write(err[-3000:])
        raise SystemExit(f"{tree}: mpicluster {' '.join(args)} exited {process.returncode}")
    return seconds, _children_cpu(), out


_CPU_BEFORE = [0.0]


def _children_cpu() -> float:
    """CPU seconds the child that just ended used (the growth of RUSAGE_CHILDREN)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = usage.ru_utime + usage.ru_stime
    used, _CPU_BEFORE[0] = total - _CPU_BEFORE[0], total
    return used


def counts(report: dict) -> str:
    summary = report.get("summary") or {}
    return f"{summary.get('pass', '?')} pass, {summary.get('warn', '?')} warn, " + (
        f"{summary.get('fail', '?')} fail"
    )


def figures(values: list[float]) -> str:
    return (
        f"median {statistics.median(values):6.2f} s  "
        f"(min {min(values):.2f}, max {max(values):.2f}, {len(values)} runs)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inventory", type=Path, help="the inventory of a cluster that is up")
    parser.add_argument("--runs", type=int, default=5, help="runs of each (median shown)")
    parser.add_argument(
        "--baseline", type=Path, help="another mpicluster checkout, run interleaved with this"
    )
    options = parser.parse_args()
    inventory = options.inventory.resolve()
    trees = {"this": REPO}
    if options.baseline is not None:
        trees["baseline"] = options.baseline.resolve()
    for tree in trees.values():
        compileall.compile_dir(tree / "mpicluster", quiet=1)
    _children_cpu()
    cells: dict[tuple[str, str], list[float]] = {}
    reports: dict[str, set[str]] = {}
    for run in range(options.runs):
        for label, tree in trees.items():
            for name, args in (("--help", ["--help"]), ("doctor --help", ["doctor", "--help"])):
                seconds, _, _ = timed(tree, *args)
                cells.setdefault((label, name), []).append(seconds)
            seconds, cpu, out = timed(tree, "doctor", str(inventory), "--json")
            cells.setdefault((label, "doctor"), []).append(seconds)
            cells.setdefault((label, "doctor cpu"), []).append(cpu)
            report = json.loads(out)
            cells.setdefault((label, "doctor says"), []).append(report.get("seconds", 0.0))
            reports.setdefault(label, set()).add(counts(report))
        print(f"  run {run + 1}/{options.runs} done", file=sys.stderr, flush=True)
    nodes = len(yaml.safe_load(inventory.read_text(encoding="utf-8"))["nodes"])
    print(f"doctor on {inventory.name} ({nodes} nodes), {os.cpu_count()} CPUs here, wall seconds")
    for label in trees:
        print(f"{label} ({trees[label]}):")
        print(f"  mpicluster --help         {figures(cells[(label, '--help')])}")
        print(f"  mpicluster doctor --help  {figures(cells[(label, 'doctor --help')])}")
        print(f"  doctor, whole process     {figures(cells[(label, 'doctor')])}")
        print(f"  doctor, its own report    {figures(cells[(label, 'doctor says')])}")
        cpu = statistics.median(cells[(label, "doctor cpu")])
        print(f"  doctor, this machine's CPU in its process: median {cpu:.2f} s")
        print(f"  results: {'; '.join(sorted(reports[label]))}")
    if "baseline" in trees:
        this = statistics.median(cells[("this", "doctor")])
        base = statistics.median(cells[("baseline", "doctor")])
        print(f"doctor: {this:.2f} s against {base:.2f} s ({this / base:.2f}x the baseline)")


if __name__ == "__main__":
    main()
