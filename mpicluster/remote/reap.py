"""Ends what is left of one `mpicluster run` job on this node.

Run as `python3 - JOB` with this file on stdin (or exec'd by the launcher on the head).
A rank that hangs inside MPI_Init, or spins in a collective, can outlive mpirun: PRRTE
puts every rank in a process group of its own (so a signal to mpirun's group misses
them), and a rank whose PMIx server (mpirun itself, on the head) was killed does not
notice until its progress loop runs the lost-connection event. Seen on the local
cluster with Open MPI 5.0.7: after `timeout -s KILL 60 mpirun ...` the ranks of a job
hung in hvd.init() kept spinning on every node.

The job's processes are the ones whose environment has MPICLUSTER_JOB=JOB (every rank
and what a rank started). Each gets SIGTERM, then SIGKILL after GRACE seconds; the
last line printed is one JSON object: {"found": N, "killed": N, "left": [pids]}.
"""

import contextlib
import json
import os
import signal
import sys
import time

from procinfo import environ

GRACE = 3.0
JOB = "MPICLUSTER_JOB"


def job_processes(job):
    mine = {str(os.getpid()), str(os.getppid())}
    return [
        int(name)
        for name in os.listdir("/proc")
        if name.isdigit() and name not in mine and (environ(name) or {}).get(JOB) == job
    ]


def signal_all(pids, sig):
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


def reap(job, grace=GRACE):
    """SIGTERM, then SIGKILL, every process of `job` on this node."""
    if not job or job == "*":
        return {"found": 0, "killed": 0, "left": [], "error": "no job named"}
    found = job_processes(job)
    signal_all(found, signal.SIGTERM)
    deadline = time.monotonic() + grace
    left = found
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = job_processes(job)
    killed = list(left)
    signal_all(killed, signal.SIGKILL)
    time.sleep(0.2 if killed else 0)
    return {"found": len(found), "killed": len(killed), "left": job_processes(job)}


def main():
    sys.stdout.write(json.dumps(reap(sys.argv[1] if len(sys.argv) > 1 else "")) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
