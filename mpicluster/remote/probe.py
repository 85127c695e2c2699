"""doctor's probe: runs on every node over the control connection, stdlib only.

The control machine starts it with a one-line bootstrap that reads this script
from stdin (`python3 -c '...exec(stdin.read(N))' N`), so stdin stays open for
the conversation, one JSON object per line each way:

    control -> node   {"spec": ...}            what to look at
    node -> control   {"kind": "facts", ...}   everything read locally, and the
                                               port of a TCP listener it started
    control -> node   {"peers": [...]}         where the other nodes listen
    node -> control   {"kind": "clock", ...}   at once: this node's time
    node -> control   {"kind": "pairs", ...}   TCP connects to every peer's
                                               listener, then `ssh peer true`
    control -> node   {"retry": {...}}         (optional) a second try of the pairs
    node -> control   {"kind": "retried", ...} that failed alone, once all nodes are done
    control -> node   {"launch": {...}}        (optional, repeated) mpirun launches of
    node -> control   {"kind": "launched", ...} the proof by launch (launch_proof_node.py)
    control -> node   {"cancel": ID}           (optional) stop the launches of order ID
    control -> node   end of input             the listener closes, the probe exits

Requests run at once, each in a thread of its own (the launches while the pairs are
tried), and a request with an "id" has it in each of its answers. The slowest facts (the
stack's files against its manifest, a rank's login environment: `slow_facts`) are read
beside the others from the start; where the spec asks ("later": true) they come in a
message of their own, {"kind": "later facts", ...}, so that nothing waits for them.

It changes nothing on the node (its launches run MPI programs that print and exit). A
watchdog ends it whatever happens, so a lost control connection leaves nothing running;
at the end of input it stops every launch still running.
Its facts are nodeinfo's (what `up` plans builds from), extended with what the checks
judge.
"""

import contextlib
import errno
import glob
import hashlib
import json
import os
import pwd
import re
import shutil
import signal
import socket
import stat
import sys
import threading
import time
import traceback

import accessfacts
import fabricfacts
import gpuhealth
import loginlimits
import nodedisk
import rankenv
from launch_proof_node import Launches, launch
from nodeinfo import first_existing, node_facts, read_text, run, ssh_dropped, stack_files

OUT = threading.Lock()
#: How much nicer than the probe the slowest facts' process runs (os.nice).
NICER = 5
#: Read from a login's environment, besides the MPI settings the spec names.
ENV_KEYS = ["PATH", "LD_LIBRARY_PATH", "TMPDIR", "HOME", "USER"]
METADATA = re.compile(r"([A-Za-z0-9_.]+?)-([0-9][^-]*?)(?:-py[0-9.]+)?\.(dist|egg)-info$")
BRIDGE_PREFIXES = ("docker", "virbr", "br-", "cni", "podman", "lxcbr", "lxdbr", "flannel", "kube")
SSH_OPTIONS = [
    "-o",
    "BatchMode=yes",
    "-o",
    "StrictHostKeyChecking=yes",
    "-o",
    "ControlMaster=no",
    "-o",
    "ControlPath=none",
    "-o",
    "ConnectionAttempts=1",
    # doctor changes nothing: no learning of extra host keys into a known_hosts
    "-o",
    "UpdateHostKeys=no",
    "-T",
]
# Fast key exchange first (the default post-quantum one costs ~10x the CPU); the
# server still picks from what both sides allow, and old clients retry without it.
FAST_KEX = ["-o", "KexAlgorithms=^curve25519-sha256,curve25519-sha256@libssh.org"]


def send(obj):
    data = json.dumps(obj) + "\n"
    with OUT:
        sys.stdout.write(data)
        sys.stdout.flush()


def receive():
    line = sys.stdin.buffer.readline()
    if not line:
        return None
    return json.loads(line.decode("utf-8"))


def neighbour_limits():
    """The kernel's ARP table limits, or None where this network namespace hides them."""
    limits = {}
    for key in ("gc_thresh1", "gc_thresh2", "gc_thresh3"):
        text = read_text("/proc/sys/net/ipv4/neigh/default/" + key)
        try:
            limits[key] = int(text)
        except (TypeError, ValueError):
            return None
    return limits


# --- facts -----------------------------------------------------------------------


