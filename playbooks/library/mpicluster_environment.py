#!/usr/bin/python
"""Manage mpicluster's block in /etc/environment (pam_env's file).

pam_env expands nothing, so every value is written literally. PATH is the
mpicluster directories followed by the PATH the file already sets outside the
block (or Debian's default), so nothing a user added is lost. Every line
outside the block is kept byte for byte; a second run changes nothing.
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
import re
import tempfile

_ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


def split_block(text, begin, end):
    """(before, block lines, after) of `text`; block lines exclude the markers."""
    lines = text.splitlines(keepends=True)
    start = stop = None
    for index, line in enumerate(lines):
        if line.rstrip("\r\n") == begin and start is None:
            start = index
        elif line.rstrip("\r\n") == end and start is not None:
            stop = index
            break
    if start is None or stop is None:
        return "".join(lines), None, ""
    return "".join(lines[:start]), lines[start + 1 : stop], "".join(lines[stop + 1 :])


def _unquote(value):
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def existing_value(text, name):
    """The last value `text` gives `name` (as pam_env would see it), or None."""
    found = None
    for line in text.splitlines():
        match = _ASSIGNMENT.match(line)
        if match and match.group(1) == name:
            found = _unquote(match.group(2))
    return found


def _merge(front, rest):
    seen, out = set(), []
    for item in list(front) + list(rest):
        if item and "$" not in item and item not in seen:
            seen.add(item)
            out.append(item)
    return out


def render(text, begin, end, path_prepend, library_path, variables, default_path):
    """The new file text: `text` with the mpicluster block written (appended if absent)."""
    before, old_block, after = split_block(text, begin, end)
    outside = before + after
    base_path = existing_value(outside, "PATH")
    base_dirs = base_path.split(":") if base_path else list(default_path)
    values = {"PATH": ":".join(_merge(path_prepend, base_dirs))}
    if library_path:
        base_ld = existing_value(outside, "LD_LIBRARY_PATH")
        values["LD_LIBRARY_PATH"] = ":".join(
            _merge(library_path, base_ld.split(":") if base_ld else [])
        )
    for name in sorted(variables):
        values[name] = str(variables[name])
    for name, value in values.items():
        if "$" in value or '"' in value or "\n" in value:
            raise ValueError(f"{name}: value must be literal (no $, quotes or newlines)")
    body = "".join(f'{name}="{value}"\n' for name, value in values.items())
    block = f"{begin}\n{body}{end}\n"
    if old_block is None and before and not before.endswith("\n"):
        before += "\n"  # appending after a last line that has no newline
    return before + block + after


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
