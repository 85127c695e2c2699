"""What bench found, and its JSON form (a stable interface, schema 1):

    {"schema": 1, "cluster": str, "status": "pass"|"warn"|"fail", "seconds": float,
     "expected": {"gbs": float, "source": "median of the pairs"|"--expect"},
     "pairs": [{"nodes": [a, b], "gbs": float, "latency_us": float, "expected": float,
                "pass": 1|2, "slow": bool}],
     "allreduce": [{"bytes": int, "algbw_gbs": float, "busbw_gbs": float,
                    "efficiency": float|null, "exact": bool}],
     "flagged": [{"kind": "node"|"link", "nodes": [...], "measured": float,
                  "expected": float, "why": str}]}

Bandwidths in GB/s (10^9 bytes per second) each way; efficiency is the allreduce's bus
bandwidth over the slowest pair's bandwidth (what a ring allreduce can reach).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mpicluster import exitcodes
from mpicluster.bench.verdict import Finding

SCHEMA = 1


@dataclass(frozen=True)
class PairFigure:
    nodes: tuple[str, str]
    gbs: float
    latency_us: float
    expected: float
    round: int  # 1: the first pass, 2: the second (a suspect's end with a healthy node)
    slow: bool

    def to_dict(self) -> dict:
        return {
            "nodes": list(self.nodes),
            "gbs": round(self.gbs, 3),
            "latency_us": round(self.latency_us, 2),
            "expected": round(self.expected, 3),
            "pass": self.round,
            "slow": self.slow,
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

    @property
    def status(self) -> str:
        if self.flagged or any(not s.exact for s in self.allreduce):
            return "fail"
        return "pass"

    @property
    def exit_code(self) -> int:
        return exitcodes.DOCTOR_FAIL if self.status == "fail" else exitcodes.DOCTOR_PASS

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA,
            "cluster": self.cluster,
            "status": self.status,
            "seconds": round(self.seconds, 2),
            "library": self.library,
            "expected": {"gbs": round(self.expected_gbs, 3), "source": self.expected_source},
            "pairs": [p.to_dict() for p in self.pairs],
            "allreduce": [s.to_dict() for s in self.allreduce],
            "flagged": [f.to_dict() for f in self.flagged],
        }
