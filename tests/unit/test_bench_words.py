"""bench's report says what it measured: the expected figure named for what it is, each
pair's verdict in words, the allreduce's small sizes by their latency, the MPI in one
phrase (issue 57). Built from two real reports of the local cluster (tests/unit/data/bench)
through bench's own functions and data classes, and shown as the terminal and
`--report`'s page show them."""

from __future__ import annotations

import io
import json
import statistics
from pathlib import Path

import pytest
from rich.console import Console

from mpicluster.bench import BenchReport, history, plots, runner, verdict
from mpicluster.bench.library import library_words
from mpicluster.bench.measure import shows_latency
from mpicluster.bench.report import expected_words
from mpicluster.render.bench import show_bench
from mpicluster.render.display import Display
from mpicluster.smoke import selected_pmls
from mpicluster.util.text import json_line

DATA = Path(__file__).parent / "data"


def real(name: str) -> dict:
    return json.loads((DATA / "bench" / name).read_text())


def measured(data: dict, number: int) -> dict:
    """A real report's pairs of one pass, as bench_mpi.py reports them."""
    return {
        tuple(p["nodes"]): {"gbs": p["gbs"], "latency_us": p["latency_us"]}
        for p in data["pairs"]
        if p["pass"] == number
    }


def network(data: dict) -> dict:
    return {tuple(p["nodes"]): p["network_gbs"] for p in data["pairs"]}


def swept(data: dict) -> list[dict]:
    """A real report's sweep as bench_mpi.py reports it (one call's time from its rate)."""
    return [
        {**size, "seconds": size["bytes"] / (size["algbw_gbs"] * 1e9)} for size in data["allreduce"]
    ]


def bench_report(data: dict, pml: str = "ob1") -> BenchReport:
    """A real report's measurements judged again as run_bench judges them."""
    first, second = measured(data, 1), measured(data, 2)
    found = BenchReport(data["cluster"], library=data["library"], pml=pml)
    found.seconds, found.efficiency_basis = data["seconds"], "baseline"
    found.pairs = runner.pair_figures(first, second, None, network(data))
    bandwidth = {pair: r["gbs"] for pair, r in first.items()}
    again = {pair: r["gbs"] for pair, r in second.items()}
    found.flagged = verdict.findings(bandwidth, None, again, network(data))
    found.expected_gbs = min(p.expected for p in found.pairs)
    found.expected_source = verdict.expected_basis(verdict.merged(bandwidth, again))
    found.allreduce = runner.sweep_figures(swept(data), min(network(data).values()))
    return found


def terminal(report: BenchReport) -> str:
    display = Display()
    buffer = io.StringIO()
    display.out = Console(file=buffer, width=200, highlight=False)
    show_bench(display, report)
    return buffer.getvalue()


def test_the_expected_figure_is_the_median_of_the_faster_half_and_says_so():
    data = real("healthy-3.json")  # node1-node2 1.135, node1-node3 1.327, node2-node3 0.81
    report = bench_report(data)
    assert statistics.median(p["gbs"] for p in data["pairs"]) == 1.135  # not the figure
    assert report.expected_gbs == data["expected"]["gbs"] == 1.327
    assert report.expected_source == verdict.BY_ALL
    said = "expected 1.33 GB/s: the median of the faster half of the pairs"
    assert said in terminal(report)
    assert "median of the pairs" not in terminal(report)
    assert "expected per pair 1.33 GB/s: the median of the faster half" in plots.page(
        report.to_dict()
    )
    assert report.to_dict()["expected"] == {"gbs": 1.327, "source": verdict.BY_ALL}
    # the issue's figures: a slow pair does not drag the reference down
    issue = {("a", "b"): 0.87, ("a", "c"): 1.35, ("b", "c"): 1.44}
    assert set(verdict.expected_of(issue).values()) == {1.44}


