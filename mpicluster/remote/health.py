"""mpicluster's health check of one node: the part of doctor's judgement a node can make
alone, in about a second, with doctor's own judges (shipped with this program from
mpicluster/doctor/checks: one judge per finding, two callers).

`up` installs it as /usr/local/sbin/mpicluster-health with its record of the cluster
(/etc/mpicluster/health.json: the layout, the MPI settings of /etc/environment's block,
and each node's MPI user, ssh port, GPUs and slots). Run as root (by Slurm, by hand) or
as the MPI user:

    mpicluster-health [--json] [--node NAME] [--config FILE] [--slurm | --prolog]

It judges the active stack against its manifest (size, mode, mtime, and the sha256 of
what a launch loads), free disk where the stack lives, /tmp and /dev/shm writable by the
MPI user with room for this node's ranks, and on GPU nodes nvidia-smi's count against
the inventory and the GPUs' health (hardware Xids, ECC and row remapping, NVLink,
clocks, persistence, the NVSwitch fabric). For the MPI user it judges what a peer's ssh
and mpirun's launch meet here: sshd listening on the node's ssh port, a login shell that
runs commands, home, ~/.ssh and authorized_keys in modes StrictModes accepts, the
cluster key there (0600, the user's own) and accepted (ssh); and what their
non-interactive ssh login gets, reproduced here as remote/sshlogin.py says (sshd's
variables, pam_env's /etc/environment, pam_limits' limits over sshd's own, then their
shell's startup files): PATH and LD_LIBRARY_PATH holding the stack, mpirun and mpicc
resolving to it, the block literal and not overridden (env), the python, mpi4py, libmpi
and prted it finds and its loading variables (rank), its open files, locked memory and
processes limits (limits).

What only doctor sees, from its real ssh logins and from every node at once: whether a
peer's login is accepted (host keys, known_hosts, the key line's from= list, sshd's
AllowUsers and Match blocks), sshd's own environment and PAM (SetEnv, AcceptEnv,
~/.ssh/environment, pam_env.conf), output a login prints before its command, and
settings that differ between nodes.

With `scheduler: slurm`, slurmd runs it every `health.interval` seconds as its
HealthCheckProgram (`--slurm`, through mpicluster-health-slurm) and before every job as
the prolog (`--prolog`, through mpicluster-prolog): the check drains a failing node
through scontrol with mpicluster's reason, records that drain, and returns the node after
two passing checks in a row (mpicluster/health/drain_rules.py has the rules); the prolog
fails (exit 1: Slurm requeues the job elsewhere) on a node it finds failing. While a job
runs on the node, room on /tmp and /dev/shm is the job's and is not judged (their
writability is); the prolog leaves out the GPUs' slower health queries (their count stays).

One line per finding, in NHC's manner (`ERROR: ...` for a failure, `WARNING: ...`),
then one line saying the node's state; `--json`: one JSON object (schema 1). Exit 0:
healthy (warnings allowed); 1: unhealthy (a failure); 2: it could not judge (no record,
an unknown node). Run as root, it keeps its result in
/var/lib/mpicluster/health-last.json (what `mpicluster nodes` shows).
"""

import json
import os
import pwd
import socket
import sys
import time

import accessfacts
import gpuhealth
import loginlimits
import nodedisk
import nodeinfo
import rankenv
import slurmnode
import sshlogin

from mpicluster.cluster.layout import ENVIRONMENT_FILE, Layout
from mpicluster.doctor import refusals
from mpicluster.doctor.checks import disk, environment, gpu_health, limits, rank_env, stack_files
from mpicluster.doctor.model import Status, failed, passed, warned
from mpicluster.health import drain_rules

CONFIG = "/etc/mpicluster/health.json"
#: Where a run as root leaves its result (`mpicluster nodes` reads it).
LAST = "/var/lib/mpicluster/health-last.json"
SCHEMA = 1
USAGE = "usage: mpicluster-health [--json] [--node NAME] [--config FILE] [--slurm | --prolog]"


class Refused(Exception):
    """The check cannot judge this node (exit 2)."""


def arguments(argv):
    options = {"json": False, "node": None, "config": CONFIG, "slurm": False, "prolog": False}
    words = list(argv)
    while words:
        word = words.pop(0)
        if word in ("--json", "--slurm", "--prolog"):
            options[word[2:]] = True
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


def gather(config, node, busy=False, fast=False):
    """The facts the judges read, measured here (as the probe measures them). `busy`: a
    job runs here (room on /tmp and /dev/shm is its own); `fast`: the prolog's part."""
    layout, user = config["layout"], config["nodes"][node].get("user")
    facts = {"env": {"USER": user}}
    if layout.get("install") == "source":
        facts["stack_files"] = nodeinfo.stack_files(layout["prefix"])
    paths = {"install": layout["prefix"], "tmp": "/tmp", "shm": "/dev/shm"}  # noqa: S108
    facts["disk"] = nodedisk.disk(paths, user=user)
    if busy:
        for label in ("tmp", "shm"):
            facts["disk"][label]["busy"] = True
    else:
        facts["shm_files"] = loginlimits.shm_files()
    if user:
        facts.update(login_facts(config, node, user))
    if config["nodes"][node].get("gpus") and config.get("gpus_present", True):
        facts["gpus"] = nodeinfo.gpus()
        if (facts["gpus"] or {}).get("ok") and not fast:
            facts["gpu_health"] = gpuhealth.health()
    return facts


