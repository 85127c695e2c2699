#!/usr/bin/python
"""What this `up` applied on a node, as digests, for the next `up`'s fast path.

Run as the MPI user (become: false), the way the next `up`'s probe reads the node; the
record it returns is written by the task after it. The logic is module_utils
mpicluster_applied, which the probe (nodeinfo) imports too.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: mpicluster_applied
short_description: Take the digests of what up applied on this node (changes nothing)
options:
  inputs: {type: dict, required: true, description: the digests of this up's inputs}
  cluster: {type: str, required: true}
  footprint: {type: list, elements: dict, required: true}
  packages: {type: list, elements: str, default: []}
  record: {type: path, required: true, description: where the record is written}
"""

import os
import pwd

from ansible.module_utils.mpicluster_applied import record


def main():
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "inputs": {"type": "dict", "required": True},
            "cluster": {"type": "str", "required": True},
            "footprint": {"type": "list", "elements": "dict", "required": True},
            "packages": {"type": "list", "elements": "str", "default": []},
            "record": {"type": "path", "required": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    home = pwd.getpwuid(os.getuid()).pw_dir
    taken = record(
        params["inputs"],
        params["cluster"],
        params["footprint"],
        params["packages"],
        home,
        params["record"],
    )
    module.exit_json(changed=False, record=taken)


if __name__ == "__main__":
    main()