def test_rounds_that_are_their_own_yardstick_say_so_with_their_range():
    names = [("n1", "n2"), ("n3", "n4"), ("n5", "n6"), ("n1", "n3"), ("n2", "n5"), ("n4", "n6")]
    figures = [1.0, 1.1, 1.2, 0.5, 0.55, 0.6]  # the second round on a busier moment
    first = {
        pair: {"gbs": gbs, "latency_us": 12.0} for pair, gbs in zip(names, figures, strict=True)
    }
    rounds = {pair: 1 + i // 3 for i, pair in enumerate(names)}
    pairs = runner.pair_figures(first, {}, None, None, rounds)
    assert [p.expected for p in pairs] == [1.2] * 3 + [0.6] * 3
    assert all(not p.slow for p in pairs)  # 0.5 against its round's 0.6, not the other's
    bandwidth = {pair: r["gbs"] for pair, r in first.items()}
    assert verdict.expected_basis(bandwidth, None, rounds) == verdict.BY_ROUND
    assert expected_words(verdict.BY_ROUND, [p.expected for p in pairs]) == (
        "0.60 to 1.20 GB/s: the median of the faster half of each round's pairs"
    )
    assert verdict.expected_basis(bandwidth, 1.0, rounds) == verdict.BY_EXPECT
    assert expected_words(verdict.BY_EXPECT, [1.0, 1.0]) == "1.00 GB/s (--expect)"


def test_a_pair_below_the_expected_figure_says_why_it_is_ok_or_slow():
    healthy = bench_report(real("healthy-3.json"))
    assert {p.nodes: p.verdict for p in healthy.pairs} == {
        ("node1", "node2"): "ok: 86% of expected, above the 60% threshold",
        ("node1", "node3"): "ok",
        ("node2", "node3"): "ok: 61% of expected, above the 60% threshold",
    }
    assert "ok: 61% of expected, above the 60% threshold" in terminal(healthy)
    assert healthy.to_dict()["pairs"][2]["verdict"].startswith("ok: 61%")
    link = bench_report(real("slow-link-3.json"))  # node1-node2 at 0.06, twice
    slow = [p for p in link.pairs if p.nodes == ("node1", "node2")]
    assert [(p.round, p.slow, p.verdict) for p in slow] == [
        (1, True, "slow: 4% of expected, below the 60% threshold"),
        (2, True, "slow: 4% of expected, below the 60% threshold"),
    ]
    # slow once, fast when measured again: the faster pass counts, and each row says so
    data = real("slow-link-3.json")
    again = {("node1", "node2"): {"gbs": 1.30, "latency_us": 9.0}}
    rows = runner.pair_figures(measured(data, 1), again, None, network(data))
    assert [p.verdict for p in rows if p.nodes == ("node1", "node2")] == [
        "ok: 4% of expected here, 94% in its other pass, above the 60% threshold",
        "ok: 94% of expected, above the 60% threshold",
    ]


def test_a_pair_that_uses_little_of_its_network_says_so():
    data = real("healthy-3.json")
    fast = {**network(data), ("node1", "node2"): 1.135 / 0.2}  # MPI carries a fifth of it
    rows = runner.pair_figures(measured(data, 1), {}, None, fast)
    (odd,) = [p for p in rows if p.slow]
    assert odd.nodes == ("node1", "node2")
    assert odd.verdict == (
        "slow: 86% of expected, but MPI carries 20% of what the network carries here "
        "against 98% on the other pairs, below the 40% threshold"
    )


def test_small_allreduce_sizes_show_their_latency_not_zero_bandwidth():
    report = bench_report(real("healthy-3.json"))
    assert shows_latency(32 << 10) and not shows_latency(64 << 10)
    assert report.allreduce[0].latency_us == pytest.approx(40.0)  # 8 B at 0.0002 GB/s
    text = terminal(report)
    assert "0.000" not in text
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if "│" in line}
    assert "40.0" in rows["8 B"] and "exact" in rows["8 B"]
    assert [cell.strip() for cell in rows["128 KiB"].split("│")[2:6]] == [
        "-",
        "0.530",
        "0.707",
        "52%",
    ]
    page = plots.page(report.to_dict())
    assert "<tr><td>8 B</td><td>40.0</td><td>-</td><td>-</td><td>-</td>" in page
    assert "<tr><td>128 KiB</td><td>-</td><td>0.530</td><td>0.707</td><td>52%</td>" in page
    # --compare: the small sizes by their latency, never by their thousandths of a GB/s
    before = report.to_dict()
    now = json.loads(json.dumps(before))
    now["allreduce"][0]["latency_us"] *= 2
    now["allreduce"][1]["busbw_gbs"] *= 2
    (change,) = history.compare(before, now)
    assert (change.what, change.ratio) == ("allreduce 8 B latency us", 2.0)
    assert history.compare(real("healthy-3.json"), before) == []  # kept before: no latency


def test_the_mpi_is_named_in_one_phrase():
    debian = real("healthy-3.json")["library"]  # as Open MPI 4.1.4 said it, NUL and all
    assert debian.startswith("Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4")
    assert library_words(debian, "ob1") == "Open MPI 4.1.4 (Debian's package), TCP (ob1)"
    capture = (DATA / "gpu-h200" / "run-cuda.txt").read_bytes().decode("utf-8", "replace")
    built = json_line(capture)["library"]  # Open MPI 5.0.7 built by up, pml_base_verbose 10
    pml = ",".join(selected_pmls(capture))
    assert library_words(built, pml) == "Open MPI 5.0.7, TCP (ob1)"
    assert library_words(built, "ucx") == "Open MPI 5.0.7, UCX"
    assert library_words(built) == "Open MPI 5.0.7"
    assert library_words(built, "ob1,ucx") == (
        "Open MPI 5.0.7, ranks selected different PMLs (ob1, ucx)"
    )
    assert library_words("", "") == ""
    report = bench_report(real("healthy-3.json"))
    text = terminal(report)
    assert text.splitlines()[0] == (
        "mpicluster bench: doctor, Open MPI 4.1.4 (Debian's package), TCP (ob1)"
    )
    page = plots.page(report.to_dict())
    assert "package:" not in text and "repo rev" not in page
    assert "Open MPI 4.1.4 (Debian&#x27;s package), TCP (ob1)" in page
    data = report.to_dict()  # the raw line stays in the JSON, beside the phrase
    assert (data["library"], data["pml"]) == (debian, "ob1")
    assert data["mpi"] == "Open MPI 4.1.4 (Debian's package), TCP (ob1)"
