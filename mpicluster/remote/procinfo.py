"""What /proc says of a process: its environment, parent and command line.

A helper module of the programs shipped to the nodes (stacks.py, reap.py): they find
`mpicluster run`'s processes by the job's id in their environment.
"""


def environ(pid):
    try:
        with open("/proc/%s/environ" % pid, "rb") as handle:
            entries = handle.read().split(b"\0")
    except OSError:
        return None
    values = {}
    for entry in entries:
        name, sep, value = entry.partition(b"=")
        if sep:
            values[name.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return values


def parent_of(pid):
    try:
        with open("/proc/%s/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[1]
    except (OSError, IndexError):
        return None


def command_of(pid):
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()[:200]
    except OSError:
        return ""
