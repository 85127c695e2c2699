"""What a stopped job leaves behind is ended (remote/reap.py, run by the launcher on every
node of the job): real processes here, one that ignores SIGTERM among them, found by
the job's id in their environment; another job's and unrelated ones are left alone."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from tests.shipped import load

reap = load("reap")

#: A process that ignores SIGTERM, as a rank spinning in MPI_Init did.
STUBBORN = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"


def started(job: str | None, program: str = "import time; time.sleep(60)") -> subprocess.Popen:
    env = dict(os.environ)
    env.pop("MPICLUSTER_JOB", None)
    if job:
        env["MPICLUSTER_JOB"] = job
    # its own session: a rank sits in a process group of its own, away from mpirun's
    return subprocess.Popen([sys.executable, "-c", program], env=env, start_new_session=True)


def test_every_process_of_the_job_ends_and_no_other(tmp_path):
    job = f"test{os.getpid()}"
    mine = [started(job), started(job, STUBBORN)]
    others = [started(job + "x"), started(None)]
    try:
        time.sleep(0.5)
        found = reap.reap(job, grace=1.0)
        assert found["found"] == 2
        assert found["killed"] == 1  # the one that ignored SIGTERM
        assert found["left"] == []
        for proc in mine:
            assert proc.wait(5) is not None
        assert all(proc.poll() is None for proc in others)
    finally:
        for proc in mine + others:
            proc.kill()
            proc.wait()


def test_no_job_named_ends_nothing():
    other = started("*")
    try:
        time.sleep(0.3)
        assert reap.reap("*")["found"] == 0
        assert reap.reap("")["found"] == 0
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()
