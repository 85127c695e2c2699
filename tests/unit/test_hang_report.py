"""The hang report: finding a job's rank processes on a node and grouping the ranks by
where their Python stacks are."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from mpicluster.run.hang_report import summarize


def frames(*names: tuple[str, str, int]) -> list[dict]:
    return [
        {"name": n, "filename": f, "short_filename": f.rsplit("/", 1)[-1], "line": line}
        for n, f, line in names
    ]


WAITING = frames(
    ("allreduce", "/s/venv/lib/python3.11/site-packages/torch/distributed/c10d.py", 2050),
    ("step", "/home/u/mpicluster-run/job/train.py", 42),
    ("<module>", "/home/u/mpicluster-run/job/train.py", 60),
)
ELSEWHERE = frames(
    ("sleep", "/home/u/mpicluster-run/job/train.py", 38),
    ("<module>", "/home/u/mpicluster-run/job/train.py", 60),
)


def node(*ranks: tuple[int, list[dict]]) -> dict:
    return {
        "ranks": [
            {"rank": r, "pid": 100 + r, "threads": [{"thread_name": "MainThread", "frames": f}]}
            for r, f in ranks
        ],
        "error": None,
    }


def test_the_rank_missing_from_the_collective_is_named():
    report = summarize(
        {
            "node1": node((0, WAITING), (1, WAITING)),
            "node2": node((2, ELSEWHERE), (3, WAITING)),
            "node3": {"ranks": [], "error": "ssh: connection refused"},
        }
    )
    assert [r.rank for r in report.ranks] == [0, 1, 2, 3]
    first, second = report.groups
    assert first.ranks == [0, 1, 3] and first.nodes == ["node1", "node2"]
    assert first.where == "allreduce (c10d.py:2050)" and first.caller == "train.py:42 in step"
    assert second.ranks == [2] and second.where == "sleep (train.py:38)"
    assert report.odd == [2]
    assert report.problems == ["node3: ssh: connection refused"]


def test_no_odd_rank_when_the_groups_are_even_and_unread_ranks_are_kept_apart():
    unread = {"ranks": [{"rank": 1, "pid": 7, "error": "Permission denied"}], "error": None}
    report = summarize({"node1": node((0, WAITING)), "node2": node((2, ELSEWHERE)), "n": unread})
    assert report.odd == []
    assert [r.error for r in report.ranks] == [None, "Permission denied", None]


def test_the_node_side_finds_one_process_per_rank_of_the_job(monkeypatch):
    """Real processes: a rank with a child of its own (a data loader worker), another
    job's rank, and a process of no job."""
    monkeypatch.syspath_prepend(str(Path(__file__).parents[2] / "mpicluster" / "remote"))
    import stacks

    sleeper = [
        sys.executable,
        "-c",
        "import time, subprocess, sys; "
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(5)']) "
        "if len(sys.argv) > 1 else None; time.sleep(60)",
    ]
    started = []
    a, b = f"jobA{os.getpid()}", f"jobB{os.getpid()}"  # not another run's leftovers
    try:
        for job, rank, extra in ((a, "0", ["child"]), (a, "1", []), (b, "0", [])):
            env = dict(os.environ, MPICLUSTER_JOB=job, OMPI_COMM_WORLD_RANK=rank)
            started.append(subprocess.Popen([*sleeper, *extra], env=env))
        started.append(subprocess.Popen(sleeper))
        time.sleep(1.0)
        found = stacks.rank_processes(a)
        assert sorted((int(pid), key) for pid, key in found) == [
            (started[0].pid, (a, "0")),
            (started[1].pid, (a, "1")),
        ]
        everyone = {key for _, key in stacks.rank_processes("*")}
        assert {(a, "0"), (a, "1"), (b, "0")} <= everyone
    finally:
        for proc in started:
            proc.kill()
            proc.wait()
