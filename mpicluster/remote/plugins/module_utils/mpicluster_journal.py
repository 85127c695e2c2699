"""What `up` changes on a node, recorded before the first change, and how `down` takes
it back. Stdlib only: the mpicluster_journal Ansible module (record, undo) imports it
on the nodes (ansible.module_utils.mpicluster_journal), the unit tests on the control
machine (mpicluster.remote.plugins.module_utils.mpicluster_journal).

The footprint (Layout.footprint on the control machine) lists every path `up` touches and
how: `block` (a marked block in a file), `line` (one line, found by a pattern), `file` (a
file of mpicluster's own), `tree` (a folder of mpicluster's own), `dir` (a folder `up`
makes when it is missing: ~/.ssh, the prefix), `glob` (ssh control sockets). A path
starting with `~/` is in the MPI user's home.

The journal holds, per path, how it was before `up` first touched it: whether it existed,
its mode and owner, and its content's sha256. It is written once per path (a later `up`
keeps the first record), atomically. `down` removes the block or line, then:
- a file that did not exist before `up` and is empty now is removed;
- a file whose remaining content equals its recorded content but for the newline `up`
  added at its end gets that content back byte for byte (blockinfile and lineinfile end an
  unterminated last line before they append);
- mode and owner return to the recorded ones (lineinfile's `mode: 0600` changed them);
- anything a user changed outside the markers since `up` is kept.
"""

import errno
import fnmatch
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile

VERSION = 1


def expand(path, home):
    """`~/x` is in the MPI user's home; every other path is absolute."""
    if path == "~":
        return home
    if path.startswith("~/"):
        return os.path.join(home, path[2:])
    return path


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def snapshot(path):
    """How `path` is now: {existed, mode, uid, gid, kind, sha256}."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return {"existed": False}
        raise
    record = {
        "existed": True,
        "mode": stat.S_IMODE(info.st_mode),
        "uid": info.st_uid,
        "gid": info.st_gid,
    }
    if stat.S_ISDIR(info.st_mode):
        record["kind"] = "dir"
    elif stat.S_ISLNK(info.st_mode):
        record["kind"] = "link"
        record["target"] = os.readlink(path)
    else:
        record["kind"] = "file"
        with open(path, "rb") as handle:
            record["sha256"] = sha256(handle.read())
    return record


def load(journal_path):
    try:
        with open(journal_path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return {"version": VERSION, "paths": {}}
    except ValueError:
        # A journal that cannot be read is no journal: down falls back to its defaults
        # (blocks and lines removed, files of mpicluster's own removed).
        return {"version": VERSION, "paths": {}, "unreadable": True}
    data.setdefault("paths", {})
    return data


def write_atomic(path, data, mode=0o600):
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".journal.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.rename(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def record(journal, footprint, home):
    """Add every path of the footprint the journal does not hold yet; True if any."""
    added = False
    for entry in footprint:
        path = expand(entry["path"], home)
        if entry["kind"] == "glob" or path in journal["paths"]:
            continue
        journal["paths"][path] = snapshot(path)
        added = True
    return added


def strip_block(text, begin, end):
    """`text` without the lines from `begin` to `end` (both marker lines included)."""
    lines = text.splitlines(True)
    start = None
    for index, line in enumerate(lines):
        bare = line.rstrip("\r\n")
        if start is None and bare == begin:
            start = index
        elif start is not None and bare == end:
            return "".join(lines[:start] + lines[index + 1 :])
    return text


def strip_lines(text, pattern):
    regexp = re.compile(pattern)
    return "".join(line for line in text.splitlines(True) if not regexp.search(line.rstrip("\n")))


def restored(remaining, before):
    """The text to write back: `remaining`, or the recorded content it equals but for a
    final newline."""
    if not before.get("existed") or before.get("kind") != "file":
        return remaining
    candidates = [remaining]
    if remaining.endswith(b"\n"):
        candidates.append(remaining[:-1])
    for candidate in candidates:
        if sha256(candidate) == before.get("sha256"):
            return candidate
    return remaining


def write_in_place(path, data):
    """Rewrite a file that may be a bind mount (/etc/hosts in containers): no rename."""
    with open(path, "r+b") as handle:
        handle.write(data)
        handle.truncate()
        handle.flush()
        os.fsync(handle.fileno())


def write_replacing(path, data):
    info = os.stat(path)
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".mpicluster.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, stat.S_IMODE(info.st_mode))
        os.chown(tmp, info.st_uid, info.st_gid)
        os.rename(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def restore_owner(path, before):
    """Mode and owner back to the recorded ones; True if they changed."""
    if not before.get("existed") or not os.path.lexists(path) or os.path.islink(path):
        return False
    info = os.stat(path)
    changed = False
    if stat.S_IMODE(info.st_mode) != before["mode"]:
        os.chmod(path, before["mode"])
        changed = True
    if (info.st_uid, info.st_gid) != (before["uid"], before["gid"]):
        os.chown(path, before["uid"], before["gid"])
        changed = True
    return changed


def remove_path(path):
    """Remove a file, link, socket or folder tree; True if there was one."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
        return True
    if os.path.lexists(path):
        os.unlink(path)
        return True
    return False


