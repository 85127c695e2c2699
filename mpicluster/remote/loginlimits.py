"""The resource limits a non-interactive login gets on this node (what mpirun's daemons,
and so the ranks, get: pam_limits applies them to ssh sessions), the lines that set
them, and what is in /dev/shm. Read by doctor's probe, stdlib only."""

import glob
import os
import re
import resource

from accessfacts import startup_paths
from nodeinfo import read_text

ITEMS = {
    "nofile": resource.RLIMIT_NOFILE,
    "memlock": resource.RLIMIT_MEMLOCK,
    "nproc": resource.RLIMIT_NPROC,
}
LIMITS_FILES = ("/etc/security/limits.conf", "/etc/security/limits.d/*.conf")
#: ulimit's option for each item, in a startup file's `ulimit -n 1024`.
ULIMIT_FLAGS = {"nofile": "n", "memlock": "l", "nproc": "u"}
#: Shared-memory files of Open MPI (4.x vader, 5.x sm), PMIx and NCCL.
SHM_NAMES = re.compile(r"^(vader_segment|sm_segment|pmix|nccl|psm2|ucx|ompi)", re.I)


def _value(number):
    return None if number == resource.RLIM_INFINITY else number


def limits_files(patterns=LIMITS_FILES):
    """The files pam_limits reads, in its order: limits.conf, then limits.d's."""
    paths = []
    for pattern in patterns:
        paths.extend(sorted(glob.glob(pattern)) if "*" in pattern else [pattern])
    return paths


def setters(patterns=LIMITS_FILES, home=None):
    """{item: ["file:line: text", ...]}: limits.conf lines for the item, and ulimit lines
    in the login's startup files (this user's, or those under `home`)."""
    found = {}
    for path in limits_files(patterns):
        for number, line in enumerate((read_text(path) or "").splitlines(), 1):
            fields = line.split("#", 1)[0].split()
            if len(fields) == 4 and fields[2] in ITEMS:
                found.setdefault(fields[2], []).append(
                    "%s:%d: %s" % (path, number, " ".join(fields))
                )
    for path in startup_paths(home):
        for number, line in enumerate((read_text(path) or "").splitlines(), 1):
            stripped = line.strip()
            if stripped.startswith("#") or "ulimit" not in stripped:
                continue
            for item, flag in ULIMIT_FLAGS.items():
                if re.search(r"\bulimit\b.*-[A-Za-z]*" + flag, stripped):
                    found.setdefault(item, []).append("%s:%d: %s" % (path, number, stripped[:160]))
    return found


def shm_files(path="/dev/shm", keep=5):  # noqa: S108 (read, never written)
    """What is in /dev/shm: every file's count and bytes, and those named like Open MPI's,
    PMIx's or NCCL's segments (the first few names)."""
    count = total = mpi_count = mpi_bytes = 0
    names = []
    try:
        entries = os.listdir(path)
    except OSError:
        return None
    for name in sorted(entries):
        try:
            size = os.lstat(os.path.join(path, name)).st_size
        except OSError:
            continue
        count += 1
        total += size
        if SHM_NAMES.match(name):
            mpi_count += 1
            mpi_bytes += size
            if len(names) < keep:
                names.append(name)
    return {
        "files": count,
        "bytes": total,
        "mpi_files": mpi_count,
        "mpi_bytes": mpi_bytes,
        "mpi_names": names,
    }


def limits():
    found = {}
    for name, which in ITEMS.items():
        soft, hard = resource.getrlimit(which)
        found[name] = [_value(soft), _value(hard)]
    found["setters"] = setters()
    return found


# --- a login of another user, computed by root (the node's own health check) ---------

#: /proc/PID/limits' names of the items.
PROC_NAMES = {"Max open files": "nofile", "Max locked memory": "memlock", "Max processes": "nproc"}
#: pam_limits' precedence of a line's domain: the user's name (or a uid range it is in)
#: over a group of the user's over `*`; among lines of one rank, the last read wins.
BY_USER, BY_GROUP, BY_ANYONE = 0, 1, 4
SSHD_PIDS = ("/run/sshd.pid", "/var/run/sshd.pid")


