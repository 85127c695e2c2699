#!/usr/bin/python
"""Packages `up` installs for one purpose (Slurm), recorded so that `down` takes back
exactly those: the packages that were not installed before (dependencies included) and
the users and groups they made.

`state: present`: install the missing names with apt-get, each by the name this node's
apt offers it under (`apt-cache policy`): Debian 13 and Ubuntu 24.04 renamed libraries
for 64-bit time_t (libpmix2 is libpmix2t64 there); add to the record what dpkg lists now
and did not before (also when apt-get fails half way: what it installed is
recorded first). `state: absent`: purge the recorded packages still installed, with
dpkg, which refuses a package that another one (installed since, by someone else) still
needs: that one is kept and named; then remove the recorded users and groups; the record
last.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: mpicluster_packages
short_description: Install packages and record them for down, or purge the recorded ones
options:
  state: {type: str, required: true, choices: [present, absent]}
  names: {type: list, elements: str, default: []}
  users: {type: list, elements: str, default: [], description: users and groups the packages make}
  record: {type: path, required: true}
"""

import base64
import glob
import grp
import json
import os
import pwd
import subprocess
import tempfile

ENV = {"DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}
#: What installing and purging the packages rewrites beside them: shadow's backups of
#: the user and group files (adduser, userdel) and ucf's rotated registry. Kept as they
#: were before the first install and given back after the purge (the record is 0600:
#: shadow's backup holds password hashes).
#: (ucf's registry itself is left alone: another package may be in it by now.)
BOOKKEEPING = (
    "/etc/passwd-",
    "/etc/group-",
    "/etc/shadow-",
    "/etc/gshadow-",
    "/var/lib/ucf/hashfile.*",
)


def installed():
    done = subprocess.run(
        ["dpkg-query", "-W", "-f", "${db:Status-Abbrev} ${Package}\n"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    found = set()
    for line in done.stdout.decode("utf-8", "replace").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].startswith("ii"):
            found.add(parts[1].split(":")[0])
    return found


def apt(argv, stderr=subprocess.STDOUT):
    """apt-get, apt-cache or dpkg, never asking (ENV), its output caught."""
    return subprocess.run(
        argv, stdout=subprocess.PIPE, stderr=stderr, env={**os.environ, **ENV}, check=False
    )


def parse_policy(text):
    """{package: its candidate version, or None} from `apt-cache policy`'s output (a
    name apt does not know is not listed)."""
    found, name = {}, None
    for line in text.splitlines():
        if line and not line[0].isspace() and line.rstrip().endswith(":"):
            name = line.rstrip()[:-1]
            found[name] = None
        elif name and line.strip().startswith("Candidate:"):
            value = line.split(":", 1)[1].strip()
            found[name] = None if value == "(none)" else value
    return found


def apt_names(names):
    """Each name as this node's apt offers it: the name itself, else its 64-bit time_t
    twin (NAMEt64) where only the twin has a candidate."""
    asked = [word for name in names for word in (name, name + "t64")]
    done = apt(["apt-cache", "policy", *asked], stderr=subprocess.DEVNULL)
    seen = parse_policy(done.stdout.decode("utf-8", "replace"))
    return [
        name + "t64" if not seen.get(name) and seen.get(name + "t64") else name for name in names
    ]


def load(path):
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        data = {}
    found = {key: list(data.get(key, [])) for key in ("packages", "users", "groups")}
    if "files" in data:
        found["files"] = data["files"]
    return found


def snapshot():
    """The BOOKKEEPING files as they are: {path: [mode, uid, gid, base64]}; the globs'
    folders are listed whole, so a file made later is known to be new."""
    files = {}
    for pattern in BOOKKEEPING:
        for path in sorted(glob.glob(pattern)) or ([] if "*" in pattern else [pattern]):
            try:
                info = os.stat(path)
                with open(path, "rb") as handle:
                    data = base64.b64encode(handle.read()).decode()
                files[path] = [info.st_mode & 0o7777, info.st_uid, info.st_gid, data]
            except FileNotFoundError:
                files[path] = None
    return files


def give_back(files):
    """The BOOKKEEPING files as snapshot() saw them: rewritten, or removed when new."""
    for pattern in BOOKKEEPING:
        for path in glob.glob(pattern):
            if path not in files:
                files[path] = None
    for path, was in files.items():
        if was is None:
            if os.path.lexists(path):
                os.unlink(path)
            continue
        mode, uid, gid, data = was
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".mpicluster.")
        with os.fdopen(fd, "wb") as handle:
            handle.write(base64.b64decode(data))
        os.chown(tmp, uid, gid)
        os.chmod(tmp, mode)
        os.replace(tmp, path)


def save(path, data):
    folder = os.path.dirname(path)
    os.makedirs(folder, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".packages.")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=1, sort_keys=True)
        handle.write("\n")
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def exists(getter, name):
    try:
        getter(name)
    except KeyError:
        return False
    return True


