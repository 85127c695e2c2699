"""What bench found, and its JSON form (a stable interface, schema 1):

    {"schema": 1, "cluster": str, "status": "pass"|"warn"|"fail", "seconds": float,
     "library": str (MPI_Get_library_version's first line, as the MPI says it),
     "pml": str (the PML the ranks selected: "ob1", "ucx"; "" when they did not say),
     "mpi": str (both in one phrase: "Open MPI 5.0.7, UCX"),
     "expected": {"gbs": float, "source": "median of the faster half of the pairs"
                  |"median of the faster half of each round's pairs"|"--expect"},
     "baseline": {"tool": "iperf3 --bidir"|"ib_write_bw --bidirectional",
                  "note": str (why there is none, or ""),
                  "nodes": {name: {"interface": str, "address": str,
                                   "nic_gbs": float|null, "rdma": {port: float}}}},
     "efficiency_basis": "baseline"|"pairs",
     "sweep_note": str (why the sweep stopped before 256 MiB, or ""),
     "pairs": [{"nodes": [a, b], "gbs": float, "latency_us": float, "expected": float,
                "pass": 1|2, "slow": bool, "network_gbs": float|null,
                "verdict": str ("ok", "ok: 61% of expected, above the 60% threshold",
                                "slow: ...")}],
     "allreduce": [{"bytes": int, "algbw_gbs": float, "busbw_gbs": float,
                    "latency_us": float, "efficiency": float|null, "exact": bool}],
     "flagged": [{"kind": "node"|"link", "nodes": [...], "measured": float,
                  "expected": float, "why": str}],
     "gpu": [{"test": "all_reduce_perf"|"all_gather_perf"|"sendrecv_perf", "ranks": int,
              "avg_busbw_gbs": float|null, "problem": str ("" when it ran right),
              "rows": [{"bytes": int, "busbw_gbs": float, "exact": bool|null,
                        "efficiency": float|null}]}]   (GPU nodes with nccl-tests),
     "compared": {"previous": file name|"", "changes": [{"what": str, "before": ...,
                  "now": ..., "ratio": float|null}]}   (with --compare only),
     "cordons": {"by": "bench", "cordoned": {node: reason}, "returned": [node, ...],
                 "notes": [str], "written": [node, ...], "missed": {node: why},
                 "problem": str}   (with --cordon only)}

Bandwidths in GB/s (10^9 bytes per second) each way; efficiency is the allreduce's bus
bandwidth over the slowest link's: its baseline ("efficiency_basis": "baseline"),
or its MPI pair's where no baseline was measured (--quick, no iperf3): what a ring
allreduce can reach. The expected figure ("expected": {"gbs"}) is the median of the
faster half of the pairs (the higher of two middle values: a slow node's pairs do not
drag it down), or where each round of pairs is its own yardstick, the lowest round's;
each pair's own is its "expected". An allreduce's "latency_us" is one call's time: what
counts below 64 KiB (measure.LATENCY_BELOW), where its GB/s are a few thousandths.
Fields are only ever added to schema 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mpicluster.bench.gpu import GpuFigure
from mpicluster.bench.history import Comparison
from mpicluster.bench.library import library_words
from mpicluster.bench.verdict import BY_ALL, BY_EXPECT, BY_ROUND, Finding
from mpicluster.util import exitcodes

SCHEMA = 1


def expected_words(source: str, figures: list[float]) -> str:
    """The expected figure and what it is, for a person: "1.44 GB/s: the median of the
    faster half of the pairs"; `figures`: each pair's expected (one per round, where
    each round is its own yardstick: their range is said)."""
    low, high = min(figures, default=0.0), max(figures, default=0.0)
    if source == BY_EXPECT:
        return f"{low:.2f} GB/s (--expect)"
    amount = f"{low:.2f} to {high:.2f} GB/s" if f"{low:.2f}" != f"{high:.2f}" else f"{low:.2f} GB/s"
    if source in (BY_ALL, BY_ROUND):
        return f"{amount}: the {source}"
    return f"{amount} ({source})"


@dataclass(frozen=True)
class PairFigure:
    nodes: tuple[str, str]
    gbs: float
    latency_us: float
    expected: float
    round: int  # 1: the first pass, 2: the second (a suspect's end with a healthy node)
    slow: bool
    network_gbs: float | None = None  # iperf3 --bidir each way (None: not measured)
    verdict: str = ""  # verdict.pair_words: "ok", "ok: 61% of expected, above ...", "slow: ..."

    def to_dict(self) -> dict:
        return {
            "nodes": list(self.nodes),
            "gbs": round(self.gbs, 3),
            "latency_us": round(self.latency_us, 2),
            "expected": round(self.expected, 3),
            "pass": self.round,
            "slow": self.slow,
            "network_gbs": None if self.network_gbs is None else round(self.network_gbs, 3),
            "verdict": self.verdict or ("slow" if self.slow else "ok"),
        }


@dataclass(frozen=True)
class SizeFigure:
    bytes: int
    algbw_gbs: float
    busbw_gbs: float
    efficiency: float | None
    exact: bool
    latency_us: float = 0.0  # one call's time (what counts below measure.LATENCY_BELOW)

    def to_dict(self) -> dict:
        return {
            "bytes": self.bytes,
            "algbw_gbs": round(self.algbw_gbs, 4),
            "busbw_gbs": round(self.busbw_gbs, 4),
            "latency_us": round(self.latency_us, 2),
            "efficiency": None if self.efficiency is None else round(self.efficiency, 3),
            "exact": self.exact,
        }


@dataclass
class BenchReport:
    cluster: str
    expected_gbs: float = 0.0
    expected_source: str = BY_ALL  # what expected_gbs is: verdict.BY_ALL, BY_ROUND, BY_EXPECT
    library: str = ""  # MPI_Get_library_version's first line
    pml: str = ""  # the PML(s) the ranks selected, comma-separated ("" when unsaid)
    pairs: list[PairFigure] = field(default_factory=list)
    allreduce: list[SizeFigure] = field(default_factory=list)
    flagged: list[Finding] = field(default_factory=list)
    seconds: float = 0.0
    nodes: dict[str, dict] = field(default_factory=dict)  # NodeNetwork.to_dict() by name
    baseline_note: str = ""  # why a baseline is missing
    baseline_tool: str = "iperf3 --bidir"  # or "ib_write_bw --bidirectional" (RDMA)
    sweep_note: str = ""  # why the sweep stopped before its largest size
    efficiency_basis: str = "pairs"  # "baseline": the slowest link's iperf3/ib_write_bw
    kept: str = ""  # where this run is kept (the state folder)
    comparison: Comparison | None = None  # with the last run (--compare)
    written: list[str] = field(default_factory=list)  # --report's files
    gpu: list[GpuFigure] = field(default_factory=list)  # nccl-tests on GPU nodes
    cordons: dict | None = None  # what --cordon changed (health.AppliedFindings.to_dict())

    @property
    def baseline_program(self) -> str:
        """The baseline's program alone: "iperf3" or "ib_write_bw"."""
        return self.baseline_tool.split()[0]

    @property
    def mpi(self) -> str:
        """The MPI and its transport in one phrase: "Open MPI 5.0.7, UCX"."""
        return library_words(self.library, self.pml)

    @property
    def expected_said(self) -> str:
        """The expected figure and what it is ("1.44 GB/s: the median of the ...")."""
        figures = [p.expected for p in self.pairs] or [self.expected_gbs]
        return expected_words(self.expected_source, figures)

    @property
    def status(self) -> str:
        wrong = any(not s.exact for s in self.allreduce) or any(g.problem for g in self.gpu)
        if self.flagged or wrong:
            return "fail"
        return "warn" if self.baseline_note else "pass"

    @property
    def exit_code(self) -> int:
        return {
            "fail": exitcodes.CHECK_FAILED,
            "warn": exitcodes.WARNINGS,
        }.get(self.status, exitcodes.OK)

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA,
            "cluster": self.cluster,
            "status": self.status,
            "seconds": round(self.seconds, 2),
            "library": self.library,
            "pml": self.pml,
            "mpi": self.mpi,
            "expected": {"gbs": round(self.expected_gbs, 3), "source": self.expected_source},
            "baseline": {
                "tool": self.baseline_tool,
                "note": self.baseline_note,
                "nodes": self.nodes,
            },
            "efficiency_basis": self.efficiency_basis,
            "sweep_note": self.sweep_note,
            "pairs": [p.to_dict() for p in self.pairs],
            "allreduce": [s.to_dict() for s in self.allreduce],
            "flagged": [f.to_dict() for f in self.flagged],
            "gpu": [g.to_dict() for g in self.gpu],
            **({"compared": self.comparison.to_dict()} if self.comparison else {}),
            **({"cordons": self.cordons} if self.cordons is not None else {}),
        }
