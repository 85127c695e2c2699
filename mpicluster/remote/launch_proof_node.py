"""The launches of doctor's proof by launch, run by the probe on a node.

Each is one `mpirun` started the way a user starts it: as the MPI user, with this
login's environment (the non-interactive one mpirun's daemons get on the other nodes
too), stdin from /dev/null (the probe's stdin is its conversation with the control
machine), in a session of its own. One that runs past its timeout is a hang, a
finding: SIGTERM to mpirun (it then ends its daemons and ranks on the other nodes),
SIGKILL to its whole group after a grace period. The ranks' program also ends itself a few
seconds after the timeout (its alarm), so a lost mpirun leaves nothing running.

Several orders of launches may run at once (`Launches`): the control machine starts the
launches across nodes while those on each node alone still run, and cancels an order
whose result it no longer needs (its running launches are stopped as a hang is, the
ones not started yet never start); at the end of the conversation every launch still
running is stopped.
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


class Launches:
    """The launches running on this node, by the order they belong to."""

    def __init__(self):
        self.lock = threading.Lock()
        self.running = {}  # order -> [child]
        self.cancelled = set()

    def start(self, order, argv):
        """Popen(argv) registered under `order`; None once the order is cancelled."""
        with self.lock:
            if order in self.cancelled:
                return None
            child = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            self.running.setdefault(order, []).append(child)
            return child

    def done(self, order, child):
        with self.lock:
            children = self.running.get(order, [])
            if child in children:
                children.remove(child)

    def cancel(self, order):
        """Stop `order`'s running launches; its others never start."""
        with self.lock:
            self.cancelled.add(order)
            children = list(self.running.get(order, []))
        for child in children:
            stop(child)

    def stop_all(self):
        with self.lock:
            self.cancelled.update(self.running)
            children = [child for group in self.running.values() for child in group]
        for child in children:
            stop(child)


def launch(item, launches=None, order=None):
    """{"id", "argv", "timeout"} -> {"id", "rc", "hung", "seconds", "output"}; rc None
    when mpirun could not be started (output says why) or would not die. With `launches`,
    it runs as part of `order` (None: the order was cancelled before it started)."""
    started = time.time()
    launches = launches or Launches()
    try:
        child = launches.start(order, item["argv"])
    except OSError as exc:
        return {"id": item["id"], "rc": None, "hung": False, "seconds": 0.0, "output": str(exc)}
    if child is None:
        return None
    try:
        return _wait(item, child, started)
    finally:
        launches.done(order, child)


def _wait(item, child, started):
    """The launch's result once `child` ends, or is stopped past its timeout."""
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
