"""The manifest of a stack mpicluster built, and the check of a stack against it.

Like `rpm -V`, `debsums` or `spack verify`, for the one tree mpicluster installs: every
file of a stack (its path, kind, mode, size, mtime and sha256; a link's target) is
recorded once, on the builder, just before the build is marked complete
(mpicluster/remote/plugins/modules/mpicluster_stack_manifest). The record lives in the tree itself
(MANIFEST_NAME, beside FINGERPRINT.json), so the pack carries it to every node, and tar
keeps mode, size and mtime: the manifest holds on every node as on the builder.

`verify` compares a tree with its manifest: size, mode, kind and mtime of every file (a
stat each: the whole stack in well under a second), the sha256 of the files a launch
loads (the MPI programs and libraries, mpi4py) or, `deep`, of every file. What it finds
is named per file: missing, added, or changed (and what changed). Python's own
__pycache__ folders are not part of the stack: Python writes them as it runs.

Stdlib only, and old-Python plain: the Ansible module imports it on the builder
(ansible.module_utils.mpicluster_stackfiles), the nodes' probes (nodeinfo, doctor's
probe) import the very same code.
"""

import gzip
import hashlib
import json
import os
import re
import stat
import time

VERSION = 1
MANIFEST_NAME = "MANIFEST.json.gz"
#: Records of the build written after the manifest, or by it.
NOT_LISTED = ("FINGERPRINT.json", MANIFEST_NAME)
#: Written by Python next to a module it imported, not by the build.
SKIP_DIRS = ("__pycache__",)
#: Written into the stack's site-packages by `up` after the install: the path of the
#: cluster's own packages (python.requirements; the mpicluster_cluster_packages module).
CLUSTER_PACKAGES_PTH = "mpicluster-cluster-packages.pth"
#: What a launch loads, hashed on every check (relative to the stack's root): its
#: programs, the MPI libraries and their plugins, mpi4py. NCCL and PyTorch are big and
#: not loaded by an MPI launch: their size and mtime are checked, their sha256 with deep.
LOADED = re.compile(
    r"^(?:bin|sbin|libexec)/"
    r"|^lib/(?!libnccl)[^/]+\.so(?:\.[0-9.]+)?$"
    r"|^lib/(?:openmpi|pmix|prte|prrte|ucx)/"
    r"|^venv/bin/python"
    r"|^venv/lib/python[0-9.]+/site-packages/mpi4py/"
)
#: A report names this many problems (the counts are whole).
SHOWN = 40
CHUNK = 1 << 20


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while True:
            block = handle.read(CHUNK)
            if not block:
                return digest.hexdigest()
            digest.update(block)


def walk(root):
    """(relative path, lstat) of every file and link under root, sorted, without
    __pycache__ and the build's records; folders are not listed (a missing folder shows
    as its missing files)."""
    found = []
    root = root.rstrip("/") or "/"
    skip = len(root) + (0 if root == "/" else 1)
    folders = [root]
    while folders:
        folder = folders.pop()
        # the path below root by slicing: os.path.relpath took 0.34 s of up's 0.6 s
        # probe on a stack of 21,000 files
        below = folder[skip:]
        try:
            # each file's lstat relative to its open folder: one name looked up, not the
            # whole path (on a container's overlayfs that halves the walk's CPU)
            handle = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            continue
        try:
            _walk_folder(handle, folder, below, folders, found)
        finally:
            os.close(handle)
    found.sort()
    return found


def _walk_folder(handle, folder, below, folders, found):
    """One folder's files and links into found, its folders onto folders."""
    try:
        entries = list(os.scandir(handle))
    except OSError:
        return
    for item in entries:
        name = item.name
        try:
            is_folder = item.is_dir(follow_symlinks=False)  # a link to a folder is listed
        except OSError:
            continue
        if is_folder:
            if name not in SKIP_DIRS:
                folders.append(folder + "/" + name)
            continue
        relative = below + "/" + name if below else name
        if relative in NOT_LISTED or name == CLUSTER_PACKAGES_PTH:
            continue
        try:
            found.append((relative, os.lstat(name, dir_fd=handle)))
        except OSError:
            continue  # gone since the listing


def entry(root, relative, info):
    """A manifest entry: [kind, mode, size, mtime, sha256 or link target]."""
    full = os.path.join(root, relative)
    if stat.S_ISLNK(info.st_mode):
        return ["l", 0, 0, 0, os.readlink(full)]
    kind = "f" if stat.S_ISREG(info.st_mode) else "o"
    digest = sha256_of(full) if kind == "f" else ""
    return [kind, stat.S_IMODE(info.st_mode), info.st_size, int(info.st_mtime), digest]


def build(root, fingerprint=None):
    """The manifest of the tree at root, as plain data."""
    files = {}
    for relative, info in walk(root):
        files[relative] = entry(root, relative, info)
    return {"version": VERSION, "fingerprint": fingerprint, "files": files}


def write(root, fingerprint=None):
    """Write root's manifest into root (renamed into place: never half-written);
    returns (files, bytes of the file)."""
    manifest = build(root, fingerprint)
    target = os.path.join(root, MANIFEST_NAME)
    partial = target + ".part"
    data = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    with open(partial, "wb") as raw, gzip.GzipFile("", "wb", 6, raw, 0) as handle:
        handle.write(data)
    os.chmod(partial, 0o644)
    os.rename(partial, target)
    return len(manifest["files"]), os.path.getsize(target)


