"""Runs one job on the head node for `mpicluster run` and stops it when told.

Started over SSH as `python3 -c <this file> SPEC` (SPEC: base64 JSON with argv, env,
cwd). The job (mpirun) runs in its own session with stdin from /dev/null and its
output straight on this process's stdout/stderr. This process's stdin is the control
channel: the line "stop", or its end (the control machine went away), stops the job:
SIGTERM to mpirun, which ends every rank on every node, then SIGKILL after a grace
period. The exit status is the job's (128 + N for a signal N).
"""

import base64
import json
import os
import signal
import subprocess
import sys
import threading

GRACE = 10.0


def stop(child, done):
    """SIGTERM the job's process group; SIGKILL it if it is still there after GRACE."""
    for sig, wait in ((signal.SIGTERM, GRACE), (signal.SIGKILL, None)):
        try:
            os.killpg(child.pid, sig)
        except OSError:
            return
        if wait is None or done.wait(wait):
            return


def watch_control(child, done):
    while True:
        line = sys.stdin.readline()
        if not line or line.strip() == "stop":
            break
    if not done.is_set():
        stop(child, done)


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
    done = threading.Event()
    threading.Thread(target=watch_control, args=(child, done), daemon=True).start()
    code = child.wait()
    done.set()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main())
