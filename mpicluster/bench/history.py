"""bench's runs kept in the cluster's state folder, and what changed since the last one.

Every run's JSON report (report.py's schema) is written to
`<state>/clusters/<cluster>/bench/<UTC time>.json`, whole or not at all; the newest
KEEP are kept. `compare(before, now)` lists what moved by more than NOTABLE between two
reports: each pair measured in both (MPI and iperf3), the allreduce's bus bandwidth per
size (its latency below 64 KiB), and what is flagged now that was not (or no longer is).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from mpicluster.bench.measure import shows_latency
from mpicluster.cluster.state import cluster_dir
from mpicluster.util.files import write_atomic
from mpicluster.util.text import message_size

KEEP = 50
#: A change smaller than this fraction is the noise of two runs, not a change.
NOTABLE = 0.15


def runs_dir(cluster: str) -> Path:
    return cluster_dir(cluster) / "bench"


def keep(report: dict) -> Path:
    """Write this run's report beside the earlier ones; drop the oldest past KEEP."""
    folder = runs_dir(report["cluster"])
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = folder / f"{stamp}.json"
    number = 1
    while path.exists():
        number += 1
        path = folder / f"{stamp}-{number}.json"
    write_atomic(path, json.dumps(report, indent=1, sort_keys=True) + "\n", mode=0o600)
    for old in sorted(folder.glob("*.json"))[:-KEEP]:
        old.unlink(missing_ok=True)
    return path


def last(cluster: str) -> tuple[Path, dict] | None:
    """The newest kept run that reads as a report (None: no earlier run)."""
    for path in sorted(runs_dir(cluster).glob("*.json"), reverse=True):
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(report, dict) and report.get("schema") == 1:
            return path, report
    return None


@dataclass(frozen=True)
class Change:
    what: str  # "node1-node2", "node1-node2 iperf3", "allreduce 64 MiB", "flagged",
    # "allreduce 8 B latency us"
    before: float | str | None
    now: float | str | None
    ratio: float | None  # now / before

    def to_dict(self) -> dict:
        return {
            "what": self.what,
            "before": self.before,
            "now": self.now,
            "ratio": None if self.ratio is None else round(self.ratio, 3),
        }


def compare(before: dict, now: dict) -> list[Change]:
    """What moved by more than NOTABLE from `before` to `now` (two reports' dicts)."""
    changes: list[Change] = []
    earlier = {tuple(p["nodes"]): p for p in before.get("pairs", [])}
    for pair in now.get("pairs", []):
        old = earlier.get(tuple(pair["nodes"]))
        if old is None:
            continue
        name = "-".join(pair["nodes"])
        changes += _moved(name, old.get("gbs"), pair.get("gbs"))
        changes += _moved(f"{name} iperf3", old.get("network_gbs"), pair.get("network_gbs"))
    sizes = {s["bytes"]: s for s in before.get("allreduce", [])}
    for size in now.get("allreduce", []):
        old = sizes.get(size["bytes"])
        if old is None:
            continue
        what = f"allreduce {message_size(size['bytes'])}"
        if shows_latency(size["bytes"]):  # a few thousandths of a GB/s: its time tells
            changes += _moved(f"{what} latency us", old.get("latency_us"), size.get("latency_us"))
        else:
            changes += _moved(what, old["busbw_gbs"], size["busbw_gbs"])
    then = {_finding(f) for f in before.get("flagged", [])}
    found = {_finding(f) for f in now.get("flagged", [])}
    changes += [Change("flagged", None, f, None) for f in sorted(found - then)]
    changes += [Change("flagged", f, None, None) for f in sorted(then - found)]
    return changes


def _moved(what: str, before, now) -> list[Change]:
    if not isinstance(before, (int, float)) or not isinstance(now, (int, float)) or before <= 0:
        return []
    ratio = now / before
    return [Change(what, before, now, ratio)] if abs(ratio - 1) > NOTABLE else []


def _finding(found: dict) -> str:
    return f"slow {found['kind']} {'-'.join(found['nodes'])}"


@dataclass(frozen=True)
class Comparison:
    previous: str  # the earlier run's file name ("" when there was none)
    changes: list[Change]

    def to_dict(self) -> dict:
        return {"previous": self.previous, "changes": [c.to_dict() for c in self.changes]}


def record(report: dict) -> tuple[Path, Comparison]:
    """Keep this run; what changed since the run before it (none: previous "")."""
    earlier = last(report["cluster"])
    kept = keep(report)
    if earlier is None:
        return kept, Comparison("", [])
    return kept, Comparison(earlier[0].name, compare(earlier[1], report))
