"""`bench --report DIR`: what a person looks at after a run.

- `heatmap.png`: each measured pair's bandwidth (GB/s each way), node by node, a slow
  pair's cell marked and a flagged node's name in red;
- `busbw.png`: the allreduce's bus bandwidth against message size, with the slowest
  link's baseline as a line;
- `index.html`: both pictures and the tables (the allreduce below 64 KiB by its latency,
  from there by its bandwidth, as the terminal shows it).

Each PNG carries the figures it draws in its `Description` text (JSON), so what it
shows can be checked without reading pixels. matplotlib is the `report` extra
(`pip install 'mpicluster[report]'`); it is imported only here.
"""

from __future__ import annotations

import html
import importlib.util
import json
import math
from pathlib import Path

from mpicluster.bench.measure import shows_latency
from mpicluster.bench.report import expected_words
from mpicluster.util.errors import UsageError
from mpicluster.util.files import write_atomic
from mpicluster.util.text import message_size

FILES = ("heatmap.png", "busbw.png", "index.html")


def _have_matplotlib() -> None:
    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError(
            "--report needs matplotlib, which is not installed",
            hint="pip install 'mpicluster[report]'",
        )


def _pyplot():
    _have_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    return pyplot


def check_folder(folder: Path) -> None:
    """Before a run: the folder can be written (made if missing), or UsageError."""
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"--report {folder}: not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--report {folder}: {exc.strerror}") from None
    _have_matplotlib()


def matrix(report: dict) -> tuple[list[str], list[list[float | None]]]:
    """The nodes (in the order measured) and each pair's GB/s (None: not measured)."""
    names: list[str] = []
    for pair in report["pairs"]:
        names += [n for n in pair["nodes"] if n not in names]
    where = {name: i for i, name in enumerate(names)}
    cells: list[list[float | None]] = [[None] * len(names) for _ in names]
    for pair in report["pairs"]:
        a, b = (where[n] for n in pair["nodes"])
        cells[a][b] = cells[b][a] = pair["gbs"]
    return names, cells


def write(report: dict, folder: Path) -> list[Path]:
    """The three files in `folder`, each whole or not at all."""
    pyplot = _pyplot()
    flagged = sorted({n for f in report["flagged"] if f["kind"] == "node" for n in f["nodes"]})
    slow = [p["nodes"] for p in report["pairs"] if p["slow"]]
    names, cells = matrix(report)
    heat = {"nodes": names, "gbs": cells, "slow_pairs": slow, "flagged_nodes": flagged}
    figure, axes = pyplot.subplots(figsize=(2 + 0.6 * len(names), 1.5 + 0.6 * len(names)))
    shown = [[math.nan if v is None else v for v in row] for row in cells]
    image = axes.imshow(shown, cmap="viridis", vmin=0)
    figure.colorbar(image, ax=axes, label="GB/s each way")
    axes.set_xticks(range(len(names)), names, rotation=90)
    axes.set_yticks(range(len(names)), names)
    for label in [*axes.get_xticklabels(), *axes.get_yticklabels()]:
        if label.get_text() in flagged:
            label.set_color("red")
    if len(names) <= 24:
        for i, row in enumerate(cells):
            for j, value in enumerate(row):
                if value is not None:
                    axes.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7)
    axes.set_title(f"{report['cluster']}: pairs over MPI")
    _save(pyplot, figure, folder / "heatmap.png", heat)

    sizes = [s["bytes"] for s in report["allreduce"]]
    bus = [s["busbw_gbs"] for s in report["allreduce"]]
    slowest = _slowest_link(report)
    curve = {"bytes": sizes, "busbw_gbs": bus, "slowest_link_gbs": slowest}
    figure, axes = pyplot.subplots(figsize=(7, 4))
    axes.plot(sizes, bus, marker="o", label="allreduce bus bandwidth")
    if slowest:
        tool = report.get("baseline", {}).get("tool", "iperf3").split()[0]
        base = report.get("efficiency_basis") == "baseline"
        said = f"slowest link ({tool})" if base else "slowest pair (MPI)"
        axes.axhline(slowest, color="grey", linestyle="--", label=said)
    axes.set_ylim(bottom=0)
    axes.set_xscale("log", base=2)
    axes.set_xticks(sizes, [message_size(n) for n in sizes], rotation=45)
    axes.set_xlabel("message size")
    axes.set_ylabel("GB/s")
    axes.legend()
    axes.set_title(f"{report['cluster']}: allreduce over {len(names)} nodes")
    _save(pyplot, figure, folder / "busbw.png", curve)

    write_atomic(folder / "index.html", page(report))
    return [folder / name for name in FILES]