def resolve_all(names, seconds):
    """IPv4 addresses for each name, in the order the resolver gives them."""
    found = {}

    def one(name):
        try:
            infos = socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)
            addresses = []
            for info in infos:
                if info[4][0] not in addresses:
                    addresses.append(info[4][0])
            found[name] = {"addresses": addresses}
        except OSError as exc:
            found[name] = {"error": str(exc)}

    threads = []
    for name in names:
        thread = threading.Thread(target=one, args=(name,), daemon=True)
        thread.start()
        threads.append(thread)
    deadline = time.time() + seconds
    for thread in threads:
        thread.join(max(0.0, deadline - time.time()))
    for name in names:
        found.setdefault(name, {"error": "no answer from the resolver within %d s" % seconds})
    return found


def interfaces():
    result = {}
    try:
        names = sorted(os.listdir("/sys/class/net"))
    except OSError:
        names = []
    for name in names:
        base = "/sys/class/net/" + name
        state = (read_text(base + "/operstate") or "").strip()
        mtu = (read_text(base + "/mtu") or "").strip()
        result[name] = {
            "state": state,
            "mtu": int(mtu) if mtu.isdigit() else None,
            "bridge": os.path.isdir(base + "/bridge"),
            "addresses": [],
        }
    ip = first_existing(["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"])
    if ip:
        code, out, _ = run([ip, "-o", "-4", "addr", "show"], timeout=5)
        for line in out.splitlines() if code == 0 else []:
            parts = line.split()
            if len(parts) >= 4 and parts[2] == "inet":
                name = parts[1].split("@")[0]
                entry = result.setdefault(name, {"state": "", "bridge": False, "addresses": []})
                entry["addresses"].append(parts[3])
    return result


def which_all(programs):
    path = os.environ.get("PATH", "")
    found = {}
    for program in programs:
        located = shutil.which(program, path=path)
        found[program] = {
            "path": located,
            "real": os.path.realpath(located) if located else None,
        }
    return found