#: The login environment the env check reads, besides the MPI settings of the record.
ENV_KEYS = ["PATH", "LD_LIBRARY_PATH", "TMPDIR", "HOME"]
#: Login shells that run no command.
NOLOGIN = ("nologin", "false")


def layout_of(config):
    got = config["layout"]
    return Layout(
        got["prefix"],
        got["install"],
        got.get("cuda_home"),
        packages=bool(got.get("packages")),
        site_ucx=got.get("site_ucx"),
    )


def login_facts(config, node, user):
    """What sshd judges of the MPI user's files, and what their non-interactive ssh login
    gets here (reproduced: remote/sshlogin.py), as doctor's probe reads them in a real
    one: its environment, its limits, what that environment resolves."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return {"login": {"no_user": True}}
    port = config["nodes"][node].get("port")  # a record of an older `up` has none
    facts = {
        "ssh": accessfacts.trust(config["cluster"], entry.pw_dir),
        "access": {
            "login": accessfacts.login(config["cluster"], user),
            "sshd_listens": accessfacts.listening(int(port)) if port else {},
        },
        "login": {"shell": entry.pw_shell},
    }
    if os.path.basename(entry.pw_shell or "") in NOLOGIN:
        return facts
    if os.geteuid() not in (0, entry.pw_uid):
        facts["login"]["unmeasured"] = "run as %s, not as root or %s" % (
            accessfacts.owner_name(os.geteuid()),
            user,
        )
        return facts
    env = sshlogin.environment(entry, int(port or 22))
    login = sshlogin.measure(entry, env, sshlogin.session_limits(entry))
    facts["login"].update(login)
    if "error" not in login:
        add_login(facts, config, entry, login)
    return facts


def add_login(facts, config, entry, login):
    """The probe's facts of a login, read from the reproduced one."""
    env = login["env"]
    variables = rankenv.variables(env)
    settings = sorted(config.get("mpi_env") or {})
    home = entry.pw_dir
    wanted = ["PATH", "LD_LIBRARY_PATH", *settings, *variables]
    facts["access"]["setters"] = accessfacts.setters(wanted, home)
    facts.update(
        {
            "env": dict([(k, env.get(k)) for k in ENV_KEYS + settings], USER=entry.pw_name),
            "which": dict((p, rankenv.which(p, env.get("PATH", ""))) for p in ("mpirun", "mpicc")),
            "environment_file": nodeinfo.read_text(ENVIRONMENT_FILE),
            "limits": dict(login["limits"], setters=loginlimits.setters(home=home)),
            "rank_env": rankenv.rank_environment(
                variables,
                layout_of(config).current,
                environ=env,
                preexec=sshlogin.becoming(entry, None),
            ),
            "rdma": nodeinfo.rdma_devices(),
        }
    )


def judge(config, node, facts):
    """[(check, Result)]: every finding of the shared judges, passes included."""
    wanted = config["nodes"][node]
    found = [("stack", r) for r in stack_files.judge(node, facts)]
    found += [("disk", r) for r in disk.judge_disk(node, facts)]
    found += judge_login(config, node, facts)
    ranks = sum(int(n.get("slots") or 1) for n in config["nodes"].values())
    slots = int(wanted.get("slots") or 1)
    found += [("limits", r) for r in limits.judge(node, facts, slots, ranks)]
    if "gpus" in facts:
        counted = gpu_health.judge_count(node, facts["gpus"] or {}, int(wanted["gpus"]))
        found += [("gpus", r) for r in counted]
        if not counted:
            found += [("gpus", r) for r in gpu_health.judge(node, facts.get("gpu_health") or {})]
    return found


def judge_login(config, node, facts):
    """The MPI user's ssh files and sshd (ssh), their login's environment (env) and what
    it resolves (rank): [(check, Result)]; nothing without a user in the record."""
    user = config["nodes"][node].get("user")
    login = facts.get("login")
    if not user or login is None:
        return []
    if login.get("no_user"):
        return [
            (
                "ssh",
                failed(
                    node,
                    "%s, the MPI user, has no account on %s" % (user, node),
                    "create %s on %s as on the other nodes (the same uid and home)" % (user, node),
                ),
            )
        ]
    found = [("ssh", r) for r in judge_ssh(config, node, user, facts)]
    if login.get("unmeasured") or login.get("error"):
        found.append(("env", unmeasured(node, user, login)))
    elif "env" in facts:
        lay, expected = layout_of(config), config.get("mpi_env") or {}
        found += [("env", r) for r in environment.judge(lay, expected, node, facts)]
        found += [("rank", r) for r in rank_env.judge_node(lay, expected, node, facts) or []]
    return found