def _slowest_link(report: dict) -> float | None:
    key = "network_gbs" if report.get("efficiency_basis") == "baseline" else "gbs"
    values = [p[key] for p in report["pairs"] if p.get(key)]
    return min(values) if values else None


def _save(pyplot, figure, path: Path, data: dict) -> None:
    partial = path.with_name(f".{path.name}.partial")
    figure.tight_layout()
    figure.savefig(partial, format="png", dpi=110, metadata={"Description": json.dumps(data)})
    pyplot.close(figure)
    partial.replace(path)


def page(report: dict) -> str:
    """The HTML page: verdict, pictures, the pairs and the sweep (every value escaped)."""
    e = html.escape
    flagged = "".join(
        f"<li><b>slow {e(f['kind'])} {e('-'.join(f['nodes']))}</b>: {f['measured']:.2f} GB/s, "
        f"expected {f['expected']:.2f} ({e(f['why'])})</li>"
        for f in report["flagged"]
    )
    pairs = "".join(
        f"<tr><td>{e('-'.join(p['nodes']))}</td><td>{p['gbs']:.2f}</td>"
        f"<td>{p['latency_us']:.1f}</td><td>{_number(p.get('network_gbs'))}</td>"
        f"<td>{p['expected']:.2f}</td>"
        f"<td>{e(p.get('verdict') or ('slow' if p['slow'] else 'ok'))}</td></tr>"
        for p in report["pairs"]
    )
    sweep = "".join(_sweep_row(s) for s in report["allreduce"])
    gpu = "".join(
        f"<tr><td>{e(g['test'])}</td><td>{g['ranks']}</td><td>{message_size(r['bytes'])}</td>"
        f"<td>{r['busbw_gbs']:.1f}</td><td>{_percent(r['efficiency'])}</td>"
        f"<td>{'exact' if r['exact'] else 'WRONG' if r['exact'] is False else '-'}</td></tr>"
        for g in report.get("gpu", [])
        for r in g["rows"][-1:]
    )
    title = f"mpicluster bench: {e(report['cluster'])}"
    tool = report.get("baseline", {}).get("tool", "iperf3").split()[0]
    expected = expected_words(
        report["expected"]["source"],
        [p["expected"] for p in report["pairs"]] or [report["expected"]["gbs"]],
    )
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif;margin:2em}}td,th{{padding:2px 10px;text-align:right}}
th{{background:#eee}}li b{{color:#b00}}</style></head><body>
<h1>{title}</h1>
<p>{e(report.get("mpi") or "")}</p>
<p>status <b>{e(report["status"])}</b>; {len(report["pairs"])} pair(s) in
{report["seconds"]:.0f} s; expected per pair {e(expected)}</p>
<ul>{flagged or "<li>nothing flagged</li>"}</ul>
<img src="heatmap.png" alt="bandwidth of each pair"> <img src="busbw.png" alt="allreduce">
<h2>Pairs (GB/s: 64 MiB both ways at once; latency: an 8 B ping-pong)</h2>
<table><tr><th>pair</th><th>GB/s</th><th>latency us</th><th>{e(tool)} GB/s</th>
<th>expected</th><th>verdict</th></tr>{pairs}</table>
<h2>Allreduce over all nodes (below 64 KiB its latency, one call's time)</h2>
<table><tr><th>size</th><th>latency us</th><th>algbw GB/s</th><th>busbw GB/s</th>
<th>efficiency</th><th></th></tr>
{sweep}</table>
{_gpu_table(gpu)}
</body></html>
"""


def _sweep_row(size: dict) -> str:
    """A size below 64 KiB by its latency, a larger one by its bandwidth."""
    if shows_latency(size["bytes"]):
        latency = size.get("latency_us")  # a report kept before it was measured: none
        said = "-" if latency is None else f"{latency:.1f}"
        figures = f"<td>{said}</td><td>-</td><td>-</td><td>-</td>"
    else:
        figures = (
            f"<td>-</td><td>{size['algbw_gbs']:.3f}</td><td>{size['busbw_gbs']:.3f}</td>"
            f"<td>{_percent(size['efficiency'])}</td>"
        )
    result = "exact" if size["exact"] else "WRONG"
    return f"<tr><td>{message_size(size['bytes'])}</td>{figures}<td>{result}</td></tr>"


def _gpu_table(rows: str) -> str:
    if not rows:
        return ""
    return (
        "<h2>nccl-tests on the GPU nodes (one rank per GPU, the largest size)</h2>\n"
        "<table><tr><th>test</th><th>ranks</th><th>size</th><th>busbw GB/s</th>"
        f"<th>efficiency</th><th></th></tr>{rows}</table>"
    )


def _number(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def _percent(value) -> str:
    return "-" if value is None else f"{value:.0%}"
