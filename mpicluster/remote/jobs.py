"""The detached jobs of `mpicluster run --detach` whose head is this node.

Run as `python3 -c SOURCE COMMAND [JOB]` (stdin stays free: `follow` ends when it
closes, i.e. when the control machine stops reading). Each job has a folder in
~/.local/state/mpicluster/jobs/JOB, written by remote/launcher.py: job.json (what
was started, when, where), output.log (mpirun's output, every rank's lines tagged),
pid (the launcher's daemon), exit.json (written last: how it ended) and hang.json
(where every rank was when it went quiet, with --hang-timeout).

- `list`: one JSON object {"jobs": [each job's state]}.
- `follow JOB WAIT`: the job's output from its start on stdout; with WAIT "1" on
  until the job has ended; then its state (hang.json's content included) as one JSON
  line on stderr.
- `stop JOB`: SIGTERM to the job's daemon, which stops mpirun and ends the job's
  processes on every node it used; waits for the end; prints the job's state.

A job's state: running (its daemon is alive), done (exit 0), failed, stopped (by
`stop`), hung (stopped by --hang-timeout), lost (no daemon and no exit.json: the node
restarted, or the daemon was killed).
"""

import json
import os
import re
import select
import signal
import sys
import time

FOLDER = os.path.join(os.path.expanduser("~"), ".local/state/mpicluster/jobs")
JOB_ID = re.compile(r"^[0-9a-f]{12}$")
#: How long `stop` waits for the job's end (the launcher's grace, then an ssh to each
#: node that ends what is left of the job there).
STOP_WAIT = 90.0
POLL = 0.2


def read_json(path):
    try:
        with open(path) as found:
            return json.load(found)
    except (OSError, ValueError):
        return None


def daemon_pid(folder, job):
    """The job's daemon, if it is alive: its pid file names a process whose command
    line carries the job's id (not another process that got the same pid later)."""
    try:
        with open(os.path.join(folder, "pid")) as found:
            pid = int(found.read().strip())
        with open("/proc/%d/cmdline" % pid, "rb") as command:
            words = command.read().split(b"\0")
    except (OSError, ValueError):
        return None
    return pid if job.encode() in words else None


def state_of(folder, job, hang=False):
    record = read_json(os.path.join(folder, "job.json")) or {}
    ended = read_json(os.path.join(folder, "exit.json"))
    pid = None if ended else daemon_pid(folder, job)
    if ended:
        code = ended.get("code")
        state = "done" if code == 0 else "failed"
        state = "hung" if ended.get("hung") else "stopped" if ended.get("stopped") else state
    else:
        state = "running" if pid else "lost"
    log = os.path.join(folder, "output.log")
    found = dict(record, id=job, state=state, pid=pid, exit=ended, log=log)
    found["log_bytes"] = os.path.getsize(log) if os.path.exists(log) else 0
    found["hung_report"] = os.path.exists(os.path.join(folder, "hang.json"))
    if hang:
        found["hang"] = read_json(os.path.join(folder, "hang.json"))
    return found


def listed():
    names = sorted(os.listdir(FOLDER)) if os.path.isdir(FOLDER) else []
    jobs = [state_of(os.path.join(FOLDER, n), n) for n in names if JOB_ID.match(n)]
    return {"jobs": jobs}


def control_gone():
    """Whether the control machine closed our stdin (it stopped following)."""
    ready, _, _ = select.select([sys.stdin], [], [], 0)
    return bool(ready) and not os.read(sys.stdin.fileno(), 1024)


def follow(folder, job, wait):
    out = sys.stdout.buffer
    with open(os.path.join(folder, "output.log"), "rb") as log:
        while True:
            chunk = log.read(65536)
            if chunk:
                out.write(chunk)
                out.flush()
                continue
            if not wait or daemon_pid(folder, job) is None or control_gone():
                break
            time.sleep(POLL)
        rest = log.read()  # what the job wrote as its daemon ended
        out.write(rest)
        out.flush()
    sys.stderr.write(json.dumps(state_of(folder, job, hang=True)) + "\n")


def stop(folder, job):
    pid = daemon_pid(folder, job)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_WAIT
        while daemon_pid(folder, job) is not None and time.monotonic() < deadline:
            time.sleep(POLL)
    sys.stdout.write(json.dumps(dict(state_of(folder, job), was_running=pid is not None)) + "\n")


def main(argv):
    command = argv[0] if argv else ""
    if command == "list":
        sys.stdout.write(json.dumps(listed()) + "\n")
        return 0
    job = argv[1] if len(argv) > 1 else ""
    folder = os.path.join(FOLDER, job)
    if command not in ("follow", "stop") or not JOB_ID.match(job):
        sys.stderr.write("usage: list | follow JOB 0|1 | stop JOB\n")
        return 2
    if not os.path.isdir(folder):
        sys.stderr.write("no job %s on this node\n" % job)
        return 3
    if command == "stop":
        stop(folder, job)
    else:
        follow(folder, job, argv[2:3] == ["1"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
