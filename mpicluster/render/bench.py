"""`bench`: the pairs, the allreduce sweep, what is flagged, and the one-line verdict."""

from __future__ import annotations

from rich.markup import escape

from mpicluster.bench import BenchReport
from mpicluster.render.display import Display


def _size(nbytes: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes} {unit}"
        nbytes //= 1024
    return f"{nbytes} GiB"


def show_bench(display: Display, report: BenchReport) -> None:
    rows = [
        [
            f"{a}-{b}",
            f"{p.gbs:.2f}",
            f"{p.latency_us:.1f}",
            f"{p.expected:.2f}",
            "slow" if p.slow else "ok",
            "2nd" if p.round == 2 else "",
        ]
        for p in report.pairs
        for a, b in [p.nodes]
    ]
    display.table(
        f"mpicluster bench: {escape(report.cluster)}: point to point (64 MiB both ways at once)",
        ["pair", "GB/s", "latency us", "expected", "", "pass"],
        rows,
    )
    sweep = [
        [
            _size(s.bytes),
            f"{s.algbw_gbs:.3f}",
            f"{s.busbw_gbs:.3f}",
            "-" if s.efficiency is None else f"{s.efficiency:.0%}",
            "exact" if s.exact else "WRONG",
        ]
        for s in report.allreduce
    ]
    display.table(
        "allreduce over all nodes (efficiency: bus bandwidth / the slowest pair)",
        ["size", "algbw GB/s", "busbw GB/s", "efficiency", "result"],
        sweep,
    )
    for found in report.flagged:
        display.failure(
            f"slow {found.kind} {'-'.join(found.nodes)}: {found.measured:.2f} GB/s, expected "
            f"{found.expected:.2f} ({found.why})"
        )
    line = (
        f"bench: {len(report.pairs)} pair(s), expected {report.expected_gbs:.2f} GB/s "
        f"({report.expected_source}), {len(report.flagged)} flagged in {report.seconds:.1f} s"
    )
    if report.exit_code == 0:
        display.success(line)
    else:
        display.failure(f"{line} (exit {report.exit_code})")
