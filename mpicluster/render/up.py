"""`up` and `smoke`: the per-host table, the ssh env matrix, the allreduce figures."""

from __future__ import annotations

from rich.markup import escape

from mpicluster.provision import UpResult
from mpicluster.render.display import Display, mark, styled
from mpicluster.smoke import AllreduceResult, SmokeReport


def show_up(display: Display, result: UpResult) -> None:
    playbook = result.playbook
    if playbook is not None:
        rows = [
            [
                escape(name),
                styled(stats.status),
                stats.ok,
                stats.changed,
                stats.failed,
                stats.unreachable,
                f"{stats.seconds:.0f}s",
            ]
            for name, stats in playbook.hosts.items()
        ]
        display.table(
            f"mpicluster up: {result.cluster} ({playbook.seconds:.0f} s)",
            ["host", "status", "ok", "changed", "failed", "unreachable", "time"],
            rows,
        )
        for name, stats in playbook.hosts.items():
            for failure in stats.failures[:3]:
                display.error(f"{name}: {failure}")
        display.info(f"log: {playbook.log}")
        display.info(f"rerun by hand: {playbook.command}")
    if result.smoke is not None:
        show_smoke(display, result.smoke)


def show_smoke(display: Display, report: SmokeReport) -> None:
    nodes = report.nodes
    if len(nodes) <= 32:
        rows = []
        for source in nodes:
            cells = []
            for target in nodes:
                pair = report.pair(source, target)
                cells.append(mark(bool(pair and pair.ok), "ok", "X"))
            rows.append([escape(source), *cells])
        display.table("ssh env matrix (row: from, column: to)", ["from \\ to", *nodes], rows)
    else:
        good = sum(p.ok for p in report.pairs)
        display.info(f"ssh env matrix: {good}/{len(report.pairs)} pairs ok")
    for pair in report.pairs:
        if not pair.ok:
            display.error(f"{pair.source} -> {pair.target}: {pair.problem}")
    for run in (report.allreduce, report.horovod):
        if run is not None:
            _show_allreduce(display, run)


def _show_allreduce(display: Display, run: AllreduceResult) -> None:
    title = "MPI allreduce" if run.kind == "mpi4py" else "Horovod allreduce"
    if run.ok:
        rows = [
            [
                r["elements"],
                _bytes(r["bytes"]),
                f"{r['seconds'] * 1e3:.3f}",
                f"{r['algbw_gbs']:.3f}",
                f"{r['busbw_gbs']:.3f}",
                mark(r["exact"], "exact"),
            ]
            for r in run.sizes
        ]
        display.table(
            escape(
                f"{title}: {run.ranks} ranks on {len(set(run.hosts))} nodes from {run.head} "
                f"({run.library})"
            ),
            ["elements", "size", "time (ms)", "algbw (GB/s)", "busbw (GB/s)", "result"],
            rows,
        )
    else:
        display.error(f"{title} from {run.head}: {run.problem}", run.cause)
        if run.output_tail:
            display.detail(run.output_tail)


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
