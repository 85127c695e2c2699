"""`bench`: the pairs, the allreduce sweep, what is flagged, and the one-line verdict."""

from __future__ import annotations

from rich.markup import escape

from mpicluster.bench import BenchReport
from mpicluster.bench.history import NOTABLE
from mpicluster.bench.measure import shows_latency
from mpicluster.bench.report import SizeFigure
from mpicluster.render.display import Display, styled
from mpicluster.util.text import message_size


def _cards(report: BenchReport) -> str:
    """Each node's cluster interface and the rate its card says (sysfs), RDMA ports."""
    said = []
    for name, card in report.nodes.items():
        rate = "rate unknown" if card.get("nic_gbs") is None else f"{card['nic_gbs']:.2f} GB/s"
        rdma = "".join(f", {port} {gbs:.1f} GB/s" for port, gbs in card.get("rdma", {}).items())
        said.append(f"{name} {card.get('interface') or '?'} {rate}{rdma}")
    return "; ".join(said)


def show_bench(display: Display, report: BenchReport) -> None:
    display.info(f"mpicluster bench: {report.cluster}" + (f", {report.mpi}" if report.mpi else ""))
    rows = [
        [
            f"{a}-{b}",
            f"{p.gbs:.2f}",
            f"{p.latency_us:.1f}",
            "-" if p.network_gbs is None else f"{p.network_gbs:.2f}",
            f"{p.expected:.2f}",
            styled("fail" if p.slow else "ok", p.verdict or ("slow" if p.slow else "ok")),
            "2nd" if p.round == 2 else "",
        ]
        for p in report.pairs
        for a, b in [p.nodes]
    ]
    display.table(
        "point to point (GB/s: 64 MiB both ways at once; latency: an 8 B ping-pong)",
        [
            "pair",
            "GB/s",
            "latency us",
            f"{report.baseline_program} GB/s",
            "expected",
            "verdict",
            "pass",
        ],
        rows,
    )
    cards = _cards(report)
    if cards:
        display.info(f"cards: {cards}")
    if report.baseline_note:
        display.warning(report.baseline_note)
    display.table(
        "allreduce over all nodes (below 64 KiB its latency, one call's time; from there "
        "its bandwidth; efficiency: bus bandwidth / the slowest "
        + (
            f"link's {report.baseline_program} baseline)"
            if report.efficiency_basis == "baseline"
            else "pair)"
        ),
        ["size", "latency us", "algbw GB/s", "busbw GB/s", "efficiency", "result"],
        [_sweep_row(s) for s in report.allreduce],
    )
    if report.sweep_note:
        display.info(report.sweep_note)
    if report.gpu:
        _show_gpu(display, report)
    if report.comparison is not None:
        _show_comparison(display, report)
    for path in report.written:
        display.info(f"report: {path}")
    for found in report.flagged:
        display.failure(
            f"slow {found.kind} {'-'.join(found.nodes)}: {found.measured:.2f} GB/s, expected "
            f"{found.expected:.2f} ({found.why})"
        )
    first = sum(1 for p in report.pairs if p.round == 1)
    again = len(report.pairs) - first
    line = (
        f"bench: {first} pair(s)"
        + (f" ({again} measured again)" if again else "")
        + f", {len(report.flagged)} flagged in {report.seconds:.1f} s; expected "
        + report.expected_said
    )
    if report.exit_code == 0:
        display.success(line)
    elif report.status == "warn":
        display.warning(f"{line} (exit {report.exit_code})")
    else:
        display.failure(f"{line} (exit {report.exit_code})")


def _sweep_row(size: SizeFigure) -> list[str]:
    """A size below 64 KiB by its latency, a larger one by its bandwidth."""
    if shows_latency(size.bytes):
        bandwidth = ["-", "-", "-"]
        latency = f"{size.latency_us:.1f}"
    else:
        efficiency = "-" if size.efficiency is None else f"{size.efficiency:.0%}"
        bandwidth = [f"{size.algbw_gbs:.3f}", f"{size.busbw_gbs:.3f}", efficiency]
        latency = "-"
    return [message_size(size.bytes), latency, *bandwidth, "exact" if size.exact else "WRONG"]


def _show_comparison(display: Display, report: BenchReport) -> None:
    comparison = report.comparison
    if not comparison.previous:
        display.info("--compare: no earlier run of this cluster is kept: this one is the first")
        return
    if not comparison.changes:
        display.info(
            f"--compare: nothing moved by more than {NOTABLE:.0%} since {comparison.previous}"
        )
        return
    rows = [
        [
            escape(c.what),
            _value(c.before),
            _value(c.now),
            "" if c.ratio is None else f"{c.ratio - 1:+.0%}",
        ]
        for c in comparison.changes
    ]
    display.table(f"since {comparison.previous}", ["what", "before", "now", "change"], rows)


def _value(value) -> str:
    if value is None:
        return "-"
    return f"{value:.3f}" if isinstance(value, float) else escape(str(value))


def _show_gpu(display: Display, report: BenchReport) -> None:
    rows = []
    for figure in report.gpu:
        last = figure.rows[-1] if figure.rows else {}
        rows.append(
            [
                figure.test,
                str(figure.ranks or "-"),
                message_size(last["bytes"]) if last else "-",
                f"{last['busbw_gbs']:.1f}" if last else "-",
                "-" if last.get("efficiency") is None else f"{last['efficiency']:.0%}",
                escape(figure.problem) if figure.problem else "exact",
            ]
        )
    display.table(
        "nccl-tests on the GPU nodes (one rank per GPU; bus bandwidth at the largest size)",
        ["test", "ranks", "size", "busbw GB/s", "efficiency", "result"],
        rows,
    )
