#!/usr/bin/python
"""Write a set of small files (and their folders) in one module call.

The hostfiles role used a `copy` task per file (and a loop item per hostfile): each one
a round trip to every node, ~2 s apiece on a loaded node, 10 per `up`. This writes
them all at once: a file is rewritten only when its content, mode or owner differ,
through a temporary file in the same folder renamed over it (readers see the old file
or the new one, never half of one; an interrupted write leaves no temporary behind).
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: mpicluster_files
short_description: Write small files atomically, only those that differ
options:
  directories:
    type: list
    elements: str
    default: []
    description: folders to create (mode 0755) before the files
  files:
    type: list
    elements: dict
    required: true
    description: each {path, content, mode}; mode as an octal string such as "0644"
  owner:
    type: str
    default: root
    description: owner and group of every folder and file written
"""

import os
import pwd
import signal
import stat
import tempfile

DIRECTORY_MODE = 0o755


class Interrupted(Exception):
    pass


def _interrupted(signum, frame):
    raise Interrupted("stopped by signal %d" % signum)


def ensure_directory(path, uid, gid, check):
    """True if the folder was (or would be) created or given its mode and owner."""
    if not os.path.isdir(path):
        if not check:
            os.makedirs(path, mode=DIRECTORY_MODE, exist_ok=True)
            os.chmod(path, DIRECTORY_MODE)
            os.chown(path, uid, gid)
        return True
    info = os.stat(path)
    if stat.S_IMODE(info.st_mode) == DIRECTORY_MODE and (info.st_uid, info.st_gid) == (uid, gid):
        return False
    if not check:
        os.chmod(path, DIRECTORY_MODE)
        os.chown(path, uid, gid)
    return True


def differs(path, data, mode, uid, gid):
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return True
    if not stat.S_ISREG(info.st_mode) or stat.S_IMODE(info.st_mode) != mode:
        return True
    if (info.st_uid, info.st_gid) != (uid, gid) or info.st_size != len(data):
        return True
    with open(path, "rb") as handle:
        return handle.read() != data


def write(path, data, mode, uid, gid):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".mpicluster.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.chown(tmp, uid, gid)
        os.rename(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main():
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "directories": {"type": "list", "elements": "str", "default": []},
            "files": {"type": "list", "elements": "dict", "required": True},
            "owner": {"type": "str", "default": "root"},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        user = pwd.getpwnam(params["owner"])
    except KeyError:
        module.fail_json(msg="no user %s on this node" % params["owner"])
    uid, gid, check = user.pw_uid, user.pw_gid, module.check_mode
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupted)
    written = []
    try:
        for directory in params["directories"]:
            if ensure_directory(directory, uid, gid, check):
                written.append(directory)
        for item in params["files"]:
            path, mode = item["path"], int(str(item.get("mode", "0644")), 8)
            data = item["content"].encode("utf-8")
            if differs(path, data, mode, uid, gid):
                if not check:
                    write(path, data, mode, uid, gid)
                written.append(path)
    except (OSError, Interrupted) as exc:
        where = getattr(exc, "filename", None) or ""
        module.fail_json(msg="%s: %s" % (where, getattr(exc, "strerror", None) or exc))
    module.exit_json(changed=bool(written), written=written)


if __name__ == "__main__":
    main()
