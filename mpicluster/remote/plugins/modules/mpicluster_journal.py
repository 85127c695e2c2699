#!/usr/bin/python
"""mpicluster's journal of a node: what `up` is about to touch, and taking it back.

`action: record` (up, before its first change): how every path of the footprint is now;
a path already in the journal keeps its first record, so the journal describes the node
before mpicluster, not before the latest `up`.
`action: undo` (down): blocks and lines removed, files given back byte for byte with
their mode and owner, mpicluster's own files and folders removed; the journal last.
The logic is module_utils mpicluster_journal.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: mpicluster_journal
short_description: Record what mpicluster up touches, or take it back
options:
  action: {type: str, required: true, choices: [record, undo]}
  footprint: {type: list, elements: dict, required: true}
  user: {type: str, required: true, description: the MPI user (~/ paths are in its home)}
  journal: {type: path, required: true}
  keep_stack: {type: bool, default: false, description: undo keeps the installed stacks}
"""

import json
import os
import pwd

from ansible.module_utils.mpicluster_journal import load, record, remove_path, undo, write_atomic


def main():
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "action": {"type": "str", "required": True, "choices": ["record", "undo"]},
            "footprint": {"type": "list", "elements": "dict", "required": True},
            "user": {"type": "str", "required": True},
            "journal": {"type": "path", "required": True},
            "keep_stack": {"type": "bool", "default": False},
        },
    )
    params = module.params
    try:
        home = pwd.getpwnam(params["user"]).pw_dir
    except KeyError:
        module.fail_json(msg="no user %s on this node" % params["user"])
    journal = load(params["journal"])
    if params["action"] == "record":
        changed = record(journal, params["footprint"], home)
        if changed:
            write_atomic(params["journal"], json.dumps(journal, indent=1, sort_keys=True) + "\n")
        module.exit_json(changed=changed, paths=len(journal["paths"]))
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
