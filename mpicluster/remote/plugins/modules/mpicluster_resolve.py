#!/usr/bin/python
"""Say which node names a node cannot resolve to their inventory address.

Resolution is judged without mpicluster's own /etc/hosts block (else adding the
block would make it unnecessary, and the next run would remove it): a name is
fine when a line outside the block, or DNS, maps it to the right address.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: mpicluster_resolve
short_description: Names that need an /etc/hosts entry
options:
  names: {type: dict, required: true, description: name -> expected IP address}
  begin: {type: str, required: true}
  end: {type: str, required: true}
  hosts_file: {type: path, default: /etc/hosts}
"""

import subprocess


def hosts_outside_block(text, begin, end):
    """name -> first address, from the lines of an /etc/hosts text outside the block."""
    mapping, inside = {}, False
    for raw in text.splitlines():
        line = raw.strip()
        if line == begin:
            inside = True
            continue
        if line == end and inside:
            inside = False
            continue
        if inside:
            continue
        fields = line.split("#", 1)[0].split()
        for name in fields[1:]:
            mapping.setdefault(name.lower(), fields[0])
    return mapping


def dns_addresses(name):
    try:
        done = subprocess.run(
            ["getent", "-s", "dns", "ahosts", name],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.split()[0] for line in done.stdout.splitlines() if line.split()]


def needed(names, hosts_map, resolver=dns_addresses):
    """{name: (expected, found)} for names that resolve wrongly or not at all."""
    wrong = {}
    for name, expected in sorted(names.items()):
        found = hosts_map.get(name.lower())
        if found is None:
            addresses = resolver(name)
            found = addresses[0] if addresses else None
            if expected in addresses:
                continue
        elif found == expected:
            continue
        wrong[name] = (expected, found)
    return wrong


def main():
    from ansible.module_utils.basic import AnsibleModule

    module = AnsibleModule(
        argument_spec={
            "names": {"type": "dict", "required": True},
            "begin": {"type": "str", "required": True},
            "end": {"type": "str", "required": True},
            "hosts_file": {"type": "path", "default": "/etc/hosts"},
        },
        supports_check_mode=True,
    )
    try:
        with open(module.params["hosts_file"], encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        text = ""
    mapping = hosts_outside_block(text, module.params["begin"], module.params["end"])
    wrong = needed(module.params["names"], mapping)
    module.exit_json(
        changed=False,
        entries=[{"name": n, "address": e} for n, (e, _) in sorted(wrong.items())],
        wrong={n: {"expected": e, "found": f} for n, (e, f) in wrong.items()},
    )


if __name__ == "__main__":
    main()
