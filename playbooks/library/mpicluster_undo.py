#!/usr/bin/python
"""Take back what `up` added on this node (`mpicluster down`), from the journal `up`
wrote before its first change: blocks and lines removed, files given back byte for byte
with their mode and owner, mpicluster's own files and folders removed; the journal last.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: mpicluster_undo
short_description: Remove what mpicluster up added, restoring edited files
options:
  footprint: {type: list, elements: dict, required: true}
  user: {type: str, required: true, description: the MPI user (~/ paths are in its home)}
  keep_stack: {type: bool, default: false}
  journal: {type: path, default: /var/lib/mpicluster/journal.json}
"""

import os
import pwd

from ansible.module_utils.mpicluster_journal import JOURNAL, load, remove_path, undo


def main():
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "footprint": {"type": "list", "elements": "dict", "required": True},
            "user": {"type": "str", "required": True},
            "keep_stack": {"type": "bool", "default": False},
            "journal": {"type": "path", "default": JOURNAL},
        },
    )
    params = module.params
    try:
        home = pwd.getpwnam(params["user"]).pw_dir
    except KeyError:
        module.fail_json(msg="no user %s on this node" % params["user"])
    journal = load(params["journal"])
    try:
        actions = undo(journal, params["footprint"], home, params["keep_stack"])
    except OSError as exc:
        module.fail_json(msg="%s: %s" % (exc.filename or "", exc.strerror or exc))
    folder = os.path.dirname(params["journal"])
    if remove_path(folder):
        actions[folder] = "removed"
    used = "unreadable" if journal.get("unreadable") else "used" if journal["paths"] else "none"
    module.exit_json(changed=bool(actions), actions=actions, journal=used)


if __name__ == "__main__":
    main()
