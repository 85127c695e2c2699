"""Reads the Python stacks of `mpicluster run`'s ranks on this node (the hang report).

Run as `python3 - JOB PYSPY` with this file on stdin. Finds the processes whose
environment has MPICLUSTER_JOB=JOB (JOB "*": any job's), one per rank (the topmost
process of each: a rank's own children, e.g. data loader workers, are left out; under
torchrun the workers are ranks by their RANK), asks py-spy for each one's threads
(`py-spy dump --json`, again with `sudo -n` where this user may not trace it) and
prints one JSON object: {"ranks": [{"rank", "pid", "job", "command", "threads" or
"error"}], "error": null or why nothing could be read}.
"""

import json
import os
import shutil
import subprocess
import sys

from procinfo import command_of, environ, parent_of

TIMEOUT = 20


def rank_key(values, job):
    """(job, rank) of a rank process, None for any other."""
    found = values.get("MPICLUSTER_JOB")
    if found is None or (job != "*" and found != job):
        return None
    rank = values.get("RANK") or values.get("OMPI_COMM_WORLD_RANK")
    return (found, rank) if rank is not None and rank.isdigit() else None


def rank_processes(job):
    keys = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != os.getpid():
            values = environ(name)
            key = rank_key(values, job) if values else None
            if key:
                keys[name] = key
    # the topmost process of each rank: its parent is not the same rank
    return [(pid, key) for pid, key in keys.items() if keys.get(parent_of(pid)) != key]


def dump(pyspy, pid):
    argv = [pyspy, "dump", "--pid", pid, "--json"]
    last = ""
    for prefix in ([], ["sudo", "-n"]):
        try:
            done = subprocess.run(
                prefix + argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                timeout=TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            last = str(exc)
            continue
        if done.returncode == 0:
            try:
                return json.loads(done.stdout.decode("utf-8", "replace")), None
            except ValueError:
                last = "py-spy printed no JSON"
                continue
        text = (done.stderr or done.stdout).decode("utf-8", "replace").strip()
        last = text.splitlines()[-1] if text else "py-spy exited %d" % done.returncode
        if "ermission" not in text and "ptrace" not in text:
            break  # not a permission problem: sudo would not help
    return None, last


def main():
    job = sys.argv[1]
    pyspy = sys.argv[2] if len(sys.argv) > 2 and os.path.exists(sys.argv[2]) else None
    pyspy = pyspy or shutil.which("py-spy")
    report = {"ranks": [], "error": None}
    found = rank_processes(job)
    if found and pyspy is None:
        report["error"] = "py-spy is not installed here (the source stack's Python has it)"
    for pid, (found_job, rank) in sorted(found, key=lambda item: int(item[1][1])):
        entry = {"rank": int(rank), "pid": int(pid), "job": found_job, "command": command_of(pid)}
        if pyspy:
            threads, error = dump(pyspy, pid)
            if threads is not None:
                entry["threads"] = threads
            else:
                entry["error"] = error
        report["ranks"].append(entry)
    sys.stdout.write(json.dumps(report) + "\n")


if __name__ == "__main__":
    main()
