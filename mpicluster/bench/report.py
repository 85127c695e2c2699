"""What bench found, and its JSON form (a stable interface, schema 1):

    {"schema": 1, "cluster": str, "status": "pass"|"warn"|"fail", "seconds": float,
     "expected": {"gbs": float, "source": "median of the pairs"|"--expect"},
     "baseline": {"tool": "iperf3 --bidir"|"ib_write_bw --bidirectional",
                  "note": str (why there is none, or ""),
                  "nodes": {name: {"interface": str, "address": str,
                                   "nic_gbs": float|null, "rdma": {port: float}}}},
     "efficiency_basis": "baseline"|"pairs",
     "sweep_note": str (why the sweep stopped before 256 MiB, or ""),
     "pairs": [{"nodes": [a, b], "gbs": float, "latency_us": float, "expected": float,
                "pass": 1|2, "slow": bool, "network_gbs": float|null}],
     "allreduce": [{"bytes": int, "algbw_gbs": float, "busbw_gbs": float,
                    "efficiency": float|null, "exact": bool}],
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
allreduce can reach. Fields are only ever added to schema 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mpicluster.bench.gpu import GpuFigure
from mpicluster.bench.history import Comparison
from mpicluster.bench.verdict import Finding
from mpicluster.util import exitcodes

SCHEMA = 1


@dataclass(frozen=True)
class PairFigure:
    nodes: tuple[str, str]
    gbs: float
    latency_us: float
    expected: float
    round: int  # 1: the first pass, 2: the second (a suspect's end with a healthy node)
    slow: bool
    network_gbs: float | None = None  # iperf3 --bidir each way (None: not measured)

    def to_dict(self) -> dict:
        return {
            "nodes": list(self.nodes),
            "gbs": round(self.gbs, 3),
            "latency_us": round(self.latency_us, 2),
            "expected": round(self.expected, 3),
            "pass": self.round,
            "slow": self.slow,
            "network_gbs": None if self.network_gbs is None else round(self.network_gbs, 3),
        }


@dataclass(frozen=True)
class SizeFigure:
    bytes: int
    algbw_gbs: float
    busbw_gbs: float
    efficiency: float | None
    exact: bool

    def to_dict(self) -> dict:
        return {
            "bytes": self.bytes,
            "algbw_gbs": round(self.algbw_gbs, 4),
            "busbw_gbs": round(self.busbw_gbs, 4),
            "efficiency": None if self.efficiency is None else round(self.efficiency, 3),
            "exact": self.exact,
        }


@dataclass
class BenchReport:
    cluster: str
    expected_gbs: float = 0.0
    expected_source: str = "median of the pairs"
    library: str = ""
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
