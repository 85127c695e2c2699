"""mpicluster bench: whether the cluster is fast, and which node or link is not.

`run_bench(plan, ...)` measures node pairs (schedule.py: a ring and a sample, or all
pairs, in rounds of disjoint pairs) and an allreduce over all nodes with the stack's
MPI (measure.py), judges the pairs (verdict.py: a second pass tells a slow node from a
slow link) and returns a BenchReport (report.py); it never prints. The command is
mpicluster/cli/bench.py, the rendering mpicluster/render/bench.py.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from mpicluster.bench import measure, schedule, verdict
from mpicluster.bench.report import BenchReport, PairFigure, SizeFigure
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.errors import UsageError
from mpicluster.nodes import pairs as pair_plan

__all__ = ["BenchReport", "run_bench"]

#: Iterations of the large message per pair, and of the small one.
ITERATIONS = 8
SMALL_ITERATIONS = 200
#: Seconds one mpirun may take: per round of pairs, and for the allreduce sweep.
ROUND_SECONDS = 60
SWEEP_SECONDS = 300


def check_options(plan: ClusterPlan, nodes: list[str] | None, expect: float | None) -> list[str]:
    """The nodes to measure (the inventory's order); UsageError naming a bad option."""
    if expect is not None and not 0 < expect < math.inf:
        raise UsageError(f"--expect {expect}: must be a bandwidth in GB/s above 0")
    names = [n.name for n in plan.nodes]
    if nodes:
        unknown = [n for n in nodes if n not in names]
        if unknown:
            raise UsageError(f"--nodes {unknown[0]!r}: no such node (one of: {', '.join(names)})")
        names = [n for n in names if n in nodes]
    if len(names) < 2:
        raise UsageError("bench needs two nodes or more: it measures pairs")
    return names


def run_bench(
    plan: ClusterPlan,
    *,
    nodes: list[str] | None = None,
    all_pairs: bool = False,
    seed: int | None = None,
    expect: float | None = None,
    quick: bool = False,
    on_progress: Callable[[str], None] | None = None,
) -> BenchReport:
    """`quick`: one size, ring pairs (doctor --perf's form)."""
    progress = on_progress or (lambda message: None)
    names = check_options(plan, nodes, expect)
    started = time.monotonic()
    major = measure.mpi_major(plan)
    index = {name: i for i, name in enumerate(names)}
    seed = seed if seed is not None else pair_plan.seed_for(plan.cluster)
    first = schedule.pairs(names, all_pairs=all_pairs, seed=seed)
    if quick:
        first = [verdict.key(names[i], names[(i + 1) % len(names)]) for i in range(len(names))]
        first = sorted(set(first), key=lambda p: (index[p[0]], index[p[1]]))
    report = BenchReport(plan.cluster)

    def measure_pairs(wanted: list[tuple[str, str]], label: str) -> dict:
        rounds = schedule.rounds(wanted)
        progress(f"{label}: {len(wanted)} pair(s) in {len(rounds)} round(s) of disjoint pairs")
        spec = {
            "mode": "pairs",
            "rounds": [[[index[a], index[b]] for a, b in group] for group in rounds],
            "bytes": measure.LARGE,
            "iterations": ITERATIONS,
            "small": measure.SMALL,
            "small_iterations": SMALL_ITERATIONS,
        }
        found = measure.run(plan, names, spec, ROUND_SECONDS * len(rounds), major)
        report.library = found.get("library", "")
        return {verdict.key(names[r["pair"][0]], names[r["pair"][1]]): r for r in found["pairs"]}

    def baseline(pairs) -> dict | None:
        """--expect as every pair's baseline (none: the pairs' own median)."""
        return dict.fromkeys(pairs, expect) if expect else None

    measured = measure_pairs(first, "Point to point")
    bandwidth = {pair: r["gbs"] for pair, r in measured.items()}
    suspect = verdict.suspects(bandwidth, baseline(bandwidth))
    second: dict = {}
    if suspect and not quick:
        again = verdict.retests(bandwidth, suspect, names)
        if again:
            second = measure_pairs(again, f"Second pass for {len(suspect)} slow pair(s)")
    bandwidth2 = {pair: r["gbs"] for pair, r in second.items()}
    everything = {**bandwidth, **bandwidth2}
    expected = verdict.expected_of(everything, baseline(everything))
    for results, round_number in ((measured, 1), (second, 2)):
        for pair, r in results.items():
            report.pairs.append(
                PairFigure(
                    pair,
                    r["gbs"],
                    r["latency_us"],
                    expected[pair],
                    round_number,
                    r["gbs"] < verdict.SUSPECT * expected[pair],
                )
            )
    report.flagged = verdict.findings(bandwidth, baseline(everything), bandwidth2)
    report.expected_gbs = expect or (min(expected.values()) if expected else 0.0)
    report.expected_source = "--expect" if expect else "median of the pairs"
    sizes = measure.SWEEP[-1:] if quick else measure.SWEEP
    progress(f"Allreduce over {len(names)} nodes, {len(sizes)} size(s)")
    swept = measure.run(plan, names, {"mode": "allreduce", "sizes": sizes}, SWEEP_SECONDS, major)
    report.allreduce = sweep_figures(swept["sizes"], min(everything.values(), default=0.0))
    report.seconds = time.monotonic() - started
    return report


def sweep_figures(rows: list[dict], slowest: float) -> list[SizeFigure]:
    """The allreduce sweep, each size's efficiency against the slowest pair."""
    return [
        SizeFigure(
            row["bytes"],
            row["algbw_gbs"],
            row["busbw_gbs"],
            row["busbw_gbs"] / slowest if slowest > 0 else None,
            row["exact"],
        )
        for row in rows
    ]
