"""Runs one job on the head node for `mpicluster run` and stops it when told.

Started over SSH as `python3 -c <this file> SPEC` (SPEC: base64 JSON with argv, env,
cwd, and for the stop: the job's id, the head's and the other nodes' names and the
source of remote/reap.py). The job (mpirun) runs in its own session with stdin from
/dev/null and its output straight on this process's stdout/stderr. This process's stdin
is the control channel: the line "stop", or its end (the control machine went away),
stops the job: SIGTERM to mpirun, then, after a short grace, every process of the job
on every node it used is ended (reap.py, over the cluster's own ssh from here, so it
works without the control machine), then SIGKILL to mpirun. mpirun alone cannot be
trusted with it: a job hung in MPI_Init outlived SIGTERM and even SIGKILL to mpirun
(Open MPI 5.0.7). The exit status is the job's (128 + N for a signal N).
"""

import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading

GRACE = 5.0
#: How long the ssh to one node that ends the job's processes there may take.
REAP_TIMEOUT = 30


def reap_everywhere(spec):
    """End the job's processes here and, over ssh, on the other nodes it used; say on
    stderr where some were left running by mpirun."""
    source, job = spec.get("reap"), spec.get("job")
    if not source or not job:
        return
    others = [h for h in spec.get("hosts") or [] if h != spec.get("head")]
    sessions, results = {}, {}
    for host in others:  # started first: every node's grace runs at the same time
        argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", host]
        argv += ["/usr/bin/python3", "-", job]
        try:
            sessions[host] = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            results[host] = {"error": str(exc)}
    space = {"__name__": "reap"}
    exec(compile(source, "reap.py", "exec"), space)  # noqa: S102 (our own reap.py)
    results[spec.get("head") or "head"] = space["reap"](job)
    for host, proc in sessions.items():
        try:
            out, err = proc.communicate(source.encode(), timeout=REAP_TIMEOUT)
            lines = out.decode("utf-8", "replace").strip().splitlines()
            results[host] = json.loads(lines[-1]) if lines else {"error": err.decode()[-200:]}
        except (subprocess.TimeoutExpired, ValueError) as exc:
            proc.kill()
            results[host] = {"error": str(exc)}
    ended = ["%s (%d)" % (h, r["found"]) for h, r in results.items() if r.get("found")]
    failed = ["%s: %s" % (h, r["error"].strip()) for h, r in results.items() if r.get("error")]
    if ended:
        sys.stderr.write("mpicluster: ended the job's processes left on " + ", ".join(ended) + "\n")
    for line in failed:
        sys.stderr.write("mpicluster: could not end the job's processes on " + line + "\n")
    sys.stderr.flush()


def stop(child, done, spec):
    """SIGTERM the job's process group; after GRACE, end the job's processes on every
    node, then SIGKILL mpirun's group if it is still there."""
    with contextlib.suppress(OSError):
        os.killpg(child.pid, signal.SIGTERM)
    done.wait(GRACE)
    reap_everywhere(spec)
    with contextlib.suppress(OSError):
        os.killpg(child.pid, signal.SIGKILL)


def watch_control(child, done, spec, stopping):
    while True:
        line = sys.stdin.readline()
        if not line or line.strip() == "stop":
            break
    if not done.is_set():
        stopping.set()
        stop(child, done, spec)


def main():
    spec = json.loads(base64.b64decode(sys.argv[1]).decode())
    home = os.path.expanduser("~")
    cwd = os.path.join(home, os.path.expanduser(spec.get("cwd") or home))
    if not os.path.isdir(cwd):
        sys.stderr.write("mpicluster: no folder %s on the head node\n" % cwd)
        return 2
    env = dict(os.environ)
    env.update(spec.get("env") or {})
    try:
        child = subprocess.Popen(
            spec["argv"],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as exc:
        sys.stderr.write("mpicluster: cannot start %s: %s\n" % (spec["argv"][0], exc))
        return 127
    done, stopping = threading.Event(), threading.Event()
    watch = threading.Thread(target=watch_control, args=(child, done, spec, stopping))
    watch.daemon = True
    watch.start()
    code = child.wait()
    done.set()
    if stopping.is_set():
        watch.join()  # the stop ends the job's processes on every node before we go
    elif code < 0:  # mpirun itself was killed: its ranks may be running on
        reap_everywhere(spec)
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
