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

A stopped launch's daemons on the other nodes may outlive it: a `prted` whose node drops
the launcher's port never hears mpirun's SIGTERM, and waits on its connection long after
mpirun is gone. So a stopped launch's node then ends them itself, over the cluster's
ssh, by the name PRRTE gives the job (`prterun-HOST-PID@0`, HOST and PID the launcher's);
nothing of the launch is left running when its result is sent. (Open MPI 4's ORTE names
its job by a number: its daemons end when their connection gives up.)
"""

import contextlib
import os
import re
import signal
import socket
import subprocess
import threading
import time

GRACE = 3.0
#: The same for a launch control cancels (no longer needed, or cut short where a node
#: drops MPI's ports): its daemons on the other nodes are ended by end_daemons anyway.
CANCEL_GRACE = 1.0
#: How long ending a stopped launch's daemons on the other nodes may take.
CLEANUP = 8.0
#: The end of a launch's output that comes back (its errors are at the end).
TAIL = 6000


def session_of(leader):
    """The processes of `leader`'s session (each launch has one of its own): mpirun and
    what it started on this node, prterun among them."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/" + name + "/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 3 and fields[3] == str(leader):
            found.append(int(name))
    return found


def stop(child, grace=GRACE):
    """SIGTERM to mpirun alone (it needs its ssh children to end its daemons and ranks
    on the other nodes), then SIGKILL to its whole group. Its session's pids are kept on
    `child` (`stopped`) for ending its daemons on the other nodes (end_daemons)."""
    if getattr(child, "stopped", None) is None:
        child.stopped = session_of(child.pid) or [child.pid]
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        child.terminate()
        child.wait(grace)
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(GRACE)


def daemons_pattern(pids, hostname):
    """pkill's pattern (-f, an extended regex) for the daemons PRRTE started for a
    launcher with one of `pids` on `hostname`: their job's name, prterun-HOST-PID@0 (a
    fully qualified HOST where PRRTE keeps it); None for a name no regex may hold."""
    short = hostname.split(".")[0]
    if not pids or not re.match(r"^[A-Za-z0-9][A-Za-z0-9-]*$", short):
        return None
    return "prted .*-%s(\\.[^ ]*)?-(%s)@0" % (short, "|".join(str(p) for p in sorted(pids)))


def kill_line(pattern):
    """The shell line that ends this user's processes matching `pattern`: SIGTERM (a
    prted ends its ranks), then SIGKILL half a second later where one was found."""
    quoted = "'" + pattern + "'"
    kill = 'pkill -%s -u "$(id -u)" -f ' + quoted
    return "%s && { sleep 0.5; %s; }; exit 0" % (kill % "TERM", kill % "KILL")


def end_daemons(hosts, pids, hostname=None, ssh=("ssh",)):
    """End the daemons a stopped launch with `pids` left on `hosts` (kill_line), every
    host at once, CLEANUP seconds at most. A host that cannot be reached is left as it
    is."""
    pattern = daemons_pattern(pids, hostname or socket.gethostname())
    if not hosts or pattern is None:
        return
    line = kill_line(pattern)
    options = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=5"]
    options += ["-o", "ControlMaster=no", "-o", "ControlPath=none"]
    children = []
    for host in hosts:
        with contextlib.suppress(OSError):
            children.append(
                subprocess.Popen(
                    [*ssh, *options, host, line],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
    deadline = time.time() + CLEANUP
    for child in children:
        try:
            child.wait(max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()


CLEANING = threading.Lock()


def clean(child):
    """Once: the daemons of `child`, a launch that was stopped, ended on its other hosts
    (its item's `hosts`: none for a user's launch, whose mpirun runs behind her ssh)."""
    with CLEANING:
        pids = getattr(child, "stopped", None)
        if not pids or getattr(child, "cleaned", False):
            return
        child.cleaned = True
    end_daemons(getattr(child, "hosts", None) or [], pids)


class Launches:
    """The launches running on this node, by the order they belong to."""

    def __init__(self):
        self.lock = threading.Lock()
        self.running = {}  # order -> [child]
        self.cancelled = set()

    def start(self, order, argv, hosts=()):
        """Popen(argv) registered under `order`, `hosts` the other nodes it starts
        daemons on; None once the order is cancelled."""
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
            child.hosts = list(hosts)
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
            stop(child, CANCEL_GRACE)

    def stop_all(self):
        with self.lock:
            self.cancelled.update(self.running)
            children = [child for group in self.running.values() for child in group]
        for child in children:
            stop(child)
        for child in children:
            clean(child)


def launch(item, launches=None, order=None):
    """{"id", "argv", "timeout", "hosts"} -> {"id", "rc", "hung", "seconds", "output"}; rc None
    when mpirun could not be started (output says why) or would not die. With `launches`,
    it runs as part of `order` (None: the order was cancelled before it started)."""
    started = time.time()
    launches = launches or Launches()
    try:
        child = launches.start(order, item["argv"], item.get("hosts") or ())
    except OSError as exc:
        return {"id": item["id"], "rc": None, "hung": False, "seconds": 0.0, "output": str(exc)}
    if child is None:
        return None
    try:
        result = _wait(item, child, started)
        clean(child)  # a launch stopped here or by a cancel: nothing of it left running
        return result
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
