#!/usr/bin/python
"""The cluster's own Python packages on one node, beside the stack's Python.

The packages live in ROOT/DIGEST (a `pip install --target` folder named by the
resolution's digest), ROOT/current links to the active one, and a .pth file in the
stack's site-packages adds ROOT/current to its path: every program of the stack's
Python (torchrun's workers included) sees them, after the stack's own packages. A new
resolution is made beside the active one from a copy of it: the packages it no longer
has (or has at another version) are taken out by their RECORD, then only the missing
ones are installed, offline, from the wheels that came with the pack; the link is
switched last. An unchanged resolution changes nothing.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: mpicluster_cluster_packages
short_description: The cluster's Python packages, layered on the stack's Python
options:
  root: {type: path, required: true, description: where the resolutions live}
  digest: {type: str, required: true}
  install: {type: dict, required: true, description: name -> version}
  wheels: {type: path, required: false, description: folder of the wheels (when changed)}
  python: {type: path, required: true, description: the stack's Python (its pip installs)}
  site: {type: path, required: true, description: the stack's site-packages (for the .pth)}
  pth: {type: str, default: mpicluster-cluster-packages.pth}
  state: {type: str, default: present, choices: [present, absent]}
"""

import csv
import os
import re
import shutil
import subprocess

RECORD_NAME = "mpicluster-packages.json"


def canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def installed(folder):
    """name -> (version, dist-info folder) of what a --target folder holds."""
    found = {}
    for entry in os.listdir(folder) if os.path.isdir(folder) else []:
        if entry.endswith(".dist-info"):
            name, _, version = entry[: -len(".dist-info")].rpartition("-")
            found[canonical(name)] = (version, entry)
    return found


def take_out(folder, info):
    """Every file a distribution's RECORD lists, then its dist-info folder."""
    record = os.path.join(folder, info, "RECORD")
    paths = []
    if os.path.exists(record):
        with open(record, newline="") as handle:
            paths = [row[0] for row in csv.reader(handle) if row]
    for relative in paths:
        path = os.path.normpath(os.path.join(folder, relative))
        if path.startswith(folder + os.sep) and os.path.isfile(path):
            os.unlink(path)
    shutil.rmtree(os.path.join(folder, info), ignore_errors=True)
    for top, dirs, files in os.walk(folder, topdown=False):  # folders left empty
        if top != folder and not dirs and not files and not os.listdir(top):
            os.rmdir(top)


def pth_line(root):
    return os.path.join(root, "current") + "\n"


def write_pth(site, pth, root):
    path = os.path.join(site, pth)
    current = None
    if os.path.exists(path):
        with open(path) as found:
            current = found.read()
    if current == pth_line(root):
        return False
    with open(path + ".part", "w") as out:
        out.write(pth_line(root))
    os.rename(path + ".part", path)
    return True


def make(params, active):
    """The resolution's folder beside the active one; returns (installed, removed)."""
    root, digest, wanted = params["root"], params["digest"], params["install"]
    target = os.path.join(root, digest)
    incoming = os.path.join(root, ".incoming-" + digest)
    shutil.rmtree(incoming, ignore_errors=True)
    if active and os.path.isdir(active):
        shutil.copytree(active, incoming, symlinks=True)
    else:
        os.makedirs(incoming)
    have = installed(incoming)
    removed = []
    for name, (version, info) in sorted(have.items()):
        if wanted.get(name) != version:
            take_out(incoming, info)
            removed.append(name)
    have = installed(incoming)
    missing = ["%s==%s" % (n, v) for n, v in sorted(wanted.items()) if n not in have]
    if missing:
        argv = [params["python"], "-m", "pip", "install", "--no-index", "--no-deps"]
        argv += ["--disable-pip-version-check", "--no-compile", "--target", incoming]
        argv += ["--find-links", params["wheels"], *missing]
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            shutil.rmtree(incoming, ignore_errors=True)
            raise RuntimeError((done.stderr or done.stdout).strip().splitlines()[-1])
    with open(os.path.join(incoming, RECORD_NAME), "w") as out:
        out.write('{"digest": "%s"}\n' % digest)
    shutil.rmtree(target, ignore_errors=True)
    os.rename(incoming, target)
    return [m.split("==")[0] for m in missing], removed


def switch(root, digest):
    """ROOT/current to DIGEST (a link made aside, renamed onto the old one), then the
    other resolutions removed."""
    link = os.path.join(root, "current")
    aside = link + ".new"
    if os.path.lexists(aside):
        os.unlink(aside)
    os.symlink(digest, aside)
    os.rename(aside, link)
    for entry in os.listdir(root):
        if entry not in (digest, "current"):
            path = os.path.join(root, entry)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)


def active_digest(root):
    link = os.path.join(root, "current")
    return os.readlink(link) if os.path.islink(link) else None


def main():
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "digest": {"type": "str", "required": True},
            "install": {"type": "dict", "required": True},
            "wheels": {"type": "path", "required": False},
            "python": {"type": "path", "required": True},
            "site": {"type": "path", "required": True},
            "pth": {"type": "str", "default": "mpicluster-cluster-packages.pth"},
            "state": {"type": "str", "default": "present", "choices": ["present", "absent"]},
        },
    )
    params = module.params
    root, site = params["root"], params["site"]
    if params["state"] == "absent":
        pth = os.path.join(site, params["pth"])
        changed = os.path.exists(pth) or os.path.exists(root)
        if os.path.exists(pth):
            os.unlink(pth)
        shutil.rmtree(root, ignore_errors=True)
        module.exit_json(changed=changed)
    params["install"] = {canonical(k): str(v) for k, v in params["install"].items()}
    active = active_digest(root)
    changed = write_pth(site, params["pth"], root)
    if active == params["digest"]:
        module.exit_json(changed=changed, installed=[], removed=[], digest=active)
    if not params["wheels"]:
        module.fail_json(msg="the resolution %s is not here, and no wheels came" % params["digest"])
    os.makedirs(root, exist_ok=True)
    try:
        added, removed = make(params, os.path.join(root, active) if active else None)
    except (OSError, RuntimeError) as exc:
        module.fail_json(msg="the cluster's packages were not installed: %s" % exc)
    switch(root, params["digest"])
    module.exit_json(changed=True, installed=added, removed=removed, digest=params["digest"])


if __name__ == "__main__":
    main()
