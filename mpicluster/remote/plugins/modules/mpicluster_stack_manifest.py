#!/usr/bin/python
"""Write the manifest of a stack just built (every file: kind, mode, size, mtime,
sha256) into the tree, so that doctor and the next `up` can tell a stack whose files
changed since. The logic is module_utils mpicluster_stackfiles, which the probes import
too.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: mpicluster_stack_manifest
short_description: Write the manifest of a built stack into it
options:
  path: {type: path, required: true, description: the stack's root (stacks/<fingerprint>)}
  fingerprint: {type: str, required: true}
"""

from ansible.module_utils.mpicluster_stackfiles import MANIFEST_NAME, write


def main():
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "fingerprint": {"type": "str", "required": True},
        },
        supports_check_mode=True,
    )
    if module.check_mode:
        module.exit_json(changed=True)
    try:
        files, size = write(module.params["path"], module.params["fingerprint"])
    except OSError as exc:
        module.fail_json(msg="the stack's manifest could not be written: %s" % exc)
    module.exit_json(changed=True, manifest=MANIFEST_NAME, files=files, bytes=size)


if __name__ == "__main__":
    main()
