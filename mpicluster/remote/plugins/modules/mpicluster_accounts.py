#!/usr/bin/python
"""The cluster's users who leave: a user taken out of the inventory (`action: retire`, at
`up`) or every user at `down` (`action: remove`), from the record every node keeps of
the users `up` made (/etc/mpicluster/users.json: name -> uid, gid, made_on); and those
who come back (`action: return`, at `up`: the inventory lists her again).

On each node, for each such user:
- mpicluster's own part goes: its managed block in her ~/.ssh/authorized_keys and
  ~/.ssh/config and her node key, removed by a child that has become her (root never
  writes into her home);
- `retire`: an account mpicluster made on this node is locked (no password, expired,
  /usr/sbin/nologin): she can no longer log in; her home and files stay. An account it
  adopted keeps what it had before (only mpicluster's keys go).
- `remove`: an account mpicluster made here is deleted with its group when its home
  holds nothing but what the account started with (/etc/skel's files, mpicluster's ssh
  files), or always with `purge_homes`; otherwise it stays, locked, with its home (and
  its uid is never handed to someone else), and is named in `kept`.
- `return`: an account mpicluster locked on this node (its comment says so: LOCKED)
  is unlocked, unexpired and given its shell again; her home is as she left it. An
  account locked by anyone else stays locked.
Returns the users retired, removed, kept and returned.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: mpicluster_accounts
short_description: Retire or remove the cluster's users mpicluster made, keeping their homes
options:
  action: {type: str, required: true, choices: [retire, remove, return]}
  names: {type: list, elements: str, default: [], description: "the users (default: the record's)"}
  node: {type: str, required: true, description: this node's name in the inventory}
  record: {type: path, required: true, description: the record of the users up made}
  key_name: {type: str, required: true, description: the node key's file name in ~/.ssh}
  marker: {type: str, required: true, description: the managed blocks' marker text}
  purge_homes: {type: bool, default: false}
"""

import json
import os
import pwd
import subprocess

SKELETON = "/etc/skel"
#: The comment (GECOS) of an account mpicluster locked: how a later `up` that lists her
#: again knows the lock is its own to lift, even after `down` took the record away.
LOCKED = "mpicluster locked"
#: The shell mpicluster gives its users.
SHELL = "/bin/bash"


def recorded(record_path):
    """The record's users: name -> {uid, gid, made_on} ({} when there is none)."""
    try:
        with open(record_path, encoding="utf-8") as handle:
            return json.load(handle).get("users") or {}
    except (OSError, ValueError, AttributeError):
        return {}


def locked(name):
    """Whether the account is retired already: its password locked, its shell nologin."""
    try:
        with open("/etc/shadow", encoding="utf-8") as handle:
            entry = next((line.split(":") for line in handle if line.startswith(name + ":")), None)
    except OSError:
        return False
    return (
        bool(entry) and entry[1].startswith("!") and pwd.getpwnam(name).pw_shell.endswith("nologin")
    )


def without_block(text, marker):
    begin, end = "# BEGIN %s" % marker, "# END %s" % marker
    lines = text.splitlines()
    if begin in lines and end in lines[lines.index(begin) :]:
        start = lines.index(begin)
        del lines[start : lines.index(end, start) + 1]
    return "\n".join(lines) + "\n" if lines else ""


def strip_ours(home, key_name, marker):
    """In the child, as her: mpicluster's blocks and node key out of her ~/.ssh."""

    def action():
        folder = os.path.join(home, ".ssh")
        if not os.path.isdir(folder) or os.path.islink(folder):
            return True
        # the node key, and the shared connections its ssh config made
        ours = [key_name, key_name + ".pub"]
        ours += [n for n in os.listdir(folder) if n.startswith("mpicluster-")]
        for name in ours:
            path = os.path.join(folder, name)
            if os.path.lexists(path):
                os.unlink(path)
        for name in ("authorized_keys", "config"):
            path = os.path.join(folder, name)
            if not os.path.isfile(path) or os.path.islink(path):
                continue
            with open(path, encoding="utf-8", errors="replace") as handle:
                old = handle.read()
            new = without_block(old, marker)
            if not new.strip():  # nothing of hers in it: the file was mpicluster's
                os.unlink(path)
            elif new != old:
                partial = path + ".mpicluster-partial"
                with open(partial, "w", encoding="utf-8") as handle:
                    handle.write(new)
                os.replace(partial, path)
        return True

    return action


