"""The launches of doctor's proof by launch, run by the probe on a node.

Each is one `mpirun` started the way a user starts it: as the MPI user, with this
login's environment (the non-interactive one mpirun's daemons get on the other nodes
too), stdin from /dev/null (the probe's stdin is its conversation with the control
machine), in a session of its own. One that runs past its timeout is a hang, a
finding: SIGTERM to mpirun (it then ends its daemons and ranks on the other nodes),
SIGKILL to its whole group after a grace period. The ranks' program also ends itself a few
seconds after the timeout (its alarm), so a lost mpirun leaves nothing running.
"""

import contextlib
import os
import signal
import subprocess
import threading
import time

GRACE = 3.0
#: The end of a launch's output that comes back (its errors are at the end).
TAIL = 6000


def stop(child):
    """SIGTERM to mpirun alone (it needs its ssh children to end its daemons and ranks
    on the other nodes), then SIGKILL to its whole group."""
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        child.terminate()
        child.wait(GRACE)
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(GRACE)


def launch(item):
    """{"id", "argv", "timeout"} -> {"id", "rc", "hung", "seconds", "output"}; rc None
    when mpirun could not be started (output says why) or would not die."""
    started = time.time()
    try:
        child = subprocess.Popen(
            item["argv"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        return {"id": item["id"], "rc": None, "hung": False, "seconds": 0.0, "output": str(exc)}
    chunks = []

    def read():
        while True:
            data = os.read(child.stdout.fileno(), 65536)
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read)
    reader.daemon = True
    reader.start()
    hung = False
    try:
        child.wait(item["timeout"])
    except subprocess.TimeoutExpired:
        hung = True
        stop(child)
    reader.join(GRACE)  # a child outside the group may hold the pipe: keep what came
    output = b"".join(chunks).decode("utf-8", "replace")
    return {
        "id": item["id"],
        "rc": child.returncode,
        "hung": hung,
        "seconds": round(time.time() - started, 3),
        "output": output[-TAIL:],
    }