def proc_limits(pid):
    """{item: [soft, hard]} of process `pid` (None: unlimited), or None when unreadable."""
    text = read_text("/proc/%s/limits" % pid)
    if not text:
        return None
    found = {}
    for line in text.splitlines():
        for name, item in PROC_NAMES.items():
            if line.startswith(name + " "):
                soft, hard = line[len(name) :].split()[:2]
                found[item] = [
                    None if value == "unlimited" else int(value) for value in (soft, hard)
                ]
    return found if len(found) == len(ITEMS) else None


def sshd_pid(paths=SSHD_PIDS):
    """The pid of the sshd that listens here (its PidFile), or None (none runs, or
    systemd's socket starts one per connection)."""
    for path in paths:
        text = (read_text(path) or "").strip()
        if text.isdigit() and (read_text("/proc/%s/comm" % text) or "").strip() == "sshd":
            return int(text)
    return None


def _rank(domain, who):
    """pam_limits' rank of a line's domain for the user `who`, or None: not theirs."""
    if domain == who["user"]:
        return BY_USER
    if domain == "*":
        return BY_ANYONE
    group = domain.startswith("@")
    name = domain[1:] if group else domain
    if domain.startswith("%") or ":" not in name:  # % is for maxlogins only
        return BY_GROUP if group and name in who["groups"] else None
    low, high = name.split(":", 1)
    if not (low or high) or not all(part.isdigit() for part in (low, high) if part):
        return None
    if not low:  # ":N": exactly N (a group: any of the user's)
        inside = int(high) in who["gids"] if group else who["uid"] == int(high)
    else:  # "N:" or "N:M": the user's uid (primary gid) in the range
        number = who["gid"] if group else who["uid"]
        inside = number >= int(low) and (not high or number <= int(high))
    return None if not inside else BY_GROUP if group else BY_USER


def _conf_value(item, value):
    """A limits.conf value in getrlimit's terms (None: unlimited), or False: not one."""
    if value in ("-1", "-", "unlimited", "infinity"):
        if item != "nofile":
            return None
        # pam_limits gives an "unlimited" nofile the kernel's ceiling
        ceiling = (read_text("/proc/sys/fs/nr_open") or "").strip()
        return int(ceiling) if ceiling.isdigit() else None
    digits = re.match(r"\d+", value)
    if not digits:
        return False
    return int(digits.group(0)) * (1024 if item == "memlock" else 1)


def pam_limits(who, start, patterns=LIMITS_FILES):
    """{item: [soft, hard]} pam_limits gives a session of the user `who` ({user, uid,
    gid, gids, groups}), from the limits of the process it runs in (`start`: sshd's):
    limits.conf's and limits.d's lines for them, by pam_limits' rules."""
    found = dict((item, list(start[item])) for item in ITEMS)
    ranks = dict((item, [99, 99]) for item in ITEMS)
    for path in limits_files(patterns):
        for line in (read_text(path) or "").splitlines():
            fields = line.split("#", 1)[0].split()
            if len(fields) != 4 or fields[2].lower() not in ITEMS:
                continue
            kind, item, text = (field.lower() for field in fields[1:])
            rank = _rank(fields[0], who)
            value = _conf_value(item, text)
            if rank is None or value is False or kind not in ("soft", "hard", "-"):
                continue
            for index, wanted in ((0, "soft"), (1, "hard")):
                if kind not in (wanted, "-"):
                    continue
                if ranks[item][index] < rank:
                    break  # pam_limits stops at the first half a closer line set
                found[item][index], ranks[item][index] = value, rank
    for item, (soft, hard) in found.items():
        if hard is not None and (soft is None or soft > hard) and ranks[item] != [99, 99]:
            found[item][0] = hard
    return found