def mpi_identity(layout):
    """What `mpirun` is here: the binary, its version line and a digest of its bytes."""
    mpirun = layout["mpi_bin"] + "/mpirun"
    if not os.path.exists(mpirun):
        mpirun = shutil.which("mpirun", path=os.environ.get("PATH", ""))
    if not mpirun:
        return None
    real = os.path.realpath(mpirun)
    digest = hashlib.sha256()
    try:
        with open(real, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except OSError:
        pass
    code, out, err = run([mpirun, "--version"], timeout=15)
    text = (out + "\n" + err).strip()
    return {
        "path": mpirun,
        "real": real,
        "sha256": digest.hexdigest()[:16],
        "exit_code": code,
        "version_text": "\n".join(text.splitlines()[:6])[:800],
    }


def site_dirs(layout):
    if layout["install"] == "source":
        venv = os.path.dirname(os.path.dirname(layout["python"]))
        return glob.glob(venv + "/lib/python*/site-packages")
    return ["/usr/lib/python3/dist-packages", *glob.glob("/usr/local/lib/python3*/dist-packages")]


def python_packages(layout, wanted):
    """Versions of `wanted` distributions, read from their metadata folders' names."""
    found = {}
    for directory in site_dirs(layout):
        try:
            entries = os.listdir(directory)
        except OSError:
            continue
        for entry in entries:
            match = METADATA.match(entry)
            if match:
                name = match.group(1).lower().replace("_", "-")
                if name in wanted and name not in found:
                    found[name] = match.group(2)
    return found


def python_version(layout):
    if layout["install"] == "source":
        venv = os.path.dirname(os.path.dirname(layout["python"]))
        text = read_text(venv + "/pyvenv.cfg") or ""
        match = re.search(r"^version(?:_info)?\s*=\s*([0-9.]+)", text, re.MULTILINE)
        return match.group(1) if match else None
    if os.path.realpath(layout["python"]) == os.path.realpath(sys.executable):
        return "%d.%d.%d" % sys.version_info[:3]
    code, out, _ = run([layout["python"], "-c", "import platform;print(platform.python_version())"])
    return out.strip() if code == 0 else None


def cuda_aware(record):
    """Whether the active mpicluster build's Open MPI is CUDA-aware ("yes"/"no"), from
    its fingerprint record; None without one."""
    try:
        flag = record["inputs"]["options"]["openmpi"]["cuda"]
    except (KeyError, TypeError):
        return None
    return "yes" if flag else "no"


def torch_nccl(layout, record):
    """Which NCCL the stack's PyTorch loads, read from its files without importing it:
    the wheel's libnccl.so.2 (nvidia-nccl), or the stack's where `up` linked it there
    (stack.pytorch.nccl: stack); "expected" is what the build record asked for."""
    for directory in site_dirs(layout):
        lib = directory + "/nvidia/nccl/lib/libnccl.so.2"
        if not os.path.lexists(lib):
            continue
        real = os.path.realpath(lib)
        stack_lib = os.path.realpath(layout["mpi_lib"]) if layout.get("mpi_lib") else None
        wheel = python_packages(layout, {"nvidia-nccl-cu12", "nvidia-nccl-cu13"})
        if stack_lib and real.startswith(stack_lib + "/"):
            loads, version = "stack", os.path.basename(real)[len("libnccl.so.") :]
        else:
            loads, version = "wheel", next(iter(wheel.values()), None)
        expected = ((record or {}).get("pytorch") or {}).get("nccl")
        return {"loads": loads, "version": version, "path": lib, "expected": expected}
    return None


def nccl_version(layout):
    dirs = [layout.get("mpi_lib") or "", "/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu"]
    if layout.get("cuda_home"):
        dirs.append(layout["cuda_home"] + "/lib64")
    for directory in dirs:
        if not directory:
            continue
        names = glob.glob(directory + "/libnccl.so.*.*")
        if names:
            versions = [os.path.basename(n)[len("libnccl.so.") :] for n in names]
            return max(versions, key=lambda v: [int(p) if p.isdigit() else 0 for p in v.split(".")])
    return None


def user_accounts(names):
    """Each of the inventory's users as this node's name service has her (None: no
    account): her passwd entry, whether her shell is a program that runs, and her home
    folder's own mode and owner. A stat of the folder itself is anyone's to make; what is
    inside a 0700 home is hers alone, and the MPI user does not read it."""
    found = {}
    for name in names:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            found[name] = None
            continue
        shell = entry.pw_shell or "/bin/sh"  # login(1) and sshd: an empty field is sh
        account = {
            "uid": entry.pw_uid,
            "gid": entry.pw_gid,
            "home": entry.pw_dir,
            "shell": entry.pw_shell,
            "shell_runs": os.path.isfile(shell) and os.access(shell, os.X_OK),
            "home_stat": None,
            "home_missing": False,
            "home_error": None,
        }
        try:
            seen = os.stat(entry.pw_dir)
        except OSError as exc:
            account["home_missing"] = exc.errno == errno.ENOENT
            account["home_error"] = exc.strerror or str(exc)
        else:
            account["home_stat"] = {
                "dir": stat.S_ISDIR(seen.st_mode),
                "mode": stat.S_IMODE(seen.st_mode),
                "uid": seen.st_uid,
                "gid": seen.st_gid,
                "owner": _user_name(seen.st_uid),
            }
        found[name] = account
    return found


def _user_name(uid):
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def slow_facts(spec):
    """The facts that take longest: the stack's files against its manifest (a stat of
    every file, the sha256 of those a launch loads) and what a rank's login resolves."""
    layout = spec["layout"]
    rank = rankenv.variables(os.environ) if spec.get("rank_env") else {}
    return {
        "stack_files": stack_files(layout["prefix"], deep=bool(spec.get("deep")))
        if layout.get("install") == "source" and spec.get("stack_files")
        else None,
        "rank_env": rankenv.rank_environment(rank, layout["current"])
        if spec.get("rank_env")
        else None,
    }


def gather(spec):
    layout = spec["layout"]
    hostname = socket.gethostname()
    names = list(spec["names"])
    if hostname not in names:
        names.append(hostname)
    resolved = resolve_all(names, spec.get("resolve_timeout", 5))
    # measured, not written to
    disk_paths = {"install": layout["prefix"], "tmp": "/tmp", "shm": "/dev/shm"}  # noqa: S108
    if os.environ.get("TMPDIR") and os.environ["TMPDIR"] != "/tmp":  # noqa: S108
        disk_paths["TMPDIR"] = os.environ["TMPDIR"]
    files = {}
    for path in spec.get("files", []):
        files[path] = read_text(path)
    packages = python_packages(layout, {"mpi4py", "horovod", "torch"})
    mca = accessfacts.mca_variables(os.environ)
    rank = rankenv.variables(os.environ) if spec.get("rank_env") else {}
    access = {
        "login": accessfacts.login(spec["cluster"]),
        "known_host_keys": accessfacts.known_host_keys(spec["cluster"]),
        "resolver": accessfacts.resolver(names),
        "mca_files": accessfacts.mca_files(os.path.dirname(layout["mpi_bin"])),
        "mca_env": dict((k, os.environ[k]) for k in mca),
        "setters": accessfacts.setters(["PATH", "LD_LIBRARY_PATH", "TMPDIR", *mca, *rank]),
        "printing": accessfacts.printing_lines(),
        "ssh_client": accessfacts.ssh_client_lines(),
        "host_keys": accessfacts.host_key_fingerprints(),
    }
    facts = node_facts(layout["prefix"], layout.get("cuda_home"), with_gpus=bool(spec.get("gpus")))
    facts.update(
        {
            "hostname": hostname,
            "env": dict(
                (k, os.environ.get(k)) for k in ENV_KEYS + list(spec.get("mpi_variables", []))
            ),
            "which": which_all(["mpirun", "mpicc"]),
            "environment_file": read_text(layout["environment_file"]),
            "resolve": resolved,
            "interfaces": interfaces(),
            "fabric": fabricfacts.fabric(layout["mpi_bin"], os.environ),
            "gpu_health": gpuhealth.health() if (facts.get("gpus") or {}).get("ok") else None,
            "neighbour": neighbour_limits(),
            "users": user_accounts(spec["users"]) if spec.get("users") else None,
            "disk": nodedisk.disk(disk_paths),
            "shm_files": loginlimits.shm_files(),
            "limits": loginlimits.limits(),
            "files": files,
            "ssh": accessfacts.trust(spec["cluster"]),
            "access": access,
            "versions": {
                "mpi": mpi_identity(layout),
                "fingerprint": (facts["current"] or {}).get("fingerprint"),
                "cuda_aware": cuda_aware(facts["current"]),
                "python": python_version(layout),
                "mpi4py": packages.get("mpi4py"),
                "horovod": packages.get("horovod"),
                "torch": packages.get("torch"),
                "torch_nccl": torch_nccl(layout, facts["current"]),
                "nccl": nccl_version(layout),
                "cuda": facts["cuda"] if spec.get("gpus") else None,
            },
        }
    )
    return facts


# --- peers -----------------------------------------------------------------------


class Listener:
    """A TCP listener on an ephemeral port that answers each connection with a token."""

    def __init__(self, token):
        self.token = token.encode()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # every address: peers must reach it on whichever one MPI would use
        self.sock.bind(("0.0.0.0", 0))  # noqa: S104
        self.sock.listen(256)
        self.port = self.sock.getsockname()[1]
        thread = threading.Thread(target=self.serve, daemon=True)
        thread.start()

    def serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.answer, args=(conn,), daemon=True).start()

    def answer(self, conn):
        try:
            conn.settimeout(10)
            conn.recv(256)
            conn.sendall(b"mpicluster-doctor " + self.token + b"\n")
        except OSError:
            pass
        finally:
            conn.close()