def tail(text, lines=8):
    return "\n".join(text.decode("utf-8", "replace").strip().splitlines()[-lines:])


def present(module, params):
    before = installed()
    names = apt_names(params["names"])
    missing = [name for name in names if name not in before]
    if not missing:
        module.exit_json(changed=False, added=[], names=names)
    data = load(params["record"])
    if "files" not in data:  # before the first install only
        data["files"] = snapshot()
    for user in params["users"]:
        if not exists(pwd.getpwnam, user) and user not in data["users"]:
            data["users"].append(user)
        if not exists(grp.getgrnam, user) and user not in data["groups"]:
            data["groups"].append(user)
    command = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]
    done = apt(command)
    added = sorted(installed() - before)
    data["packages"] = sorted(set(data["packages"]) | set(added))
    save(params["record"], data)
    if done.returncode != 0:
        module.fail_json(
            msg="apt-get install %s failed: %s" % (" ".join(missing), tail(done.stdout)),
            added=added,
        )
    module.exit_json(changed=True, added=added, names=names)


def absent(module, params):
    path = params["record"]
    if not os.path.exists(path):
        module.exit_json(changed=False, purged=[], kept=[])
    data = load(path)
    now = installed()
    purge = [name for name in data["packages"] if name in now]
    output = b""
    # dpkg takes the packages in the order given and refuses one that a package later
    # in the list still needs: pass again over what is left while a pass purges any.
    remaining = purge
    while remaining:
        done = apt(["dpkg", "--purge", *remaining])
        output = done.stdout
        now = installed()
        left = [name for name in remaining if name in now]
        if len(left) == len(remaining):
            break
        remaining = left
    left = installed()
    kept = [name for name in purge if name in left]
    for user in data["users"]:
        if exists(pwd.getpwnam, user):
            subprocess.run(["userdel", user], check=False, stdout=subprocess.DEVNULL)
    for group in data["groups"]:
        if exists(grp.getgrnam, group):
            subprocess.run(["groupdel", group], check=False, stdout=subprocess.DEVNULL)
    if not kept and data.get("files"):
        give_back(data["files"])
    if kept:
        # a failed purge leaves dpkg's selection at "purge": the next apt-get run would
        # remove them behind the user's back
        selections = "".join("%s install\n" % name for name in kept)
        subprocess.run(
            ["dpkg", "--set-selections"],
            input=selections.encode(),
            check=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        data["packages"] = kept
        save(path, data)
        module.exit_json(
            changed=True,
            purged=[p for p in purge if p not in kept],
            kept=kept,
            warnings=[
                "kept %s: dpkg would not purge them (a package installed since that needs "
                "them, or a failing maintainer script): %s" % (", ".join(kept), tail(output, 3))
            ],
        )
    os.unlink(path)
    module.exit_json(changed=True, purged=purge, kept=[])


def main():
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "required": True, "choices": ["present", "absent"]},
            "names": {"type": "list", "elements": "str", "default": []},
            "users": {"type": "list", "elements": "str", "default": []},
            "record": {"type": "path", "required": True},
        },
    )
    if module.params["state"] == "present":
        present(module, module.params)
    absent(module, module.params)


if __name__ == "__main__":
    main()