def undo_entry(entry, path, before, keep_stack):
    """Take back one footprint entry; returns what was done ('' for nothing)."""
    kind = entry["kind"]
    if kind in ("block", "line"):
        return undo_text(entry, path, before)
    if kind in ("file", "tree"):
        if entry.get("stack") and keep_stack:
            return ""
        return "removed" if remove_path(path) else ""
    if kind == "dir":
        return undo_dir(path, before)
    if kind == "glob":
        return undo_glob(path)
    raise ValueError("unknown footprint kind %r" % kind)


def undo_text(entry, path, before):
    """Remove a block or line from a file, then give the file back its recorded content,
    mode and owner where nothing else changed (or remove it if `up` made it)."""
    if not os.path.isfile(path):
        return ""
    with open(path, "rb") as handle:
        current = handle.read()
    text = current.decode("utf-8", "surrogateescape")
    if entry["kind"] == "block":
        remaining = strip_block(text, entry["begin"], entry["end"])
    else:
        remaining = strip_lines(text, entry["regexp"])
    data = restored(remaining.encode("utf-8", "surrogateescape"), before)
    done = ""
    if not data and before.get("existed") is False and not entry.get("in_place"):
        os.unlink(path)
        return "removed"
    if data != current:
        if entry.get("in_place"):
            write_in_place(path, data)
        else:
            write_replacing(path, data)
        done = "restored"
    if restore_owner(path, before):
        done = done or "restored mode"
    return done


def undo_dir(path, before):
    """Remove a folder `up` made, if it is still there and empty."""
    if before.get("existed", True) or not os.path.isdir(path) or os.listdir(path):
        return ""
    os.rmdir(path)
    return "removed"


def undo_glob(path):
    """Remove what matches the pattern (ssh control sockets)."""
    folder, pattern = os.path.split(path)
    done = ""
    if os.path.isdir(folder):
        for name in os.listdir(folder):
            if fnmatch.fnmatch(name, pattern) and remove_path(os.path.join(folder, name)):
                done = "removed"
    return done


#: Files and blocks first, then mpicluster's own trees, then folders that may now be empty.
ORDER = {"block": 0, "line": 0, "glob": 1, "file": 1, "tree": 2, "dir": 3}


def undo(journal, footprint, home, keep_stack=False):
    """Take back every entry; returns {path: what was done} for the ones that changed."""
    actions = {}
    paths = journal["paths"]
    # Inner folders before outer ones (the prefix after its stacks).
    entries = sorted(
        footprint, key=lambda e: (ORDER[e["kind"]], -len(e["path"]) if e["kind"] == "dir" else 0)
    )
    for entry in entries:
        path = expand(entry["path"], home)
        done = undo_entry(entry, path, paths.get(path, {}), keep_stack)
        if done:
            actions[path] = done
    return actions