def tcp_probe(peer, token, timeout):
    started = time.time()
    try:
        sock = socket.create_connection((peer["address"], peer["port"]), timeout)
    except OSError as exc:
        reason = "timed out" if isinstance(exc, socket.timeout) else str(exc)
        return {"peer": peer["name"], "ok": False, "error": reason}
    try:
        sock.settimeout(timeout)
        sock.sendall(b"ping\n")
        answer = sock.recv(256)
    except OSError as exc:
        return {"peer": peer["name"], "ok": False, "error": "no answer: %s" % exc}
    finally:
        sock.close()
    ok = answer.strip() == b"mpicluster-doctor " + token.encode()
    return {
        "peer": peer["name"],
        "ok": ok,
        "error": None if ok else "unexpected answer %r" % answer[:60],
        "seconds": round(time.time() - started, 3),
    }


class Mesh:
    def __init__(self, timeout):
        self.timeout = timeout
        self.ssh = first_existing(["/usr/bin/ssh", "/bin/ssh"]) or shutil.which("ssh") or "ssh"
        self.fast_kex = True

    def probe(self, peer):
        started = time.time()
        attempts = 0
        while True:
            attempts += 1
            argv = [self.ssh, *SSH_OPTIONS, "-o", "ConnectTimeout=%d" % self.timeout]
            if self.fast_kex:
                argv += FAST_KEX
            argv += [peer, "true"]
            code, out, err = run(argv, timeout=self.timeout * 2 + 10)
            lowered = err.lower()
            if self.fast_kex and "kexalgorithms" in lowered and code == 255:
                self.fast_kex = False  # a client too old for the ^ syntax
                continue
            if attempts < 2 and ssh_dropped(code, err):
                time.sleep(0.2)  # sshd's MaxStartups dropping a burst: try once more
                continue
            if code not in (0, 255, None):
                err = (err + "\n" + out).strip()  # nologin and the like print on stdout
            result = {
                "peer": peer,
                "rc": code,
                "stderr": shortened(err),
                "seconds": round(time.time() - started, 3),
            }
            if code != 0:
                result["config"] = self.effective(peer)
            return result

    def effective(self, peer):
        """What this node's ssh client would use for `peer` (`ssh -G`): only read when a
        login failed, to tell a client-side setting from the peer's refusal."""
        code, out, _ = run([self.ssh, "-G", peer], timeout=10)
        if code != 0:
            return None
        wanted = ("user", "hostname", "port", "identityfile", "proxyjump", "proxycommand")
        found = {}
        for line in out.splitlines():
            key, _, value = line.partition(" ")
            if key in wanted:
                found.setdefault(key, []).append(value.strip())
        return found


