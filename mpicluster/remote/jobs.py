"""The detached jobs of `mpicluster run --detach` whose head is this node.

Run as `python3 -c SOURCE COMMAND [JOB]` (stdin stays free: `follow` ends when it
closes, i.e. when the control machine stops reading). Each job has a folder in
~/.local/state/mpicluster/jobs/JOB, written by remote/job_runner.py: job.json (what
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

A Slurm batch job (job.json has "slurm": its id; job.sh writes exit.json as it ends) is
queued or running while squeue lists it; ended without exit.json (cancelled, out of
time, its node failed) it is failed, as scontrol tells, and that end is written to
exit.json while Slurm still remembers the job. `stop` is scancel (a "stop" file in the
folder first: the job ends as stopped, not failed).
"""

import contextlib
import json
import os
import re
import select
import signal
import subprocess
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


#: squeue's states of a job not yet running
QUEUED = ("PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "RESV_DEL_HOLD")
#: scontrol's states of a job that has ended
FINISHED = (
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
)


def slurm(argv):
    """A Slurm command's output ("" if it failed or is not there)."""
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.decode("utf-8", "replace").strip() if done.returncode == 0 else ""


def slurm_state(folder, slurm_id):
    """(Slurm's state of the job, its end as exit.json keeps it: None while it runs)."""
    listed = slurm(["squeue", "-h", "-j", str(slurm_id), "-o", "%T"])
    if listed and listed.split()[0] not in FINISHED:
        return listed.split()[0], None
    shown = slurm(["scontrol", "show", "job", "-o", str(slurm_id)])
    facts = dict(w.split("=", 1) for w in shown.split() if "=" in w)
    state = facts.get("JobState", "")
    if state not in FINISHED:
        return state or "UNKNOWN", None
    code, _, sig = facts.get("ExitCode", "1:0").partition(":")
    status = 128 + int(sig) if sig.isdigit() and int(sig) else int(code or 1)
    ended = {"code": status or 1, "status": status, "ended": time.time(), "slurm_state": state}
    if os.path.exists(os.path.join(folder, "exit.json")):  # job.sh wrote it meanwhile
        return state, read_json(os.path.join(folder, "exit.json"))
    write_json(os.path.join(folder, "exit.json"), ended)
    return state, ended


def write_json(path, data):
    with open(path + ".part", "w") as out:
        json.dump(data, out)
    os.rename(path + ".part", path)


def state_of(folder, job, hang=False):
    record = read_json(os.path.join(folder, "job.json")) or {}
    ended = read_json(os.path.join(folder, "exit.json"))
    batch = record.get("slurm")
    pid, queue = None, None
    if batch and not ended:
        queue, ended = slurm_state(folder, batch)
    elif not ended:
        pid = daemon_pid(folder, job)
    if ended:
        code = ended.get("code")
        state = "done" if code == 0 else "failed"
        if batch and os.path.exists(os.path.join(folder, "stop")):
            ended = dict(ended, stopped=True, code=130)
        state = "hung" if ended.get("hung") else "stopped" if ended.get("stopped") else state
    elif batch:
        state = "queued" if queue in QUEUED else "running" if queue != "UNKNOWN" else "lost"
    else:
        state = "running" if pid else "lost"
    log = os.path.join(folder, "output.log")
    found = dict(record, id=job, state=state, pid=pid, exit=ended, log=log)
    if queue:
        found["slurm_state"] = queue
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


class Alive:
    """Whether the job still runs: its daemon is alive, or (Slurm's) it has no end yet,
    asked of Slurm at most once a second."""

    def __init__(self, folder, job):
        self.folder, self.job = folder, job
        self.batch = (read_json(os.path.join(folder, "job.json")) or {}).get("slurm")
        self.asked, self.answer = 0.0, True

    def __call__(self):
        if not self.batch:
            return daemon_pid(self.folder, self.job) is not None
        if time.monotonic() - self.asked >= 1.0:
            self.asked = time.monotonic()
            self.answer = state_of(self.folder, self.job)["state"] in ("queued", "running")
        return self.answer


def opened_log(folder, alive, wait):
    """output.log, once there (a queued Slurm job has none yet); None if it never came."""
    path = os.path.join(folder, "output.log")
    while not os.path.exists(path):
        if not wait or not alive() or control_gone():
            return None
        time.sleep(POLL)
    return open(path, "rb")


def follow(folder, job, wait):
    out, alive = sys.stdout.buffer, Alive(folder, job)
    log = opened_log(folder, alive, wait)
    while log is not None:
        chunk = log.read(65536)
        if chunk:
            out.write(chunk)
            out.flush()
            continue
        if not wait or not alive() or control_gone():
            out.write(log.read())  # what the job wrote as it ended
            out.flush()
            log.close()
            break
        time.sleep(POLL)
    sys.stderr.write(json.dumps(state_of(folder, job, hang=True)) + "\n")


def stop(folder, job):
    alive = Alive(folder, job)
    was_running = alive()
    if alive.batch and was_running:
        with open(os.path.join(folder, "stop"), "w"):
            pass
        slurm(["scancel", str(alive.batch)])
    elif was_running:
        with contextlib.suppress(OSError, TypeError):  # gone meanwhile: nothing to stop
            os.kill(daemon_pid(folder, job), signal.SIGTERM)
    deadline = time.monotonic() + STOP_WAIT
    while was_running and alive() and time.monotonic() < deadline:
        time.sleep(POLL)
    sys.stdout.write(json.dumps(dict(state_of(folder, job), was_running=was_running)) + "\n")


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
