#!/usr/bin/python
"""Manage mpicluster's block in /etc/environment (pam_env's file).

How the block is written (and read back by doctor) lives in module_utils
mpicluster_envblock (mpicluster/remote/plugins/module_utils/), which mpicluster's
ansible.cfg puts on Ansible's module_utils path.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: mpicluster_environment
short_description: Manage the mpicluster block in /etc/environment
options:
  path: {type: path, default: /etc/environment}
  path_prepend: {type: list, elements: str, default: []}
  library_path: {type: list, elements: str, default: []}
  variables: {type: dict, default: {}}
  begin: {type: str, required: true}
  end: {type: str, required: true}
  default_path: {type: list, elements: str, required: true}
"""

import os
import tempfile

from ansible.module_utils.mpicluster_envblock import render


def main():
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "default": "/etc/environment"},
            "path_prepend": {"type": "list", "elements": "str", "default": []},
            "library_path": {"type": "list", "elements": "str", "default": []},
            "variables": {"type": "dict", "default": {}},
            "begin": {"type": "str", "required": True},
            "end": {"type": "str", "required": True},
            "default_path": {"type": "list", "elements": "str", "required": True},
        },
        supports_check_mode=True,
    )
    params = module.params
    path = params["path"]
    try:
        with open(path, encoding="utf-8", newline="") as handle:
            text = handle.read()
    except FileNotFoundError:
        text = ""
    try:
        new = render(
            text,
            params["begin"],
            params["end"],
            params["path_prepend"],
            params["library_path"],
            params["variables"],
            params["default_path"],
        )
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    changed = new != text
    if changed and not module.check_mode:
        directory = os.path.dirname(path) or "."
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".environment.")
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            handle.write(new)
        mode = os.stat(path).st_mode & 0o7777 if os.path.exists(path) else 0o644
        os.chmod(tmp, mode)
        module.atomic_move(tmp, path, unsafe_writes=True)
    diff = {"before": text, "after": new} if module._diff else None
    module.exit_json(changed=changed, diff=diff)


if __name__ == "__main__":
    main()