def shortened(stderr, keep=600):
    """The end of an ssh client's stderr, with the lines that name keys and files kept
    (a changed host key's warning is long: its fingerprint is in the middle)."""
    text = stderr.strip()
    if len(text) <= keep:
        return text
    telling = [x for x in text.splitlines() if "SHA256:" in x or "Offending" in x]
    return "\n".join([*telling[:4], text[-keep:]])


def run_pool(function, items, workers, deadline):
    """Results of function(item) in item order, at most `workers` at once; items not
    started before `deadline` get None."""
    results = [None] * len(items)
    lock = threading.Lock()
    position = [0]

    def worker():
        while True:
            with lock:
                index = position[0]
                position[0] += 1
            if index >= len(items) or time.time() > deadline:
                return
            results[index] = function(items[index])

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, workers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline + 60 - time.time()))
    return results


def background(function):
    """Run function() in a thread; return a wait(timeout) giving its result (None if
    it has not finished)."""
    holder = []
    thread = threading.Thread(target=lambda: holder.append(function()), daemon=True)
    thread.start()

    def wait(timeout):
        thread.join(timeout)
        return holder[0] if holder else None

    return wait


def fatal(function):
    """function, whose exception ends the probe as one in its main thread would (the
    traceback on stderr, exit 1): the control machine reads it as the probe's end."""

    def run_it(*args):
        try:
            function(*args)
        except BaseException:  # any error ends the probe, said on stderr
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)

    return run_it


class Forked:
    """function() begun in a child process, at a lower priority: it runs beside this one
    on another core where there is one, and yields where there is not (the facts and
    answers the others wait for come first). Forked before any thread starts (main)."""

    def __init__(self, function):
        reading, writing = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(reading)
            quiet = os.open(os.devnull, os.O_RDWR)  # the conversation is the parent's alone
            for fd in (0, 1, 2):
                os.dup2(quiet, fd)
            try:
                os.nice(NICER)
                data = json.dumps({"value": function()})
            except BaseException:  # its error, for the parent to raise
                data = json.dumps({"error": traceback.format_exc()})
            with os.fdopen(writing, "w") as out:
                out.write(data)
            os._exit(0)
        os.close(writing)
        self.reading = reading

    def wait(self):
        """Its result, once it is done; raises with the child's error."""
        with os.fdopen(self.reading) as source:
            data = source.read()
        os.waitpid(self.pid, 0)
        self.pid = None
        result = json.loads(data) if data else {"error": "the child ended without its facts"}
        if "error" in result:
            raise RuntimeError("the slowest facts: " + result["error"].strip())
        return result["value"]

    def stop(self):
        """End it if it still runs (the conversation is over)."""
        if self.pid:
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)


