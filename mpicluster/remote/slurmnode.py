"""Slurm as a node's own health check sees it (run as root under slurmd): every node's
state and drain reason from slurmctld, the node's drain or return through scontrol, and
mpicluster's record of the drains its check made (/var/lib/mpicluster/slurm-drain.json).
Standard library only (shipped with remote/health.py)."""

import contextlib
import fcntl
import json
import os
import shutil
import subprocess

from mpicluster_sitecommand import run_site_command
from mpicluster_slurmnodes import parse_nodes

#: mpicluster's record of the drain its check made on this node (the proof it is ours).
RECORD = "/var/lib/mpicluster/slurm-drain.json"
#: `up` writes it on every node while it changes them: {"until": epoch seconds}.
CHANGING = "/var/lib/mpicluster/changing.json"
#: slurmd gives its health program and prolog a bare PATH.
SEARCH = "/usr/bin:/usr/sbin:/bin:/sbin:/usr/local/bin:/usr/local/sbin"
#: Slurm cuts its health program at 60 s; scontrol answers in well under a second.
TIMEOUT = 15


def scontrol():
    return shutil.which("scontrol", path=SEARCH) or "scontrol"


def nodes():
    """Every node's state as slurmctld sees it; raises OSError when it cannot be asked."""
    try:
        done = subprocess.run(
            [scontrol(), "-o", "show", "nodes"],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OSError("scontrol show nodes: %s" % exc) from None
    if done.returncode != 0:
        raise OSError("scontrol show nodes: %s" % (done.stderr.strip() or done.returncode))
    return parse_nodes(done.stdout)


def update(node, state, reason=None):
    """Drain or resume the node through slurmctld; the error's text, or None."""
    command = [scontrol(), "update", "NodeName=" + node, "State=" + state]
    if reason is not None:
        command.append("Reason=" + reason)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if done.returncode != 0:
        return done.stderr.strip() or "exit %d" % done.returncode
    return None


def changing(now):
    """Whether `up` says it is changing the nodes now."""
    try:
        with open(CHANGING, encoding="utf-8") as handle:
            return float(json.load(handle).get("until") or 0) > now
    except (OSError, ValueError, AttributeError, TypeError):
        return False


class Locked:
    """The record's lock: the periodic check and a job's prolog may run at once."""

    def __enter__(self):
        os.makedirs(os.path.dirname(RECORD), mode=0o755, exist_ok=True)
        self.handle = open(RECORD + ".lock", "a")  # held until __exit__
        fcntl.flock(self.handle, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        self.handle.close()


def read_record():
    try:
        with open(RECORD, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def write_record(data):
    """The record written whole (or removed, for None)."""
    if data is None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(RECORD)
        return
    partial = RECORD + ".partial"
    with open(partial, "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    os.chmod(partial, 0o644)
    os.replace(partial, RECORD)


def on_change(command, node, state, reason):
    """The site's own command with the node, the state and the reason (its failure is
    said, never fatal to the check), with a bare PATH as slurmd gives."""
    if not command:
        return None
    return run_site_command(command, node, state, reason, env={"PATH": SEARCH})
