#!/usr/bin/python
"""A cluster user's ssh files on this node, written by a child that has become her: root
never writes into her home (a link she planted there cannot turn a write of root's onto
another file), and what is hers is readable by her alone from its first byte.

`state: key`: her node-to-node key, made here by root in a folder only root can read,
then written into ~/.ssh by her child (never through a link: O_EXCL, O_NOFOLLOW); the
private half never leaves the node and is never returned. Returns the public half, which
`up` authorizes for her on every node. A key of hers already there is kept.

`state: files`: mpicluster's managed blocks in her ~/.ssh/authorized_keys and
~/.ssh/config (her own lines outside them kept), each written whole (a new file renamed
onto the old one). Returns whether anything changed.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: mpicluster_user_ssh
short_description: A user's node key, authorized_keys and ssh config, written as the user
options:
  state: {type: str, required: true, choices: [key, files]}
  user: {type: str, required: true}
  name: {type: str, default: "", description: "state=key: the key's file name in ~/.ssh"}
  comment: {type: str, default: "", description: "state=key: the key's comment"}
  marker: {type: str, default: "", description: "state=files: the blocks' marker text"}
  authorized_keys: {type: str, default: "", description: "state=files: the block's lines"}
  config: {type: str, default: "", description: "state=files: the ssh config block"}
"""

import json
import os
import pwd
import shutil
import subprocess
import tempfile

FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW


def as_user(account, action):
    """action() in a child that has become `account`; what it returns (JSON-able), or
    None when it failed."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: her ids and umask, then the action
        os.close(reader)
        try:
            os.setgroups([])
            os.setgid(account.pw_gid)
            os.setuid(account.pw_uid)
            os.umask(0o077)
            said = json.dumps({"ok": action()})
        except BaseException as exc:  # the child reports, never raises past its fork
            said = json.dumps({"error": "%s: %s" % (type(exc).__name__, exc)})
        os.write(writer, said.encode("utf-8"))
        os._exit(0)
    os.close(writer)
    chunks = []
    while True:
        chunk = os.read(reader, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(reader)
    os.waitpid(pid, 0)
    return json.loads(b"".join(chunks).decode("utf-8") or '{"error": "no answer"}')


def ssh_folder(home):
    folder = os.path.join(home, ".ssh")
    if not os.path.isdir(folder) or os.path.islink(folder):
        if os.path.lexists(folder):
            os.unlink(folder)
        os.mkdir(folder, 0o700)
    os.chmod(folder, 0o700)
    return folder


def write_new(path, data, mode):
    """`data` at `path`, made new beside it and renamed onto it (never through a link)."""
    partial = path + ".mpicluster-partial"
    if os.path.lexists(partial):
        os.unlink(partial)
    handle = os.open(partial, FLAGS, mode)
    try:
        os.write(handle, data)
        os.fchmod(handle, mode)
    finally:
        os.close(handle)
    os.replace(partial, path)


def read_own(path):
    """The text of a regular file (a link or anything else reads as empty)."""
    if not os.path.isfile(path) or os.path.islink(path):
        return ""
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read()


def mode_of(path):
    """The permission bits of `path` itself (None: it is not there)."""
    try:
        return os.lstat(path).st_mode & 0o7777
    except OSError:
        return None


def with_block(text, marker, block):
    """`text` with mpicluster's block (between its markers) replaced by `block`, or added
    at its start."""
    begin, end = "# BEGIN %s" % marker, "# END %s" % marker
    lines = text.splitlines()
    new = [begin, *block.rstrip("\n").splitlines(), end] if block.strip() else []
    if begin in lines and end in lines[lines.index(begin) :]:
        start = lines.index(begin)
        stop = lines.index(end, start)
        lines[start : stop + 1] = new
    else:
        lines = new + lines
    return "\n".join(lines) + "\n" if lines else ""


def key_action(home, name, private, public):
    def action():
        folder = ssh_folder(home)
        for suffix, data, mode in (("", private, 0o600), (".pub", public, 0o644)):
            write_new(os.path.join(folder, name + suffix), data, mode)
        return True

    return action


def files_action(home, marker, blocks):
    def action():
        folder = ssh_folder(home)
        changed = False
        for name, block in blocks:
            path = os.path.join(folder, name)
            old = read_own(path)
            new = with_block(old, marker, block)
            if new != old or mode_of(path) != 0o600:
                write_new(path, new.encode("utf-8"), 0o600)
                changed = True
        return changed

    return action


def existing_key(account, name):
    path = os.path.join(account.pw_dir, ".ssh", name)
    try:
        info = os.lstat(path)
    except OSError:
        return None
    if not os.path.isfile(path) or os.path.islink(path) or info.st_uid != account.pw_uid:
        return None
    if info.st_mode & 0o077:
        return None
    return read_own(path + ".pub").strip() or None


def make_key(module, account):
    scratch = tempfile.mkdtemp(prefix="mpicluster-key-")  # 0700, root's
    try:
        made = os.path.join(scratch, "key")
        command = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", module.params["comment"]]
        done = subprocess.run([*command, "-f", made], capture_output=True, check=False)
        if done.returncode != 0:
            module.fail_json(msg="ssh-keygen: " + done.stderr.decode("utf-8", "replace"))
        with open(made, "rb") as handle:
            private = handle.read()
        with open(made + ".pub", "rb") as handle:
            public = handle.read()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    said = as_user(account, key_action(account.pw_dir, module.params["name"], private, public))
    if "error" in said:
        module.fail_json(
            msg="%s's key in %s/.ssh: %s" % (account.pw_name, account.pw_dir, said["error"])
        )
    return public.decode("utf-8").strip()


def main():
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "required": True, "choices": ["key", "files"]},
            "user": {"type": "str", "required": True},
            "name": {"type": "str", "default": ""},
            "comment": {"type": "str", "default": ""},
            "marker": {"type": "str", "default": ""},
            "authorized_keys": {"type": "str", "default": ""},
            "config": {"type": "str", "default": ""},
        },
    )
    params = module.params
    try:
        account = pwd.getpwnam(params["user"])
    except KeyError:
        module.fail_json(msg="no such user: %s" % params["user"])
    if params["state"] == "key":
        public = existing_key(account, params["name"])
        if public is not None:
            module.exit_json(changed=False, public_key=public)
        module.exit_json(changed=True, public_key=make_key(module, account))
    blocks = [("authorized_keys", params["authorized_keys"]), ("config", params["config"])]
    said = as_user(account, files_action(account.pw_dir, params["marker"], blocks))
    if "error" in said:
        module.fail_json(msg="%s's ssh files: %s" % (account.pw_name, said["error"]))
    module.exit_json(changed=said["ok"])


if __name__ == "__main__":
    main()
