"""What a node is: platform, compiler, CUDA, GPUs, the installed stack.

A program for the nodes, stdlib only (any Python 3.6+). Run alone it prints one JSON
object: `/usr/bin/python3 - PREFIX CUDA_HOME [RECORD]` with this file on stdin, which is
how `up`, `fetch` and `hostfile` learn what each node is (`up` names the record of
what the last `up` applied: the node's identity and how it stands against that record
are added; MPICLUSTER_USERS and MPICLUSTER_SITE_UCX in its environment ask about the
inventory's users and the site's UCX). doctor's probe is sent as this
file followed by probe.py (see mpicluster.remote.script) and extends these facts.
"""

import glob
import json
import os
import platform
import pwd
import re
import shutil
import socket
import subprocess
import sys

import mpicluster_applied
import mpicluster_stackfiles

MAX_TEXT = 65536
#: Seconds apt-cache may take (the probe as a whole has 60).
APT_TIMEOUT = 40
#: What ssh prints when sshd dropped a connection before authentication (a burst beyond
#: its MaxStartups, 10 by default): worth one more try, unlike a refusal.
SSH_DROPPED = ("connection closed by", "connection reset", "kex_exchange_identification")
#: Where programs are looked up: the node's own PATH may be the very thing that is broken.
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def run(argv, timeout=10, env=None):
    """(exit code, stdout, stderr); code None when it could not run or timed out."""
    if "/" not in argv[0]:
        argv = [shutil.which(argv[0], path=SYSTEM_PATH) or argv[0], *argv[1:]]
    try:
        done = subprocess.run(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
            env=env,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return None, "", str(exc)
    return (
        done.returncode,
        done.stdout.decode("utf-8", "replace"),
        done.stderr.decode("utf-8", "replace"),
    )


def ssh_dropped(code, stderr):
    """ssh exited 255 because sshd dropped the connection before authentication."""
    lowered = stderr.lower()
    return code == 255 and any(text in lowered for text in SSH_DROPPED)


def read_text(path):
    try:
        with open(path, "rb") as handle:
            return handle.read(MAX_TEXT).decode("utf-8", "replace")
    except OSError:
        return None


def first_existing(paths):
    for path in paths:
        if path and os.path.exists(path):
            return path
    return None


SYSTEM_PATH = ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def os_release():
    values = {}
    for line in (read_text("/etc/os-release") or "").splitlines():
        key, sep, value = line.strip().partition("=")
        if sep:
            values[key] = value.strip('"')
    return {
        "id": values.get("ID", "unknown"),
        "version_id": values.get("VERSION_ID", ""),
        "like": values.get("ID_LIKE", ""),
        # what `up` installs with: a node without it is refused before any change (looked
        # for where the system keeps it too: a login's PATH may be what is broken)
        "apt": shutil.which("apt-get", path=os.environ.get("PATH", "") + SYSTEM_PATH) is not None,
    }


def gcc_version():
    """(version, error): the gcc a build here uses (the installed one, else the one apt
    would install; None: neither), or why neither could be read.

    apt-cache builds its package cache on first use: slow on a node under load, so it
    has longer; a version not read must not pass for "no gcc" (another fingerprint)."""
    code, out, _ = run(["dpkg-query", "-W", "-f", "${Version}", "gcc"])
    if code == 0 and out.strip():
        return out.strip(), None
    code, policy, err = run(["apt-cache", "policy", "gcc"], timeout=APT_TIMEOUT)
    if code is None:
        return None, "apt-cache policy gcc did not answer: " + (err.strip() or "no output")
    match = re.search(r"Candidate:\s*(\S+)", policy)
    return (match.group(1) if match and match.group(1) != "(none)" else None), None


def cuda_version(cuda_home):
    """The CUDA toolkit's version at cuda_home (version.json, version.txt, nvcc), or None."""
    if not cuda_home:
        return None
    text = read_text(os.path.join(cuda_home, "version.json"))
    if text:
        try:
            return json.loads(text)["cuda"]["version"]
        except (ValueError, KeyError, TypeError):
            pass
    text = read_text(os.path.join(cuda_home, "version.txt")) or ""
    match = re.search(r"CUDA Version\s+([0-9.]+)", text)
    if match:
        return match.group(1)
    code, out, _ = run([os.path.join(cuda_home, "bin", "nvcc"), "--version"], timeout=15)
    match = re.search(r"release [\d.]+, V([\d.]+)", out if code == 0 else "")
    return match.group(1) if match else None


GPU_FIELDS = "index,name,driver_version,uuid,compute_cap"


def gpus():
    """The GPUs nvidia-smi lists, with the driver and the CUDA version it supports."""
    smi = first_existing(["/usr/bin/nvidia-smi", "/usr/local/bin/nvidia-smi"]) or shutil.which(
        "nvidia-smi"
    )
    if not smi:
        return {"ok": False, "error": "nvidia-smi not found", "devices": []}
    code, out, err = run([smi, "--query-gpu=" + GPU_FIELDS, "--format=csv,noheader"], timeout=20)
    if code != 0 and "compute_cap" in (out + err):  # drivers before 510 lack that field
        code, out, err = run(
            [smi, "--query-gpu=" + GPU_FIELDS.rsplit(",", 1)[0], "--format=csv,noheader"],
            timeout=20,
        )
    if code != 0:
        error = (err or out).strip()[-300:] or "exit %s" % code
        return {"ok": False, "error": error, "devices": []}
    devices = []
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3:
            device = {"index": parts[0], "name": parts[1], "driver": parts[2]}
            device["uuid"] = parts[3] if len(parts) > 3 else None
            device["compute_cap"] = parts[4] if len(parts) > 4 else None
            devices.append(device)
    _, out, _ = run([smi], timeout=20)
    match = re.search(r"CUDA Version:\s*([0-9.]+)", out or "")
    return {
        "ok": True,
        "devices": devices,
        "count": len(devices),
        "names": sorted(set(d["name"] for d in devices)),
        "driver": devices[0]["driver"] if devices else None,
        "cuda": match.group(1) if match else None,
    }


def current_stack(prefix):
    """The active stack's FINGERPRINT.json; None when there is none, and a record whose
    fingerprint is "unreadable" when the file is damaged (it matches no build)."""
    text = read_text(os.path.join(prefix, "current", "FINGERPRINT.json"))
    if text is None:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        record = None
    return record if isinstance(record, dict) else {"fingerprint": "unreadable"}


def stack_files(prefix, deep=False, loaded=True):
    """The active stack against its manifest (mpicluster_stackfiles.verify); None
    when there is no active stack."""
    current = os.path.join(prefix, "current")
    if not os.path.exists(os.path.join(current, "FINGERPRINT.json")):
        return None
    return mpicluster_stackfiles.verify(os.path.realpath(current), deep=deep, loaded=loaded)


def stack_users(prefix, limit=10):
    """Processes running a program or library of a stack under the prefix (a job), as
    far as this user may look: [{pid, command}]."""
    current = os.path.join(prefix, "current")
    roots = (os.path.join(prefix, "stacks") + "/", current + "/")
    if os.path.islink(current):  # an active tree kept somewhere else
        roots += (os.path.realpath(current) + "/",)
    found = []
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in (me, os.getppid()):
            continue
        base = "/proc/" + name
        try:
            hit = os.readlink(base + "/exe").startswith(roots)
        except OSError:
            hit = False
        if not hit:
            try:
                with open(base + "/maps") as handle:
                    hit = any(root in line for line in handle for root in roots)
            except (OSError, UnicodeDecodeError):
                continue
        if hit:
            try:
                with open(base + "/cmdline", "rb") as handle:
                    command = handle.read().replace(b"\0", b" ").decode("utf-8", "replace")
            except OSError:
                command = "?"
            found.append({"pid": int(name), "command": command.strip()[:160]})
            if len(found) >= limit:
                break
    return found


def identity():
    """What the playbooks describe this node to its peers by (names, addresses, host
    keys): `up` folds it into its inputs, so a node that changed any of it is provisioned
    again rather than proved unchanged."""
    _, addresses, _ = run(["ip", "-4", "-o", "addr", "show"])
    _, default, _ = run(["ip", "-4", "route", "show", "default"])
    return {
        "hostname": socket.gethostname(),
        "addresses": sorted(set(re.findall(r"\binet (\d+\.\d+\.\d+\.\d+)/", addresses or ""))),
        "default_route": (default or "").strip(),
        "host_keys": sorted(
            (read_text(p) or "").strip() for p in glob.glob("/etc/ssh/ssh_host_*_key.pub")
        ),
    }


def applied(record_path):
    """The node against the record the last successful `up` left (None: no record)."""
    if not record_path:
        return None
    home = pwd.getpwuid(os.getuid()).pw_dir
    return mpicluster_applied.check(record_path, home)


def rdma_devices():
    """The node's RDMA devices (InfiniBand, RoCE, EFA), as the kernel lists them."""
    try:
        return sorted(os.listdir("/sys/class/infiniband"))
    except OSError:
        return []


def gpudirect():
    """What GPUDirect RDMA needs on this node: the peer-memory module loaded (the
    driver's nvidia-peermem, or Mellanox's older nv_peer_mem) or loadable, or dma-buf:
    the driver's open kernel module on a kernel of 5.12 or later (NCCL then registers GPU
    memory through dma-buf and needs no module)."""
    modules = read_text("/proc/modules") or ""
    loaded = re.search(r"^(nvidia_peermem|nv_peer_mem) ", modules, re.M)
    code, _, _ = run(["modinfo", "-n", "nvidia-peermem"], timeout=10)
    version = read_text("/proc/driver/nvidia/version") or ""
    release = (read_text("/proc/sys/kernel/osrelease") or "").strip()
    numbers = re.match(r"(\d+)\.(\d+)", release)
    return {
        "peermem_loaded": loaded.group(1) if loaded else None,
        "peermem_available": code == 0,
        "open_kernel_module": "Open Kernel Module" in version,
        "kernel": release,
        "dmabuf_kernel": bool(numbers)
        and (int(numbers.group(1)), int(numbers.group(2))) >= (5, 12),
    }


def cluster_packages(prefix):
    """The digest of the cluster's own packages active here (python.requirements), or
    None."""
    link = os.path.join(prefix, "python", "current")
    try:
        return os.readlink(link)
    except OSError:
        return None


#: Where a UCX install keeps libucp under its prefix: lib (UCX's own install, HPC-X),
#: lib64, or a multiarch folder (Debian's /usr/lib/x86_64-linux-gnu).
UCX_LIBRARY_GLOBS = ("lib/libucp.so*", "lib64/libucp.so*", "lib/*-linux-*/libucp.so*")


def site_ucx(prefix):
    """The site's UCX that `up` builds Open MPI against (stack.ucx.prefix): the first
    libucp found under `prefix`, or None (the run-time library alone counts: a node that
    only runs the stack may have libucp.so.0 without its development link)."""
    for pattern in UCX_LIBRARY_GLOBS:
        found = sorted(glob.glob(os.path.join(prefix, pattern)))
        if found:
            return {"prefix": prefix, "libucp": found[0]}
    return {"prefix": prefix, "libucp": None}


#: The comment of an account mpicluster locked (the accounts module's LOCKED).
LOCKED = "mpicluster locked"


def accounts(passwd="/etc/passwd", group="/etc/group"):  # noqa: S107 (paths, not secrets)
    """The node's local accounts and groups ({name: [uid, gid]}, {name: gid}), and the
    accounts mpicluster locked ([name]), read from the files themselves: what `up` plans
    the cluster's users against (a name or id held here, or only in a directory, is told
    apart by the files)."""
    users, groups, locked = {}, {}, []
    for text, into, width in ((read_text(passwd), users, 2), (read_text(group), groups, 1)):
        for line in (text or "").splitlines():
            fields = line.split(":")
            if len(fields) < 4 or not fields[0] or fields[0].startswith(("+", "-")):
                continue
            try:
                ids = [int(fields[2]), int(fields[3])] if width == 2 else int(fields[2])
            except ValueError:
                continue
            into[fields[0]] = ids
            if width == 2 and len(fields) > 4 and fields[4] == LOCKED:
                locked.append(fields[0])
    return {"users": users, "groups": groups, "locked": locked}


def directory_accounts(names):
    """Of `names`, those the name service resolves that the local files do not hold (an
    LDAP or SSSD directory's accounts): {name: uid}."""
    local = accounts()["users"]
    found = {}
    for name in names:
        if name in local:
            continue
        try:
            found[name] = pwd.getpwnam(name).pw_uid
        except KeyError:
            continue
    return found


#: The cluster's users as `up` made them (layout.USERS_RECORD): the ids it gave.
USERS_RECORD = "/etc/mpicluster/users.json"
#: The cordoned nodes (layout.CORDONS): `up` keeps them out of the hostfiles, doctor
#: expects them out.
CORDONS = "/etc/mpicluster/cordons.json"


def node_facts(prefix, cuda_home, with_gpus=True):
    gcc, gcc_error = gcc_version()
    return {
        "nproc": os.cpu_count() or 1,
        "os": os_release(),
        "arch": platform.machine(),
        "python": "%d.%d" % sys.version_info[:2],
        "glibc": platform.libc_ver()[1],
        "gcc": gcc,
        "gcc_error": gcc_error,
        "cuda": cuda_version(cuda_home),
        "gpus": gpus() if with_gpus else None,
        "gpudirect": gpudirect() if with_gpus else None,
        "rdma": rdma_devices(),
        "current": current_stack(prefix),
        "stack_users": stack_users(prefix),
        "cluster_packages": cluster_packages(prefix),
        "cordons": read_text(CORDONS),
        "accounts": accounts(),
        "users_record": read_text(USERS_RECORD),
    }


def main():
    prefix, cuda_home = sys.argv[1], sys.argv[2]
    facts = node_facts(prefix, cuda_home)
    # the inventory's users (`up` passes their names): which a directory already holds
    names = [n for n in os.environ.get("MPICLUSTER_USERS", "").split(",") if n]
    if names:
        facts["directory_accounts"] = directory_accounts(names)
    # the inventory's stack.ucx.prefix (`up` passes it): whether this node has that UCX
    if os.environ.get("MPICLUSTER_SITE_UCX"):
        facts["site_ucx"] = site_ucx(os.environ["MPICLUSTER_SITE_UCX"])
    if len(sys.argv) > 3:  # `up`: what its fast path judges by
        facts["identity"] = identity()
        facts["applied"] = applied(sys.argv[3])
        facts["current_files"] = stack_files(prefix, loaded=False)
    sys.stdout.write(json.dumps(facts) + "\n")


if __name__ == "__main__":
    main()
