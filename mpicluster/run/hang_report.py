"""The hang report: where every rank of a job is, from its Python stack (py-spy).

A job that makes no progress is usually a rank missing from a collective: the others
wait in allreduce (or barrier, or a NCCL call) while one is somewhere else. The report
reads every rank's main thread on every node at once (remote/stacks.py), groups the
ranks by where they are, and names the ones that are not where most are.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from mpicluster import remote
from mpicluster.cluster.inventory import Node
from mpicluster.cluster.layout import Layout
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.nodes import transport

#: Frames from these places are the libraries', not the program's.
LIBRARY_MARKERS = ("site-packages", "dist-packages", "/lib/python3", "<frozen")
TIMEOUT = 60


@dataclass
class RankState:
    rank: int
    node: str
    where: str  # the innermost frame of the main thread: "allreduce (c10d.py:2050)"
    caller: str  # the program's own innermost frame: "train.py:42 in step"
    stack: list[str] = field(default_factory=list)  # innermost first
    error: str | None = None


@dataclass
class Group:
    ranks: list[int]
    nodes: list[str]
    where: str
    caller: str


@dataclass
class HangReport:
    ranks: list[RankState] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)  # largest first
    odd: list[int] = field(default_factory=list)  # ranks not where most are
    problems: list[str] = field(default_factory=list)  # nodes that could not be read

    def to_dict(self) -> dict:
        return {
            "ranks": [r.__dict__ for r in self.ranks],
            "groups": [g.__dict__ for g in self.groups],
            "odd": self.odd,
            "problems": self.problems,
        }


def _file(frame: dict) -> str:
    return frame.get("short_filename") or frame.get("filename") or "?"


def frame_text(frame: dict) -> str:
    return f"{frame.get('name', '?')} ({_file(frame)}:{frame.get('line', '?')})"


def is_program(frame: dict) -> bool:
    filename = frame.get("filename") or ""
    return not any(marker in filename for marker in LIBRARY_MARKERS)


def rank_state(entry: dict, node: str, node_error: str | None = None) -> RankState:
    if "threads" not in entry:
        return RankState(
            entry["rank"], node, "?", "?", error=entry.get("error") or node_error or "unread"
        )
    threads = entry["threads"]
    main = next((t for t in threads if t.get("thread_name") == "MainThread"), None)
    main = main or (threads[0] if threads else {"frames": []})
    frames = main.get("frames") or []
    if not frames:
        return RankState(entry["rank"], node, "no Python frames", "?")
    own = next((f for f in frames if is_program(f)), None)
    caller = (
        f"{own.get('short_filename') or own.get('filename')}:{own.get('line')} in {own.get('name')}"
        if own
        else "?"
    )
    return RankState(
        entry["rank"], node, frame_text(frames[0]), caller, [frame_text(f) for f in frames]
    )


def summarize(collected: dict[str, dict]) -> HangReport:
    """From each node's answer (remote/stacks.py) to the grouped report."""
    report = HangReport()
    for node, answer in collected.items():
        if answer.get("error") and not answer.get("ranks"):
            report.problems.append(f"{node}: {answer['error']}")
            continue
        for entry in answer.get("ranks", []):
            report.ranks.append(rank_state(entry, node, answer.get("error")))
    report.ranks.sort(key=lambda r: r.rank)
    groups: dict[tuple[str, str], Group] = {}
    for state in report.ranks:
        if state.error:
            continue
        group = groups.setdefault(
            (state.where, state.caller), Group([], [], state.where, state.caller)
        )
        group.ranks.append(state.rank)
        if state.node not in group.nodes:
            group.nodes.append(state.node)
    report.groups = sorted(groups.values(), key=lambda g: (-len(g.ranks), g.ranks))
    if len(report.groups) > 1 and len(report.groups[0].ranks) > len(report.groups[1].ranks):
        report.odd = sorted(r for g in report.groups[1:] for r in g.ranks)
    return report


def collect(plan: ClusterPlan, nodes: Iterable[Node], job: str, layout: Layout) -> dict[str, dict]:
    """Every node's rank stacks, read in parallel; a node that cannot be read says why."""
    command = " ".join(shlex.quote(a) for a in (remote.PYTHON, "-", job, layout.pyspy or ""))
    results = transport.run_everywhere(
        plan, command, nodes=nodes, stdin=remote.script("stacks"), timeout=TIMEOUT
    )
    collected = {}
    for name, result in results.items():
        if not result.ok:
            why = result.error or (result.stderr.strip().splitlines() or ["no output"])[-1]
            collected[name] = {"ranks": [], "error": why}
            continue
        try:
            collected[name] = json.loads(result.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            collected[name] = {"ranks": [], "error": "no report from the node"}
    return collected


def inspect(
    plan: ClusterPlan, nodes: Iterable[Node], job: str, progress: Callable[[str], None]
) -> HangReport:
    targets = list(nodes)
    progress(f"Reading the ranks' Python stacks on {len(targets)} node(s) (py-spy)")
    return summarize(collect(plan, targets, job, plan.layout))