def load(root):
    """The manifest in root; None when there is none; raises ValueError when it cannot
    be read."""
    path = os.path.join(root, MANIFEST_NAME)
    if not os.path.exists(path):
        return None
    try:
        with gzip.open(path, "rb") as handle:
            manifest = json.loads(handle.read().decode("utf-8"))
    except (OSError, EOFError, ValueError) as exc:
        raise ValueError("%s cannot be read: %s" % (path, exc)) from None
    if not isinstance(manifest, dict) or manifest.get("version") != VERSION:
        raise ValueError("%s is not a manifest this mpicluster reads" % path)
    return manifest


def _differences(root, relative, want, info, deep, loaded):
    """What differs between a file and its manifest entry ([] for nothing), and whether
    its sha256 was taken."""
    now_kind = "l" if stat.S_ISLNK(info.st_mode) else ("f" if stat.S_ISREG(info.st_mode) else "o")
    kind, mode, size, mtime, digest = want
    if now_kind != kind:
        names = {"l": "a link", "f": "a file", "o": "not a file"}
        return ["kind (%s, was %s)" % (names[now_kind], names[kind])], False
    if kind == "l":
        target = os.readlink(os.path.join(root, relative))
        return (["target (%s, was %s)" % (target, digest)] if target != digest else []), False
    found = []
    if stat.S_IMODE(info.st_mode) != mode:
        found.append("mode (%04o, was %04o)" % (stat.S_IMODE(info.st_mode), mode))
    if info.st_size != size:
        found.append("size (%d bytes, was %d)" % (info.st_size, size))
    touched = int(info.st_mtime) != mtime
    hashed = False
    wanted = deep or touched or (loaded and LOADED.search(relative))
    if kind == "f" and info.st_size == size and wanted:
        hashed = True
        try:
            if sha256_of(os.path.join(root, relative)) != digest:
                found.append("content (sha256)")
        except OSError as exc:
            found.append("unreadable (%s)" % exc.__class__.__name__)
    return found, hashed


def _folders(path):
    parts = path.split("/")[:-1]
    return ["/".join(parts[: i + 1]) + "/" for i in range(len(parts))]


def gone_folders(expected, missing):
    """The missing files as problems, a folder whose every file is missing as one
    ("venv/lib/python3.11/site-packages/mpi4py/", "69 files")."""
    listed, gone = {}, {}
    for relative in expected:
        for folder in _folders(relative):
            listed[folder] = listed.get(folder, 0) + 1
    for relative in missing:
        for folder in _folders(relative):
            gone[folder] = gone.get(folder, 0) + 1
    problems, named = [], set()
    for relative in sorted(missing):
        whole = next((f for f in _folders(relative) if gone[f] == listed[f]), None)
        if whole is None:
            problems.append({"path": relative, "what": "missing", "how": ""})
        elif whole not in named:
            named.add(whole)
            problems.append({"path": whole, "what": "missing", "how": "%d files" % gone[whole]})
    return problems


def verify(root, deep=False, loaded=True):
    """The tree at root against its manifest, as plain data:
    {"manifest": bool, "error": str or None, "files": int, "hashed": int,
     "seconds": float, "problems": [{"path", "what": "missing"|"added"|"changed",
     "how": str}] (the first SHOWN), "counts": {"missing", "added", "changed"}}.
    `loaded`: take the sha256 of what a launch loads (LOADED); without it (up's probe)
    only stat, and the sha256 of a file whose mtime changed."""
    started = time.time()
    report = {
        "root": root,
        "manifest": False,
        "error": None,
        "files": 0,
        "hashed": 0,
        "deep": bool(deep),
        "problems": [],
        "counts": {"missing": 0, "added": 0, "changed": 0},
    }
    try:
        manifest = load(root)
    except ValueError as exc:
        report["error"] = str(exc)
        manifest = None
    if manifest is None:
        report["seconds"] = round(time.time() - started, 3)
        return report
    report["manifest"] = True
    report["fingerprint"] = manifest.get("fingerprint")
    expected = manifest["files"]
    report["files"] = len(expected)
    problems = []
    seen = set()
    for relative, info in walk(root):
        seen.add(relative)
        want = expected.get(relative)
        if want is None:
            problems.append({"path": relative, "what": "added", "how": ""})
            continue
        found, hashed = _differences(root, relative, want, info, deep, loaded)
        report["hashed"] += hashed
        if found:
            problems.append({"path": relative, "what": "changed", "how": ", ".join(found)})
    missing = [relative for relative in expected if relative not in seen]
    report["counts"]["missing"] = len(missing)
    if missing:
        problems += gone_folders(expected, missing)
    for problem in problems:
        if problem["what"] != "missing":
            report["counts"][problem["what"]] += 1
    order = {"changed": 0, "missing": 1, "added": 2}
    problems.sort(key=lambda p: (order[p["what"]], p["path"]))
    report["problems"] = problems[:SHOWN]
    report["seconds"] = round(time.time() - started, 3)
    return report
