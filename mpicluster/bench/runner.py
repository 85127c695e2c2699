"""`run_bench`: the pairs measured in rounds through the network and the MPI, judged,
the allreduce sweep, the GPU part: one BenchReport (the package's face names it)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from mpicluster.bench import gpu, measure, network, schedule, verdict
from mpicluster.bench.report import BenchReport, PairFigure, SizeFigure
from mpicluster.cluster import node_choice
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.nodes import pairs as pair_plan
from mpicluster.util.errors import UsageError
from mpicluster.util.text import message_size

#: Iterations of the large message per pair, and of the small one.
ITERATIONS = 8
SMALL_ITERATIONS = 200
#: Seconds one mpirun may take: per round of pairs, and for the allreduce sweep.
ROUND_SECONDS = 60
SWEEP_SECONDS = 300
#: Seconds after which the sweep measures no larger size (what it has is reported).
SWEEP_BUDGET = 90


def check_options(plan: ClusterPlan, nodes: list[str] | None, expect: float | None) -> list[str]:
    """The nodes to measure (the inventory's order); UsageError naming a bad option."""
    if expect is not None and not 0 < expect < math.inf:
        raise UsageError(f"--expect {expect}: must be a bandwidth in GB/s above 0")
    names = [n.name for n in plan.nodes]
    if nodes:
        chosen = node_choice.check(names, nodes)
        names = [n for n in names if n in chosen]
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
    """`quick`: ring pairs, no baseline, one allreduce size, a suspect only measured
    again (doctor --perf's form)."""
    names = check_options(plan, nodes, expect)
    return _Bench(plan, names, expect, quick, on_progress).run(all_pairs, seed)


class _Bench:
    """One run: each round of pairs through iperf3 then MPI, the verdict, the sweep."""

    def __init__(self, plan, names, expect, quick, on_progress) -> None:
        self.plan, self.names, self.expect, self.quick = plan, names, expect, quick
        self.progress = on_progress or (lambda message: None)
        self.index = {name: i for i, name in enumerate(names)}
        self.report = BenchReport(plan.cluster)
        self.network: dict = {}  # pair: iperf3's GB/s each way (None: not measured)
        self.address: dict[str, str] = {}
        self.rdma_ports: dict[str, str] | None = None  # ib_write_bw's, where all have one
        self.round_of: dict = {}  # pair: the round it was (last) measured in
        self.rounds_done = 0

    def run(self, all_pairs: bool, seed: int | None) -> BenchReport:
        started = time.monotonic()
        self.major = measure.mpi_major(self.plan)
        if self.quick:
            first = self._ring()
        else:
            seed = seed if seed is not None else pair_plan.seed_for(self.plan.cluster)
            first = schedule.pairs(self.names, all_pairs=all_pairs, seed=seed)
            self._look_at_nodes()
        measured = self._pairs(first, "Point to point")
        bandwidth = {pair: r["gbs"] for pair, r in measured.items()}
        suspect = verdict.suspects(bandwidth, self.expect, self._links(), self.round_of)
        second: dict = {}
        if suspect:
            # each suspect again (once slow may be noise), its ends with healthy nodes
            others = [] if self.quick else verdict.retests(bandwidth, suspect, self.names)
            again = suspect + others
            second = self._pairs(again, f"Second pass for {len(suspect)} slow pair(s)")
        self._judge(measured, second)
        links = self._links()
        slowest = min(links.values()) if links else min(p.gbs for p in self.report.pairs)
        self.report.efficiency_basis = "baseline" if links else "pairs"
        self._sweep(slowest)
        if gpu.wanted(self.plan) and not self.quick:
            count = self.plan.total_gpus
            self.progress(f"nccl-tests on {count} GPU(s): {', '.join(gpu.TESTS)}")
            self.report.gpu = gpu.run(self.plan, self.major, min(links.values()) if links else None)
        self.report.seconds = time.monotonic() - started
        return self.report

    def _links(self) -> dict:
        """The pairs iperf3 measured, and what it carried."""
        return {pair: gbs for pair, gbs in self.network.items() if gbs}

    def _judge(self, measured: dict, second: dict) -> None:
        """Each pair's figure against what is expected of it, and the findings."""
        bandwidth = {pair: r["gbs"] for pair, r in measured.items()}
        bandwidth2 = {pair: r["gbs"] for pair, r in second.items()}
        self.report.pairs = pair_figures(measured, second, self.expect, self.network, self.round_of)
        self.report.flagged = verdict.findings(
            bandwidth,
            self.expect,
            bandwidth2,
            self._links(),
            self.report.baseline_program,
            self.round_of,
        )
        expected = [p.expected for p in self.report.pairs]
        self.report.expected_gbs = self.expect or min(expected, default=0.0)
        self.report.expected_source = verdict.expected_basis(
            verdict.merged(bandwidth, bandwidth2), self.expect, self.round_of
        )

    def _ring(self) -> list[tuple[str, str]]:
        names, index = self.names, self.index
        ring = {verdict.key(names[i], names[(i + 1) % len(names)]) for i in range(len(names))}
        return sorted(ring, key=lambda p: (index[p[0]], index[p[1]]))

    def _look_at_nodes(self) -> None:
        """Each node's cluster interface and rates; whether iperf3 is there to use."""
        found = network.node_facts(self.plan, self.names)
        self.report.nodes = {name: found[name].to_dict() for name in self.names}
        unread = [n for n in self.names if found[n].error]
        if unread:
            self.report.baseline_note = (
                f"no baseline: {unread[0]}'s network could not be read ({found[unread[0]].error})"
            )
            return
        without = [n for n in self.names if "iperf3" not in found[n].tools]
        if without:
            self.report.baseline_note = (
                f"no baseline: iperf3 is not on {', '.join(without)} (`mpicluster up` installs it)"
            )
            return
        self.address = {n: found[n].address or self._host(n) for n in self.names}
        self.rdma_ports = network.rdma_ports(found)
        if self.rdma_ports:
            self.report.baseline_tool = "ib_write_bw --bidirectional"

    def _host(self, name: str) -> str:
        return next(node.host for node in self.plan.nodes if node.name == name)

    def _pairs(self, wanted: list[tuple[str, str]], label: str) -> dict:
        """Each round: its pairs through iperf3 (the baseline), then through MPI."""
        # one name for a pair everywhere: verdict.key's order ("node10" before "node9")
        rounds = [[verdict.key(a, b) for a, b in group] for group in schedule.rounds(wanted)]
        self.progress(f"{label}: {len(wanted)} pair(s) in {len(rounds)} round(s) of disjoint pairs")
        found: dict = {}
        for number, group in enumerate(rounds, 1):
            self.rounds_done += 1
            self.round_of.update(dict.fromkeys(group, self.rounds_done))
            if self.address:
                for pair, (gbs, why) in network.measure_round(
                    self.plan, group, self.address, self.rdma_ports
                ).items():
                    self.network[pair] = gbs
                    if gbs is None:
                        self.report.baseline_note = (
                            f"{self.report.baseline_program} {pair[0]}-{pair[1]}: {why}"
                        )
            found.update(self._mpi_round(group))
            figures = ", ".join(self._said(pair, found[pair]) for pair in group)
            self.progress(f"  round {number}/{len(rounds)}: {figures}")
        return found

    def _said(self, pair, result: dict) -> str:
        carried = self.network.get(pair)
        return f"{pair[0]}-{pair[1]} {result['gbs']:.2f} GB/s" + (
            f" ({self.report.baseline_program} {carried:.2f})" if carried else ""
        )

    def _mpi_round(self, group: list[tuple[str, str]]) -> dict:
        """One round of pairs, one mpirun over the round's nodes."""
        members = [n for n in self.names if any(n in pair for pair in group)]
        rank = {name: i for i, name in enumerate(members)}
        spec = {
            "mode": "pairs",
            "rounds": [[[rank[a], rank[b]] for a, b in group]],
            "bytes": measure.LARGE,
            "iterations": ITERATIONS,
            "small": measure.SMALL,
            "small_iterations": SMALL_ITERATIONS,
        }
        found = measure.run(self.plan, members, spec, ROUND_SECONDS, self.major)
        self.report.library = found.get("library", "")
        return {
            verdict.key(members[r["pair"][0]], members[r["pair"][1]]): r for r in found["pairs"]
        }

    def _sweep(self, slowest: float) -> None:
        sizes = measure.SWEEP[-1:] if self.quick else measure.SWEEP
        self.progress(f"Allreduce over {len(self.names)} nodes, {len(sizes)} size(s)")
        spec = {"mode": "allreduce", "sizes": sizes, "budget": SWEEP_BUDGET}
        swept = measure.run(self.plan, self.names, spec, SWEEP_SECONDS, self.major)
        self.report.allreduce = sweep_figures(swept["sizes"], slowest)
        self.report.library = swept.get("library") or self.report.library
        self.report.pml = ",".join(swept.get("pmls", []))
        if 0 < len(swept["sizes"]) < len(sizes):
            last = message_size(swept["sizes"][-1]["bytes"])
            self.report.sweep_note = (
                f"the allreduce sweep stopped after {last}: {SWEEP_BUDGET} s spent (a slow "
                "node or link makes the larger sizes take minutes)"
            )


def pair_figures(
    measured: dict,
    second: dict,
    expect: float | None = None,
    network: dict | None = None,
    rounds: dict | None = None,
) -> list[PairFigure]:
    """Each pair's measurement (bench_mpi.py's: gbs, latency_us) of the first pass and
    of the second, judged on both: what is expected of it, whether it is slow, and its
    verdict in words. `network`: the baseline's GB/s by pair (None: not measured)."""
    bandwidth = {pair: r["gbs"] for pair, r in measured.items()}
    everything = verdict.merged(bandwidth, {pair: r["gbs"] for pair, r in second.items()})
    links = {pair: gbs for pair, gbs in (network or {}).items() if gbs}
    expected = verdict.expected_of(everything, expect, rounds)
    too_slow = verdict.slow_reasons(everything, expected, links, rounds)
    return [
        PairFigure(
            pair,
            r["gbs"],
            r["latency_us"],
            expected[pair],
            round_number,
            pair in too_slow,
            (network or {}).get(pair),
            verdict.pair_words(r["gbs"], everything[pair], expected[pair], too_slow.get(pair)),
        )
        for results, round_number in ((measured, 1), (second, 2))
        for pair, r in results.items()
    ]


def sweep_figures(rows: list[dict], slowest: float) -> list[SizeFigure]:
    """The allreduce sweep, each size's efficiency against the slowest link (its
    baseline, or its MPI pair where there is none) and one call's time (bench_mpi.py's
    "seconds": the slowest rank's mean)."""
    return [
        SizeFigure(
            row["bytes"],
            row["algbw_gbs"],
            row["busbw_gbs"],
            row["busbw_gbs"] / slowest if slowest > 0 else None,
            row["exact"],
            row["seconds"] * 1e6,
        )
        for row in rows
    ]
