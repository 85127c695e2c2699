"""What a successful `up` left on a node, as digests, so the next `up` can prove from one
probe that nothing changed. Stdlib only: the mpicluster_applied Ansible module imports it
on the nodes (ansible.module_utils.mpicluster_applied) at the end of `up`, and the
nodes' probe (nodeinfo, sent by the control machine) imports the very same code.

The record (`applied.json` in mpicluster's configuration folder) holds the digest of
`up`'s inputs, the footprint and package list it was taken over, and one digest per
path: the managed part only (a block, the cluster's authorized line, a whole file of
mpicluster's own, a folder's listing), with mode and owner. Both sides compute it as
the MPI user, so a path that user cannot read reads the same on both.
"""

import hashlib
import json
import os
import stat
import subprocess

VERSION = 1
#: A folder listing stops here (an interrupted build's scratch): its digest then
#: says "over the limit", which no complete `up` leaves behind.
MAX_ENTRIES = 5000
#: Written by Python next to a program it ran, not by `up`.
SKIP_NAMES = ("__pycache__",)
DPKG_FORMAT = "${Package} ${Version} ${db:Status-Status}\\n"


def expand(path, home):
    if path == "~":
        return home
    if path.startswith("~/"):
        return os.path.join(home, path[2:])
    return path


def _meta(path):
    try:
        info = os.lstat(path)
    except OSError as exc:
        return {"error": exc.__class__.__name__}
    meta = {"mode": stat.S_IMODE(info.st_mode), "uid": info.st_uid, "gid": info.st_gid}
    if stat.S_ISLNK(info.st_mode):
        meta["link"] = os.readlink(path)
    elif stat.S_ISDIR(info.st_mode):
        meta["dir"] = True
    else:
        meta["size"] = info.st_size
        meta["mtime"] = info.st_mtime_ns
    return meta


def _read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError as exc:
        return exc.__class__.__name__.encode()


def _block(data, begin, end):
    lines = data.splitlines(True)
    inside = []
    for line in lines:
        bare = line.rstrip(b"\r\n").decode("utf-8", "replace")
        if not inside and bare == begin:
            inside.append(line)
        elif inside:
            inside.append(line)
            if bare == end:
                return b"".join(inside)
    return b"".join(inside)


def _lines(data, pattern):
    import re

    regexp = re.compile(pattern)
    return b"".join(
        line
        for line in data.splitlines(True)
        if regexp.search(line.rstrip(b"\n").decode("utf-8", "replace"))
    )


def _listing(path, whole, skip):
    """(relative path, meta) of everything under `path`, sorted; `whole`: descend."""
    found = []
    for root, dirs, files in os.walk(path):
        dirs.sort()
        dirs[:] = [name for name in dirs if name not in SKIP_NAMES]
        for name in dirs + sorted(files):
            full = os.path.join(root, name)
            if full in skip or name in SKIP_NAMES:
                continue
            found.append([os.path.relpath(full, path), _meta(full)])
            if len(found) > MAX_ENTRIES:
                return "over %d entries" % MAX_ENTRIES
        if not whole:
            break
    return found


def entry_state(entry, home, skip=()):
    """How one footprint entry is now, as plain data (None: not recorded)."""
    kind = entry["kind"]
    if kind == "glob":  # ssh control sockets come and go
        return None
    path = expand(entry["path"], home)
    meta = _meta(path)
    state = {"meta": {k: v for k, v in meta.items() if k not in ("size", "mtime")}}
    if "error" in meta:
        return state
    if kind == "file":
        state["sha256"] = hashlib.sha256(_read(path)).hexdigest()
    elif kind == "block":
        state["sha256"] = hashlib.sha256(_block(_read(path), entry["begin"], entry["end"]))
        state["sha256"] = state["sha256"].hexdigest()
    elif kind == "line":
        state["sha256"] = hashlib.sha256(_lines(_read(path), entry["regexp"])).hexdigest()
    elif kind == "tree" and meta.get("dir"):
        # a stack folder holds whole builds: its top level says which
        state["listing"] = _listing(path, not entry.get("stack"), skip)
    return state


def packages_state(packages):
    """dpkg's version and status of each package, as one text."""
    if not packages:
        return ""
    try:
        done = subprocess.run(
            ["/usr/bin/dpkg-query", "-W", "-f", DPKG_FORMAT, *sorted(packages)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return "dpkg-query: %s" % exc
    return done.stdout.decode("utf-8", "replace") + done.stderr.decode("utf-8", "replace")


def digest(data):
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def state(footprint, packages, home, record_path):
    """{path: digest} of every footprint entry, and "packages": the packages' digest."""
    digests = {}
    for entry in footprint:
        current = entry_state(entry, home, skip=(record_path,))
        if current is not None:
            digests[expand(entry["path"], home)] = digest(current)
    digests["packages"] = digest(packages_state(packages))
    return digests


def record(inputs, cluster, footprint, packages, home, record_path):
    """The record a successful `up` leaves (the mpicluster_applied module writes it)."""
    return {
        "version": VERSION,
        "cluster": cluster,
        "inputs": inputs,
        "footprint": footprint,
        "packages": sorted(packages),
        "state": state(footprint, packages, home, record_path),
    }


def check(record_path, home):
    """What the next `up` learns from the record: None without one, else the cluster
    and inputs it was taken for and the paths that changed since ("packages": one of
    the packages)."""
    try:
        with open(record_path, encoding="utf-8") as handle:
            saved = json.load(handle)
    except OSError:
        return None
    except ValueError:
        return {"cluster": None, "inputs": None, "changed": [record_path]}
    if not isinstance(saved, dict) or saved.get("version") != VERSION:
        return {"cluster": None, "inputs": None, "changed": [record_path]}
    now = state(saved.get("footprint") or [], saved.get("packages") or [], home, record_path)
    was = saved.get("state") or {}
    changed = sorted(path for path in set(now) | set(was) if now.get(path) != was.get(path))
    return {"cluster": saved.get("cluster"), "inputs": saved.get("inputs"), "changed": changed}
