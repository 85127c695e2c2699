"""mpicluster's health check of one node: the part of doctor's judgement a node can make
alone, in about a second, with doctor's own judges (shipped with this program from
mpicluster/doctor/checks: one judge per finding, two callers).

`up` installs it as /usr/local/sbin/mpicluster-health with its record of the cluster
(/etc/mpicluster/health.json: the layout, and each node's MPI user, GPUs and slots).
Run as root (by Slurm, by hand) or as the MPI user:

    mpicluster-health [--json] [--node NAME] [--config FILE]

It judges the active stack against its manifest (size, mode, mtime, and the sha256 of
what a launch loads), free disk where the stack lives, /tmp and /dev/shm writable by the
MPI user with room for this node's ranks, and on GPU nodes nvidia-smi's count against
the inventory and the GPUs' health (hardware Xids, ECC and row remapping, NVLink,
clocks, persistence, the NVSwitch fabric).

One line per finding, in NHC's manner (`ERROR: ...` for a failure, `WARNING: ...`),
then one line saying the node's state; `--json`: one JSON object (schema 1). Exit 0:
healthy (warnings allowed); 1: unhealthy (a failure); 2: it could not judge (no record,
an unknown node). Run as root, it keeps its result in
/var/lib/mpicluster/health-last.json (what `mpicluster nodes` shows).
"""

import json
import os
import socket
import sys
import time

import gpuhealth
import loginlimits
import nodedisk
import nodeinfo

from mpicluster.doctor.checks import disk, gpu_health, limits, stack_files
from mpicluster.doctor.model import Status

CONFIG = "/etc/mpicluster/health.json"
#: Where a run as root leaves its result (`mpicluster nodes` reads it).
LAST = "/var/lib/mpicluster/health-last.json"
SCHEMA = 1
USAGE = "usage: mpicluster-health [--json] [--node NAME] [--config FILE]"


class Refused(Exception):
    """The check cannot judge this node (exit 2)."""


def arguments(argv):
    options = {"json": False, "node": None, "config": CONFIG}
    words = list(argv)
    while words:
        word = words.pop(0)
        if word == "--json":
            options["json"] = True
        elif word in ("--node", "--config") and words:
            options[word[2:]] = words.pop(0)
        elif word in ("-h", "--help"):
            sys.stdout.write(USAGE + "\n")
            sys.exit(0)
        else:
            raise Refused("unknown argument %r (%s)" % (word, USAGE))
    return options


def record(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except OSError as exc:
        raise Refused(
            "no record of the cluster at %s (%s): run `mpicluster up`" % (path, exc)
        ) from None
    except ValueError as exc:
        raise Refused("%s is not JSON (%s): run `mpicluster up`" % (path, exc)) from None


def this_node(config, wanted):
    """The node's name in the inventory: --node, else this host's name."""
    nodes = config.get("nodes") or {}
    if wanted:
        if wanted not in nodes:
            raise Refused("--node %s: not a node of cluster %s" % (wanted, config.get("cluster")))
        return wanted
    hostname = socket.gethostname()
    for name in (hostname, hostname.split(".")[0], socket.getfqdn()):
        if name in nodes:
            return name
    raise Refused(
        "this host (%s) is not one of cluster %s's nodes by name (%s): give --node NAME"
        % (hostname, config.get("cluster"), ", ".join(sorted(nodes)))
    )


def gather(config, node):
    """The facts the judges read, measured here (as the probe measures them)."""
    layout, user = config["layout"], config["nodes"][node].get("user")
    facts = {"env": {"USER": user}}
    if layout.get("install") == "source":
        facts["stack_files"] = nodeinfo.stack_files(layout["prefix"])
    paths = {"install": layout["prefix"], "tmp": "/tmp", "shm": "/dev/shm"}  # noqa: S108
    facts["disk"] = nodedisk.disk(paths, user=user)
    facts["shm_files"] = loginlimits.shm_files()
    if config["nodes"][node].get("gpus") and config.get("gpus_present", True):
        facts["gpus"] = nodeinfo.gpus()
        if (facts["gpus"] or {}).get("ok"):
            facts["gpu_health"] = gpuhealth.health()
    return facts


def judge(config, node, facts):
    """[(check, Result)]: every finding of the shared judges, passes included."""
    wanted = config["nodes"][node]
    found = [("stack", r) for r in stack_files.judge(node, facts)]
    found += [("disk", r) for r in disk.judge_disk(node, facts)]
    ranks = sum(int(n.get("slots") or 1) for n in config["nodes"].values())
    slots = int(wanted.get("slots") or 1)
    found += [("limits", r) for r in limits.judge(node, facts, slots, ranks)]
    if "gpus" in facts:
        counted = gpu_health.judge_count(node, facts["gpus"] or {}, int(wanted["gpus"]))
        found += [("gpus", r) for r in counted]
        if not counted:
            found += [("gpus", r) for r in gpu_health.judge(node, facts.get("gpu_health") or {})]
    return found


def report(config, node, found, seconds):
    failures = [r for _, r in found if r.status == Status.FAIL]
    return {
        "schema": SCHEMA,
        "cluster": config.get("cluster"),
        "node": node,
        "healthy": not failures,
        "seconds": round(seconds, 3),
        "findings": [
            {"check": check, "status": str(r.status), "evidence": r.evidence, "fix": r.fix}
            for check, r in found
        ],
    }


def keep(result):
    """The result as the node's last, written whole (a reader never sees half of it)."""
    folder = os.path.dirname(LAST)
    try:
        os.makedirs(folder, mode=0o755, exist_ok=True)
        partial = LAST + ".partial"
        with open(partial, "w", encoding="utf-8") as handle:
            json.dump(dict(result, at=time.time()), handle)
        os.chmod(partial, 0o644)
        os.replace(partial, LAST)
    except OSError as exc:
        sys.stderr.write("mpicluster-health: could not keep the result in %s: %s\n" % (LAST, exc))


def lines(result):
    """NHC's manner: one line per finding that is not a pass, then the node's state."""
    out = []
    for finding in result["findings"]:
        if finding["status"] == "pass":
            continue
        label = "ERROR" if finding["status"] == "fail" else "WARNING"
        out.append("%s: mpicluster-health: %s: %s" % (label, finding["check"], finding["evidence"]))
        if finding["fix"]:
            out.append("  fix: %s" % finding["fix"])
    checks = sorted(set(f["check"] for f in result["findings"]))
    state = "healthy" if result["healthy"] else "UNHEALTHY"
    out.append(
        "mpicluster-health: %s %s (%s; %.2f s)"
        % (result["node"], state, ", ".join(checks), result["seconds"])
    )
    return out


def main(argv):
    started = time.monotonic()
    try:
        options = arguments(argv)
        config = record(options["config"])
        node = this_node(config, options["node"])
    except Refused as exc:
        sys.stderr.write("mpicluster-health: %s\n" % exc)
        return 2
    found = judge(config, node, gather(config, node))
    result = report(config, node, found, time.monotonic() - started)
    if os.geteuid() == 0 and options["config"] == CONFIG:
        keep(result)
    if options["json"]:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        sys.stdout.write("\n".join(lines(result)) + "\n")
    return 0 if result["healthy"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
