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

Detached (`run --detach`: SPEC has "detach", and the job's id follows SPEC so that
remote/jobs.py can tell this process by its command line): the launcher makes the
job's folder (~/.local/state/mpicluster/jobs/JOB: job.json, output.log, pid, then
exit.json), starts a daemon of its own (two forks, a session of its own, nothing of
the SSH session left open), prints {"job", "pid", "folder"} once the job runs and
returns. The daemon writes the job's output to output.log, stops it on SIGTERM or
SIGINT as above (remote/jobs.py's stop sends it), with SPEC's "hang" reads every
rank's Python stack when the log stays the same for its timeout (hang.json, each
node's answer of remote/stacks.py) and then stops it (exit 124) unless told to keep
it, and writes exit.json last: {"code", "status", "ended", "stopped", "hung"}.
"""

import base64
import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import traceback

GRACE = 5.0
#: How long the ssh to one node that ends the job's processes there may take.
REAP_TIMEOUT = 30
#: How long reading the ranks' stacks on one node may take (a detached job's hang).
STACKS_TIMEOUT = 60
HUNG = 124
STOPPED = 130


def reap_everywhere(spec):
    """End the job's processes here and, over ssh, on the other nodes it used; say on
    stderr where some were left running by mpirun."""
    source, job = spec.get("reap"), spec.get("job")
    if not source or not job:
        return
    others = [h for h in spec.get("hosts") or [] if h != spec.get("head")]
    # started first: every node's grace runs at the same time as this one's
    sessions, results = start_each(others, [job])
    space = {"__name__": "reap"}
    exec(compile(source, "reap.py", "exec"), space)  # noqa: S102 (our own reap.py)
    results[spec.get("head") or "head"] = space["reap"](job)
    finish_each(sessions, results, source, REAP_TIMEOUT)
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


def start(spec, cwd, env):
    """The job (mpirun) in its own session, stdin from /dev/null; None if it cannot start."""
    try:
        return subprocess.Popen(
            spec["argv"],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError as exc:
        sys.stderr.write("mpicluster: cannot start %s: %s\n" % (spec["argv"][0], exc))
        return None


def write_json(path, data):
    """`data` at `path`, whole or not at all (written aside, then renamed)."""
    with open(path + ".part", "w") as out:
        json.dump(data, out)
    os.rename(path + ".part", path)


def start_each(hosts, args):
    """`python3 - ARGS` on every host over the cluster's own ssh ("" is this node), all
    started at once: (the running ones, {host: {"error": why}} for the others)."""
    started, results = {}, {}
    for host in hosts:
        argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", host] if host else []
        argv += ["/usr/bin/python3", "-", *args]
        try:
            started[host] = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            results[host] = {"error": str(exc)}
    return started, results


def finish_each(started, results, source, timeout):
    """`source` to each started program's stdin; its last line's JSON into `results`."""
    for host, proc in started.items():
        try:
            out, err = proc.communicate(source.encode(), timeout=timeout)
            lines = out.decode("utf-8", "replace").strip().splitlines()
            results[host] = json.loads(lines[-1]) if lines else {"error": err.decode()[-200:]}
        except (subprocess.TimeoutExpired, ValueError) as exc:
            proc.kill()
            results[host] = {"error": str(exc)}
    return results


def read_stacks(spec, folder):
    """A detached job gone quiet: every rank's Python stack on every node of the job
    (remote/stacks.py), kept in hang.json as {node: its answer}."""
    hang, head = spec["hang"], spec.get("head")
    hosts = ["" if h == head else h for h in spec.get("hosts") or [head]]
    started, found = start_each(hosts, [spec["job"], hang.get("pyspy") or ""])
    finish_each(started, found, hang["stacks"], STACKS_TIMEOUT)
    answers = {}
    for host, answer in found.items():
        if "ranks" not in answer:
            answer = {"ranks": [], "error": answer.get("error") or "no report from the node"}
        answers[host or head] = answer
    write_json(os.path.join(folder, "hang.json"), {"seconds": hang["timeout"], "nodes": answers})


def detach(spec, cwd, env, home):
    """`run --detach`: the job's folder, then the job under a daemon of its own; print
    {"job", "pid", "folder"} once it runs."""
    folder = os.path.join(home, spec["detach"]["folder"])
    try:
        os.makedirs(folder, 0o700)
        record = dict(spec["detach"]["record"], cwd=cwd, started=time.time())
        write_json(os.path.join(folder, "job.json"), record)
    except OSError as exc:
        sys.stderr.write("mpicluster: cannot keep the job in %s: %s\n" % (folder, exc))
        return 2
    if "sbatch" in spec["detach"]:
        return submit(spec, cwd, env, folder, record)
    sys.stdout.flush()
    sys.stderr.flush()
    reader, writer = os.pipe()
    first = os.fork()
    if first:
        os.close(writer)
        os.waitpid(first, 0)
        with os.fdopen(reader, "rb") as answer_in:
            answer = answer_in.read().decode("utf-8", "replace").strip()
        if not answer.startswith("{"):
            sys.stderr.write("mpicluster: %s\n" % (answer or "the job did not start"))
            return 127
        sys.stdout.write(answer + "\n")
        return 0
    os.close(reader)
    os.setsid()
    if os.fork():
        os._exit(0)
    code = 1
    try:
        code = daemon(spec, cwd, env, folder, writer)
    except BaseException:  # the daemon's last words go to its log
        traceback.print_exc()
    finally:
        os._exit(code)


#: The batch script: srun's command, then how it ended (exit.json, written whole).
BATCH = """#!/bin/sh
# mpicluster run --detach: job %(job)s
%(argv)s
code=$?
printf '{"code": %%d, "status": %%d, "ended": %%s}\\n' "$code" "$code" "$(date +%%s)" \\
  > %(exit)s.part && mv %(exit)s.part %(exit)s
exit "$code"
"""


def batch_script(job, argv, exit_json):
    """job.sh's text: `argv` run, then its end written to `exit_json`."""
    words = " ".join(shlex.quote(word) for word in argv)
    return BATCH % {"job": job, "argv": words, "exit": shlex.quote(exit_json)}


def submit(spec, cwd, env, folder, record):
    """The job as a Slurm batch job (sbatch): its id into job.json, then printed."""
    script = os.path.join(folder, "job.sh")
    with open(script, "w") as out:
        out.write(batch_script(spec["job"], spec["argv"], os.path.join(folder, "exit.json")))
    os.chmod(script, 0o700)
    command = ["sbatch", "--parsable", "--job-name=mpicluster-" + spec["job"]]
    command += ["--output=" + os.path.join(folder, "output.log"), "--open-mode=append"]
    command += ["--chdir=" + cwd, *spec["detach"]["sbatch"], script]
    try:
        done = subprocess.run(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        sys.stderr.write("mpicluster: sbatch: %s\n" % exc)
        return 127
    said = done.stdout.decode("utf-8", "replace").strip().split(";")[0]
    if done.returncode != 0 or not said.isdigit():
        sys.stderr.write(done.stderr.decode("utf-8", "replace") or "sbatch said %r\n" % said)
        return done.returncode or 1
    write_json(os.path.join(folder, "job.json"), dict(record, slurm=int(said)))
    answer = {"job": spec["job"], "slurm": int(said), "folder": folder}
    sys.stdout.write(json.dumps(answer) + "\n")
    return 0


def daemon(spec, cwd, env, folder, writer):
    """The detached job's keeper: its output into output.log, a stop on SIGTERM or
    SIGINT, its hang read and stopped, exit.json at its end."""
    log = os.open(os.path.join(folder, "output.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    child = start(spec, cwd, env)
    if child is None:
        os.write(writer, b"the job did not start: see its output.log in " + folder.encode())
        write_json(os.path.join(folder, "exit.json"), {"code": 127, "ended": time.time()})
        return 127
    with open(os.path.join(folder, "pid"), "w") as out:
        out.write("%d\n" % os.getpid())
    answer = {"job": spec["job"], "pid": os.getpid(), "folder": folder}
    os.write(writer, json.dumps(answer).encode())
    os.close(writer)
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    code, stopped, hung = keep(child, spec, folder, log, stopping)
    final = HUNG if hung else STOPPED if stopped else (128 - code if code < 0 else code)
    ended = {"code": final, "status": code, "ended": time.time(), "stopped": stopped}
    write_json(os.path.join(folder, "exit.json"), dict(ended, hung=hung))
    return final


def keep(child, spec, folder, log, stopping):
    """Wait for the job; stop it when asked (or hung): (its status, stopped, hung)."""
    hang = spec.get("hang")
    done, stopper, hung = threading.Event(), None, False
    size, quiet_since = -1, time.monotonic()
    while child.poll() is None:
        if stopping.is_set() and stopper is None:
            stopper = threading.Thread(target=stop, args=(child, done, spec))
            stopper.start()
        now_size = os.fstat(log).st_size
        if now_size != size:
            size, quiet_since = now_size, time.monotonic()
        elif hang and stopper is None and time.monotonic() - quiet_since > hang["timeout"]:
            read_stacks(spec, folder)
            quiet_since = time.monotonic()  # kept: read again after another quiet spell
            if hang.get("stop", True):
                hung = True
                stopping.set()
            continue
        time.sleep(0.25)
    done.set()
    if stopper is not None:
        stopper.join()
    elif child.returncode < 0:  # mpirun itself was killed: its ranks may be running on
        reap_everywhere(spec)
    return child.returncode, stopper is not None and not hung, hung


def main():
    spec = json.loads(base64.b64decode(sys.argv[1]).decode())
    home = os.path.expanduser("~")
    cwd = os.path.join(home, os.path.expanduser(spec.get("cwd") or home))
    if not os.path.isdir(cwd):
        sys.stderr.write("mpicluster: no folder %s on the head node\n" % cwd)
        return 2
    env = dict(os.environ)
    env.update(spec.get("env") or {})
    if spec.get("detach"):
        return detach(spec, cwd, env, home)
    child = start(spec, cwd, env)
    if child is None:
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
