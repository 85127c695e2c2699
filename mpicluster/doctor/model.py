"""What doctor finds: one Result per host (or host pair), grouped by check.

The JSON form (`DoctorReport.to_dict`) is a stable interface, schema 1:

    {"schema": 1, "cluster": str, "seconds": float,
     "summary": {"pass": int, "warn": int, "fail": int},
     "checks": [{"name": str, "title": str, "not_checked": [node, ...],
                 "results": [{"status": "pass"|"warn"|"fail", "node": str|null,
                              "peer": str|null, "evidence": str, "fix": str|null}],
                 "details": [...]}],       (only some checks: launch lists its launches)
     "cordons": {"by": "doctor", "cordoned": {node: reason}, "returned": [node, ...],
                 "notes": [str], "written": [node, ...], "missed": {node: why},
                 "problem": str}}         (with --cordon only)

`node` is the host a result is about (null: the whole cluster); `peer` the other end
of a host pair. `not_checked` lists nodes a check could not look at because doctor
could not reach them (the `ssh` check says why).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from mpicluster.util import exitcodes

SCHEMA = 1


class Status(str, Enum):  # noqa: UP042 (the node's health check runs this on Python 3.10)
    PASS = "pass"  # noqa: S105 (a status, not a password)
    WARN = "warn"
    FAIL = "fail"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


_RANK = {Status.PASS: 0, Status.WARN: 1, Status.FAIL: 2}


@dataclass(frozen=True)
class Result:
    status: Status
    node: str | None
    evidence: str
    fix: str | None = None
    peer: str | None = None

    def to_dict(self, fix_hints: bool = True) -> dict:
        return {
            "status": str(self.status),
            "node": self.node,
            "peer": self.peer,
            "evidence": self.evidence,
            "fix": self.fix if fix_hints else None,
        }


def passed(node: str | None, evidence: str, peer: str | None = None) -> Result:
    return Result(Status.PASS, node, evidence, None, peer)


def warned(node: str | None, evidence: str, fix: str, peer: str | None = None) -> Result:
    return Result(Status.WARN, node, evidence, fix, peer)


def failed(node: str | None, evidence: str, fix: str, peer: str | None = None) -> Result:
    return Result(Status.FAIL, node, evidence, fix, peer)


@dataclass
class CheckReport:
    name: str
    title: str
    results: list[Result] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)
    #: What the check ran, beside its results (the launch check: every launch).
    details: list[dict] | None = None

    @property
    def status(self) -> Status:
        return worst(r.status for r in self.results)

    def to_dict(self, fix_hints: bool = True) -> dict:
        return {
            "name": self.name,
            "title": self.title,
            "status": str(self.status),
            "not_checked": list(self.not_checked),
            "results": [r.to_dict(fix_hints) for r in self.results],
            **({"details": self.details} if self.details is not None else {}),
        }


def worst(statuses) -> Status:
    found = Status.PASS
    for status in statuses:
        if _RANK[status] > _RANK[found]:
            found = status
    return found


@dataclass
class DoctorReport:
    cluster: str
    checks: list[CheckReport]
    seconds: float = 0.0
    #: What --cordon changed (health.AppliedFindings.to_dict()); None without it.
    cordons: dict | None = None

    @property
    def results(self) -> list[Result]:
        return [r for check in self.checks for r in check.results]

    @property
    def summary(self) -> dict[str, int]:
        counts = {str(s): 0 for s in Status}
        for result in self.results:
            counts[str(result.status)] += 1
        return counts

    @property
    def status(self) -> Status:
        return worst(c.status for c in self.checks)

    @property
    def exit_code(self) -> int:
        return {
            Status.PASS: exitcodes.OK,
            Status.WARN: exitcodes.WARNINGS,
            Status.FAIL: exitcodes.CHECK_FAILED,
        }[self.status]

    def check(self, name: str) -> CheckReport | None:
        return next((c for c in self.checks if c.name == name), None)

    def to_dict(self, fix_hints: bool = True) -> dict:
        return {
            "schema": SCHEMA,
            "cluster": self.cluster,
            "status": str(self.status),
            "summary": self.summary,
            "checks": [c.to_dict(fix_hints) for c in self.checks],
            "seconds": round(self.seconds, 2),
            **({"cordons": self.cordons} if self.cordons is not None else {}),
        }
