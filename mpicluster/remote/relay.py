"""Pass a file on from node to node over the cluster's own ssh mesh, so that the control
machine sends it once however many nodes need it.

A program for the nodes, stdlib only (any Python 3.6+), run as the MPI user:

    python3 -c 'import sys; exec(sys.argv[1])' CODE DEST SHA256 TREE [SOURCE]

CODE is this file's text (each node passes it on to the next the same way, so nothing
is installed for it); TREE is this node's part of the plan, {"node": name, "children":
[subtree, ...]}. The node reads the file from SOURCE (the first node of the tree, which
has it already) or from stdin, writes it to DEST (through DEST.part, renamed only once
its sha256 is SHA256), and streams every chunk on to its children at the same time:
`ssh CHILD python3 -c ... DEST SHA256 SUBTREE` with the chunk on the child's stdin. All
hops run at once, so the whole tree takes about one transfer plus a hop's latency per
level. A child that cannot be reached or breaks off is dropped; its part of the tree
gets nothing and says so.

Prints one JSON line per node of its tree, its own first: {"node", "ok", "error",
"seconds"}. A node that reports no line is reported by its parent with what its ssh
said. Exits 0 whatever became of the copies (the caller copies the file to the nodes
that did not get it by another way).
"""

import contextlib
import hashlib
import json
import os
import shlex
import stat
import subprocess
import sys
import tempfile
import time

BOOT = "import sys; exec(sys.argv[1])"
CHUNK = 1 << 20
SSH_OPTIONS = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=15"]


def names(tree):
    found = [tree["node"]]
    for child in tree.get("children", []):
        found += names(child)
    return found


def remote_command(code, dest, expected, subtree):
    """The command line the child's shell runs (ssh joins it into one string)."""
    argv = ["/usr/bin/python3", "-c", BOOT, code, dest, expected, json.dumps(subtree)]
    return " ".join(shlex.quote(arg) for arg in argv)


def spawn(code, dest, expected, subtree):
    """The child's relay, started over ssh; its stdin takes the file."""
    remote = remote_command(code, dest, expected, subtree)
    errors = tempfile.TemporaryFile()  # noqa: SIM115 (read when the child is done)
    try:
        proc = subprocess.Popen(
            ["ssh", *SSH_OPTIONS, subtree["node"], remote],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
        )
    except OSError as exc:
        return {"tree": subtree, "proc": None, "errors": errors, "why": str(exc)}
    return {"tree": subtree, "proc": proc, "errors": errors, "why": ""}


def check_folder(folder):
    """DEST's folder must be this user's own folder, not a link."""
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise OSError("%s is not a folder of this user's" % folder)


def copy(source, dest, children):
    """Read the file, write it to DEST.part, feed the children; (sha256, error)."""
    digest = hashlib.sha256()
    out = None
    try:
        if dest:
            check_folder(os.path.dirname(dest))
            out = open(dest + ".part", "wb")  # noqa: SIM115 (closed below, in finally)
        while True:
            chunk = source.read(CHUNK)
            if not chunk:
                break
            digest.update(chunk)
            if out is not None:
                out.write(chunk)
            for child in children:
                if child["proc"] is None or child["why"]:
                    continue
                try:
                    child["proc"].stdin.write(chunk)
                except OSError as exc:
                    child["why"] = "broke off: %s" % exc
        if out is not None:
            out.flush()
            os.fsync(out.fileno())
    except OSError as exc:
        return digest.hexdigest(), str(exc)
    finally:
        if out is not None:
            out.close()
    return digest.hexdigest(), ""


def report_of(child):
    """The lines of the child's tree: its own report, or one failure per node."""
    proc = child["proc"]
    output = b""
    if proc is not None:
        with contextlib.suppress(OSError):
            proc.stdin.close()
        output = proc.stdout.read()
        proc.wait()
    reported = {}
    for line in output.decode("utf-8", "replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and "node" in entry:
            reported[entry["node"]] = entry
    child["errors"].seek(0)
    said = child["errors"].read().decode("utf-8", "replace").splitlines()
    # what ssh said (it cannot resolve, reach or log in) tells more than a broken pipe
    why = next((line.strip() for line in reversed(said) if line.strip()), "") or child["why"]
    if not why and proc is not None:
        why = "exit %s" % proc.returncode
    lines = []
    for name in names(child["tree"]):
        lines.append(
            reported.get(name)
            or {
                "node": name,
                "ok": False,
                "error": "nothing from %s: %s" % (child["tree"]["node"], why),
            }
        )
    return lines


def main():
    code, dest, expected, tree = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
    source_path = sys.argv[5] if len(sys.argv) > 5 else None
    started = time.time()
    children = [spawn(code, dest, expected, child) for child in tree.get("children", [])]
    if source_path:
        try:
            with open(source_path, "rb") as source:
                actual, error = copy(source, None, children)
        except OSError as exc:
            actual, error = "", str(exc)
    else:
        actual, error = copy(sys.stdin.buffer, dest, children)
    if not error and actual != expected:
        error = "sha256 %s..., expected %s...: damaged on the way" % (actual[:16], expected[:16])
    if not source_path:
        part = dest + ".part"
        try:
            if error:
                os.unlink(part)
            else:
                os.rename(part, dest)
        except OSError as exc:
            error = error or str(exc)
    lines = [
        {
            "node": tree["node"],
            "ok": not error,
            "error": error,
            "seconds": round(time.time() - started, 2),
        }
    ]
    for child in children:
        lines += report_of(child)
    sys.stdout.write("".join(json.dumps(line) + "\n" for line in lines))


if __name__ == "__main__":
    main()
