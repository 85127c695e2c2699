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


def setters(patterns=LIMITS_FILES):
    """{item: ["file:line: text", ...]}: limits.conf lines for the item, and ulimit lines
    in the login's startup files."""
    found = {}
    paths = []
    for pattern in patterns:
        paths.extend(sorted(glob.glob(pattern)) if "*" in pattern else [pattern])
    for path in paths:
        for number, line in enumerate((read_text(path) or "").splitlines(), 1):
            fields = line.split("#", 1)[0].split()
            if len(fields) == 4 and fields[2] in ITEMS:
                found.setdefault(fields[2], []).append(
                    "%s:%d: %s" % (path, number, " ".join(fields))
                )
    for path in startup_paths():
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
