"""A detached job on this machine, as its head runs it: the launcher's command line
(`run --detach`'s, run by /bin/sh) starts a real daemon and returns at once; the job
outlives the shell that started it, writes its log and its end; remote/jobs.py lists,
follows and stops it; a quiet job with a hang timeout has its stacks read and is
stopped (exit 124). Real processes, no ssh: the job's only node is this one."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mpicluster import remote
from mpicluster.cluster import layout
from mpicluster.run import detached, job
from mpicluster.run.job_command import Launch
from tests.shipped import load

jobs_py = load("jobs")


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    monkeypatch.setattr(remote, "PYTHON", sys.executable)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def start(home: Path, program: str, hang: dict | None = None) -> tuple[str, dict]:
    """`run --detach`'s command for `python -c program` on node "n1", run by /bin/sh."""
    job_id = job.new_job_id()
    plan = Launch(
        argv=[sys.executable, "-c", program],
        env={"MPICLUSTER_JOB": job_id, "OMPI_COMM_WORLD_RANK": "0"},  # as mpirun's rank
        placement={"n1": 1},
        ranks=1,
    )
    record = {
        "program": ["python", "-c", program],
        "placement": {"n1": 1},
        "ranks": 1,
        "mpi_major": 5,
    }
    spec = {"detach": {"folder": f"{layout.DETACHED_JOBS}/{job_id}", "record": record}}
    if hang:
        spec["hang"] = hang
    command = job.remote_command(plan, str(home), job_id, "n1", spec)
    assert shlex.split(command)[-1] == job_id  # remote/jobs.py tells the daemon by it
    started = time.monotonic()
    done = subprocess.run(
        ["/bin/sh", "-c", command], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 10  # returns once the job runs, not at its end
    return job_id, json.loads(done.stdout.strip().splitlines()[-1])


def jobs(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """remote/jobs.py as `jobs_command` runs it on a head; its stdin open, as the ssh
    channel's is (`follow` ends when it closes)."""
    argv = ["/bin/sh", "-c", detached.jobs_command(*args)]
    with subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        out, err = proc.stdout.read(), proc.stderr.read()
        code = proc.wait(timeout=timeout)
        proc.stdin.close()
    return subprocess.CompletedProcess(argv, code, out, err)


def state(home: Path, job_id: str) -> dict:
    listed = json.loads(jobs(home, "list").stdout)["jobs"]
    return next(j for j in listed if j["id"] == job_id)


def wait_until(home: Path, job_id: str, wanted: str, seconds: float = 30) -> dict:
    deadline = time.monotonic() + seconds
    while (now := state(home, job_id))["state"] != wanted and time.monotonic() < deadline:
        time.sleep(0.2)
    return now


def test_a_job_runs_on_after_its_shell_and_records_its_end(home):
    program = "import time; print('first', flush=True); time.sleep(1.5); print('last'); exit(3)"
    job_id, answer = start(home, program)
    folder = home / layout.DETACHED_JOBS / job_id
    assert answer == {"job": job_id, "pid": answer["pid"], "folder": str(folder)}
    assert state(home, job_id)["state"] == "running"
    # follow: the whole output until the end, then the state as JSON on stderr
    followed = jobs(home, "follow", job_id, "1")
    assert followed.stdout == "first\nlast\n", followed
    end = json.loads(followed.stderr.strip().splitlines()[-1])
    assert (end["state"], end["exit"]["code"], end["exit"]["stopped"]) == ("failed", 3, False)
    assert (
        end["program"] == ["python", "-c", program]
        and end["cwd"] == str(home)
        and end["started"] > 0
    )
    kept = sorted(p.name for p in folder.iterdir())
    assert kept == ["exit.json", "job.json", "output.log", "pid"]
    assert oct(folder.stat().st_mode & 0o777) == "0o700"
    # from the record, as `logs` shows it
    found = detached.DetachedJob.from_answer("n1", end)
    assert (found.exit_code, found.ranks, found.node_of(0)) == (3, 1, "n1")


def test_stop_ends_the_job_and_every_process_it_started(home):
    program = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'],"
        " start_new_session=True)\n"
        "print('waiting', flush=True)\n"
        "time.sleep(120)\n"
    )
    job_id, _ = start(home, program)
    time.sleep(1)
    stopped = jobs(home, "stop", job_id)
    assert stopped.returncode == 0, stopped.stderr
    end = json.loads(stopped.stdout)
    assert (end["state"], end["exit"]["code"], end["was_running"]) == ("stopped", 130, True)
    # the job's child in a session of its own, ended by the reap (its MPICLUSTER_JOB)
    reap = load("reap")
    assert reap.job_processes(job_id) == []
    folder = home / layout.DETACHED_JOBS / job_id
    assert jobs_py.daemon_pid(str(folder), job_id) is None  # gone (a zombie at most)
    again = json.loads(jobs(home, "stop", job_id).stdout)
    assert (again["state"], again["was_running"]) == ("stopped", False)


def test_a_quiet_job_has_its_stacks_read_and_is_stopped_as_hung(home):
    hang = {"timeout": 1.0, "stop": True, "stacks": remote.script("stacks"), "pyspy": ""}
    job_id, _ = start(home, "import time; print('ready', flush=True); time.sleep(120)", hang)
    end = wait_until(home, job_id, "hung")
    assert (end["state"], end["exit"]["code"], end["hung_report"]) == ("hung", 124, True)
    report = json.loads((home / layout.DETACHED_JOBS / job_id / "hang.json").read_text())
    assert report["seconds"] == 1.0 and list(report["nodes"]) == ["n1"]
    (rank,) = report["nodes"]["n1"]["ranks"]  # the job's one rank, found by its job id
    assert rank["rank"] == 0, report
    # `logs` reads it as the hang report (py-spy may be missing here: then it says so)
    found = detached.DetachedJob.from_answer("n1", end | {"hang": report})
    assert [r.rank for r in found.hang.ranks] == [0]


def test_the_list_tells_a_lost_job_and_leaves_other_folders_alone(home):
    root = home / layout.DETACHED_JOBS
    lost = root / "0123456789ab"
    lost.mkdir(parents=True)
    (lost / "job.json").write_text(json.dumps({"program": ["train.py"]}))
    (lost / "pid").write_text(f"{os.getpid()}\n")  # alive, but not its daemon
    (root / "not-a-job").mkdir()
    (found,) = json.loads(jobs(home, "list").stdout)["jobs"]
    assert (found["id"], found["state"], found["pid"]) == ("0123456789ab", "lost", None)
    bad = jobs(home, "stop", "../../etc")
    assert bad.returncode == 2 and "usage" in bad.stderr
    assert jobs(home, "follow", "ffffffffffff", "0").returncode == 3
    assert jobs_py.JOB_ID.pattern == detached.JOB_ID.pattern
    assert jobs_py.FOLDER.endswith("/" + layout.DETACHED_JOBS)


def test_a_slurm_job_slurm_cannot_tell_of_is_lost_not_running(home):
    """No squeue answers (here: none installed): a batch job with no end recorded is lost;
    with job.sh's exit.json it is what that says, and a stop file makes it stopped."""
    folder = home / layout.DETACHED_JOBS / "0123456789ab"
    folder.mkdir(parents=True)
    (folder / "job.json").write_text(json.dumps({"program": ["train.py"], "slurm": 41}))
    found = state(home, "0123456789ab")
    assert (found["state"], found["slurm"], found["pid"]) == ("lost", 41, None)
    (folder / "exit.json").write_text(json.dumps({"code": 0, "status": 0, "ended": 1.0}))
    assert state(home, "0123456789ab")["state"] == "done"
    (folder / "stop").write_text("")
    stopped = state(home, "0123456789ab")
    assert (stopped["state"], stopped["exit"]["code"]) == ("stopped", 130)
    told = detached.DetachedJob.from_answer("n1", stopped)
    assert (told.slurm, told.running) == (41, False)


def test_a_slurm_job_is_submitted_from_its_first_node_in_the_inventorys_order():
    from mpicluster.cluster.inventory import parse_inventory
    from mpicluster.cluster.plan import ClusterPlan
    from mpicluster.run.job_command import RunOptions, allocation

    inv = parse_inventory(
        "cluster: t\nssh: {user: mpi}\nscheduler: {type: slurm}\n"
        "nodes: [{name: n1}, {name: n2}, {name: n3}]\n"
    )
    plan = ClusterPlan.of(inv)
    hosts = ("n3", "n2")
    assert job.head_node(plan, RunOptions(program=("x",), hosts=hosts)).name == "n3"
    slurm = RunOptions(program=("x",), hosts=hosts, via="slurm")
    assert job.head_node(plan, slurm).name == "n2"  # where Slurm runs the batch script
    assert allocation({"n2": 2, "n3": 2}) == [
        "--nodes=2",
        "--nodelist=n2,n3",
        "--ntasks-per-node=2",
        "--ntasks=4",
    ]