def as_user(account, action):
    """action() in a child that has become `account`; True when it finished."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(account.pw_gid)
            os.setuid(account.pw_uid)
            os.umask(0o077)
            action()
            os._exit(0)
        except BaseException:  # the child says nothing: its exit code says it
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


def only_skeleton(home):
    """Whether `home` holds nothing but /etc/skel's files and an empty (or absent) .ssh,
    after mpicluster's own files went."""
    try:
        found = set(os.listdir(home))
    except OSError:
        return True
    skeleton = set(os.listdir(SKELETON)) if os.path.isdir(SKELETON) else set()
    ssh = os.path.join(home, ".ssh")
    if ".ssh" in found and os.path.isdir(ssh) and not os.path.islink(ssh) and not os.listdir(ssh):
        found.discard(".ssh")
    return found <= skeleton


def lock(name):
    subprocess.run(["usermod", "--lock", "--expiredate", "1", "--shell", "/usr/sbin/nologin",
                    "--comment", LOCKED, name], check=True, capture_output=True)  # fmt: skip


def come_back(name):
    """`name` again as `up` made her, where mpicluster locked her: "returned", else None."""
    try:
        account = pwd.getpwnam(name)
    except KeyError:
        return None
    if account.pw_gecos != LOCKED or not locked(name):
        return None
    subprocess.run(["usermod", "--unlock", "--expiredate", "", "--shell", SHELL,
                    "--comment", "", name], check=True, capture_output=True)  # fmt: skip
    return "returned"


def leave(module, name):
    """What happens to `name` here: retired, removed, kept (locked), or left (adopted)."""
    params = module.params
    try:
        account = pwd.getpwnam(name)
    except KeyError:
        return None
    as_user(account, strip_ours(account.pw_dir, params["key_name"], params["marker"]))
    made = (recorded(params["record"]).get(name) or {}).get("made_on") or []
    if params["node"] not in made:
        return "left"
    if params["action"] == "retire":
        if locked(name):
            return None
        lock(name)
        return "retired"
    if params["purge_homes"] or only_skeleton(account.pw_dir):
        subprocess.run(["userdel", "--remove", name], check=True, capture_output=True)
        return "removed"
    lock(name)
    return "kept"


def main():
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "action": {"type": "str", "required": True, "choices": ["retire", "remove", "return"]},
            "names": {"type": "list", "elements": "str", "default": []},
            "node": {"type": "str", "required": True},
            "record": {"type": "path", "required": True},
            "key_name": {"type": "str", "required": True},
            "marker": {"type": "str", "required": True},
            "purge_homes": {"type": "bool", "default": False},
        },
    )
    done = {"retired": [], "removed": [], "kept": [], "left": [], "returned": []}
    names = module.params["names"] or sorted(recorded(module.params["record"]))
    homes = {}
    for name in names:
        try:
            homes[name] = pwd.getpwnam(name).pw_dir
        except KeyError:
            homes[name] = "/home/" + name
        try:
            returning = module.params["action"] == "return"
            what = come_back(name) if returning else leave(module, name)
        except subprocess.CalledProcessError as exc:
            said = exc.stderr.decode("utf-8", "replace").strip()
            module.fail_json(msg="%s: %s" % (name, said or exc), **done)
        if what:
            done[what].append(name)
    changed = bool(done["retired"] or done["removed"] or done["kept"] or done["returned"])
    said = {
        "retired": "%s left the inventory: account locked, home kept:",
        "removed": "%s: account and home removed:",
        "kept": "%s: account locked, home kept (more than the skeleton in it; "
        "--purge-homes removes it):",
        "returned": "%s is in the inventory again: account unlocked, home as it was:",
    }
    actions = {homes[n]: said[k] % n for k in said for n in done[k]}
    module.exit_json(changed=changed, actions=actions, **done)


if __name__ == "__main__":
    main()