def pairs(message, listener_token):
    budget = message["budget"]
    deadline = time.time() + budget
    tcp_targets = message.get("tcp", [])
    ssh_targets = message.get("ssh", [])
    tcp_workers = message.get("tcp_workers", 16)
    ssh_workers = message.get("ssh_workers", 4)

    def tcp_one(peer):
        return tcp_probe(peer, listener_token, message["tcp_timeout"])

    tcp = run_pool(tcp_one, tcp_targets, tcp_workers, deadline)
    mesh = Mesh(message["ssh_timeout"])
    # Peers whose TCP listener did not answer are likely unreachable: try them all at
    # once, so that a blocked node costs one timeout, not one per peer.
    unreachable = set(
        r["peer"] for r in tcp if r is not None and not r["ok"] and "timed out" in r["error"]
    )
    slow = [p for p in ssh_targets if p in unreachable]
    fast = [p for p in ssh_targets if p not in unreachable]
    slow_wait = background(lambda: run_pool(mesh.probe, slow, len(slow), deadline))
    results = dict(zip_lists(fast, run_pool(mesh.probe, fast, ssh_workers, deadline)))
    results.update(
        zip_lists(slow, slow_wait(max(0.0, deadline + 60 - time.time())) or [None] * len(slow))
    )
    ordered = [results.get(p) for p in ssh_targets]
    return {
        "kind": "pairs",
        "tcp": [r for r in tcp if r is not None],
        "ssh": [r for r in ordered if r is not None],
        "not_run": [p for i, p in enumerate(ssh_targets) if ordered[i] is None],
        "tcp_not_run": [p["name"] for i, p in enumerate(tcp_targets) if tcp[i] is None],
    }


def zip_lists(keys, values):
    """Pairs of two lists of the same length (zip(strict=) needs Python 3.10)."""
    return [(keys[i], values[i]) for i in range(len(keys))]


def answer(message, token, launches):
    """One request's answers (the "id" it came with in each of them)."""
    tag = {"id": message["id"]} if "id" in message else {}
    if "peers" in message:
        send(dict({"kind": "clock", "time": time.time()}, **tag))
        send(dict(pairs(message["peers"], token), **tag))
    elif "retry" in message:
        result = pairs(message["retry"], token)
        result["kind"] = "retried"
        send(dict(result, **tag))
    elif "launch" in message:
        order = message["launch"]
        deadline = time.time() + order["budget"]

        def one(item):
            return launch(item, launches, message.get("id"))

        results = run_pool(one, order["items"], order["workers"], deadline)
        send(dict({"kind": "launched", "results": [r for r in results if r is not None]}, **tag))


def main():
    spec = receive()["spec"]
    slow = Forked(lambda: slow_facts(spec))  # first: a fork leaves other threads behind
    watchdog = threading.Timer(spec["deadline"], lambda: os._exit(3))
    watchdog.daemon = True
    watchdog.start()
    listener = Listener(spec["token"]) if spec.get("listen") else None
    facts = gather(spec)
    facts["kind"] = "facts"
    facts["port"] = listener.port if listener else None
    facts["time"] = time.time()
    if spec.get("later"):
        send(facts)
        later = fatal(lambda: send(dict(slow.wait(), kind="later facts")))
        threading.Thread(target=later, daemon=True).start()
    else:
        facts.update(slow.wait())
        send(facts)
    # The listener stays up until control has every node's results; meanwhile control
    # asks for the pairs, a second try of those that failed on their own, and launches.
    launches = Launches()
    message = receive()
    while message is not None:
        if "cancel" in message:
            launches.cancel(message["cancel"])
        else:
            handler = fatal(answer)
            thread = threading.Thread(target=handler, args=(message, spec["token"], launches))
            thread.daemon = True
            thread.start()
        message = receive()
    launches.stop_all()
    slow.stop()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