def judge_ssh(config, node, user, facts):
    """sshd listening, the login shell, and the files sshd and ssh judge: doctor's own
    causes of a refused login (doctor/refusals.py), one finding each."""
    shell = facts["login"].get("shell") or ""
    found = [refusals.nologin(node, user, shell)] if os.path.basename(shell) in NOLOGIN else []
    found += [f for f in [refusals.not_listening(facts, node)] if f]
    found += refusals.own_files(facts, node, config["cluster"])
    if found:
        return [failed(node, evidence, fix) for evidence, fix in found]
    sshd = facts["access"]["sshd_listens"]
    return [
        passed(
            node,
            ("sshd listens on port %d; " % sshd["port"] if sshd.get("listening") else "")
            + "%s's shell, home, ~/.ssh, authorized_keys and the cluster key as sshd and "
            "ssh accept them" % user,
        )
    ]


def unmeasured(node, user, login):
    """A login the check could not reproduce: a warning when it may not become the user,
    else a failure (a login that fails or hangs here fails mpirun's launch too)."""
    if login.get("unmeasured"):
        return warned(
            node,
            "%s's login not measured: the check is %s" % (user, login["unmeasured"]),
            "run mpicluster-health as root (or as %s) to judge a login's environment" % user,
        )
    return failed(
        node,
        "a non-interactive login of %s on %s does not run its command: %s"
        % (user, node, login["error"]),
        "run `ssh %s true` as %s from a peer: a startup file (/etc/bash.bashrc, ~/.bashrc) "
        "that fails or waits breaks every ssh login there, mpirun's launch included" % (node, user),
    )


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
    if result.get("slurm"):
        step = result["slurm"]
        out.append("mpicluster-health: slurm: %s (%s)" % (step["action"], step["why"]))
        for key in ("error", "on_change"):
            if step.get(key):
                out.append("WARNING: mpicluster-health: slurm: %s" % step[key])
    return out


def first_failure(result):
    return next((f for f in result["findings"] if f["status"] == "fail"), None)


def slurm_step(config, node, result, slurm):
    """What Slurm does with this result (drain_rules), done: the step's dict for the
    result. `slurm`: every node's state from slurmctld (None: it could not be asked)."""
    if slurm is None or node not in slurm:
        return {"action": "none", "why": "slurmctld could not be asked, or knows no %s" % node}
    now = time.time()
    here = slurm[node]
    state = drain_rules.SlurmNode(frozenset(here["states"]), here["reason"])
    failure = first_failure(result)
    reason = drain_rules.reason_of(failure["check"], failure["evidence"]) if failure else ""
    elsewhere = sum(
        1
        for name, other in slurm.items()
        if name != node
        and name in config["nodes"]
        and other["reason"].startswith(drain_rules.PREFIX)
    )
    with slurmnode.Locked():
        step = drain_rules.decide(
            result["healthy"],
            reason,
            state,
            drain_rules.Drain.of(slurmnode.read_record()),
            changing=slurmnode.changing(now),
            drained_elsewhere=elsewhere,
            nodes=len(config["nodes"]),
            now=now,
        )
        done = {"action": step.action, "why": step.why}
        error = None
        if step.action == "drain":
            error = slurmnode.update(node, "DRAIN", reason)
        elif step.action == "resume":
            error = slurmnode.update(node, "RESUME")
        if error is None:
            slurmnode.write_record(step.record.to_dict() if step.record else None)
        else:
            done["error"] = error
    if error is None and step.action in ("drain", "resume"):
        changed = "drained" if step.action == "drain" else "returned"
        said = slurmnode.on_change(
            config.get("on_change"), node, changed, reason or (state.reason or "")
        )
        if said:
            done["on_change"] = said
    return done


def main(argv):
    started = time.monotonic()
    try:
        options = arguments(argv)
        config = record(options["config"])
        node = this_node(config, options["node"])
    except Refused as exc:
        sys.stderr.write("mpicluster-health: %s\n" % exc)
        return 2
    slurm = None
    if options["slurm"] or options["prolog"]:
        try:
            slurm = slurmnode.nodes()
        except OSError as exc:
            sys.stderr.write("mpicluster-health: %s\n" % exc)
    busy = bool(
        slurm and node in slurm and drain_rules.SlurmNode(frozenset(slurm[node]["states"])).busy
    )
    facts = gather(config, node, busy=busy, fast=options["prolog"])
    result = report(config, node, judge(config, node, facts), time.monotonic() - started)
    if options["slurm"] or options["prolog"]:
        result["slurm"] = slurm_step(config, node, result, slurm)
        result["mode"] = "prolog" if options["prolog"] else "slurm"
    if os.geteuid() == 0 and options["config"] == CONFIG:
        keep(result)
    if options["json"]:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        sys.stdout.write("\n".join(lines(result)) + "\n")
    if options["prolog"]:
        # the job goes elsewhere (Slurm requeues it), unless the finding is the cluster's
        return 0 if result["healthy"] or result["slurm"]["action"] == "cluster" else 1
    return 0 if result["healthy"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
