#!/usr/bin/python
"""Record how every path `up` is about to touch is now, before the first change.

`down` reads the record to give each file back as it was (mpicluster_undo). A path
already in the journal keeps its first record: the journal describes the node before
mpicluster, not before the latest `up`.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: mpicluster_journal
short_description: Record the state of the paths mpicluster up touches
options:
  footprint: {type: list, elements: dict, required: true}
  user: {type: str, required: true, description: the MPI user (~/ paths are in its home)}
  journal: {type: path, default: /var/lib/mpicluster/journal.json}
"""

import json
import pwd

from ansible.module_utils.mpicluster_journal import JOURNAL, load, record, write_atomic


def main():
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "footprint": {"type": "list", "elements": "dict", "required": True},
            "user": {"type": "str", "required": True},
            "journal": {"type": "path", "default": JOURNAL},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        home = pwd.getpwnam(params["user"]).pw_dir
    except KeyError:
        module.fail_json(msg="no user %s on this node" % params["user"])
    journal = load(params["journal"])
    changed = record(journal, params["footprint"], home)
    if changed and not module.check_mode:
        write_atomic(params["journal"], json.dumps(journal, indent=1, sort_keys=True) + "\n")
    module.exit_json(changed=changed, paths=len(journal["paths"]))


if __name__ == "__main__":
    main()
