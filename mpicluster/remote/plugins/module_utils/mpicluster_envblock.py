"""mpicluster's managed block in /etc/environment: how it is read and how it is written.

Shared by the control machine (doctor's env check imports it as
mpicluster.remote.plugins.module_utils.mpicluster_envblock) and the nodes (the
mpicluster_environment Ansible module imports it as ansible.module_utils.mpicluster_envblock),
so both sides read a line the same way. Stdlib only.

pam_env expands nothing, so every value is written literally. PATH is the mpicluster
directories followed by the PATH the file already sets outside the block (or Debian's
default), so nothing a user added is lost. Every line outside the block is kept byte
for byte; writing the same block twice changes nothing.
"""

import re

ASSIGNMENT = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


def split_block(text, begin, end):
    """(before, block lines, after) of `text`; block lines exclude the markers."""
    lines = text.splitlines(True)
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


def unquote(value):
    """(value without its quotes, whether it was quoted)."""
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1], True
    return value, False


def existing_value(text, name):
    """The last value `text` gives `name` (as pam_env would see it), or None."""
    found = None
    for line in text.splitlines():
        match = ASSIGNMENT.match(line)
        if match and match.group(1) == name:
            found = unquote(match.group(2))[0]
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
            raise ValueError("%s: value must be literal (no $, quotes or newlines)" % name)
    body = "".join('%s="%s"\n' % (name, value) for name, value in values.items())
    block = "%s\n%s%s\n" % (begin, body, end)
    if old_block is None and before and not before.endswith("\n"):
        before += "\n"  # appending after a last line that has no newline
    return before + block + after


def parse_block(text, begin, end):
    """(state, block variables, problems) of the block in `text` (None: no file).

    state: "missing-file", "missing", "broken" (markers out of order or doubled) or "ok".
    """
    if text is None:
        return "missing-file", {}, []
    lines = text.splitlines()
    begins = [i for i, line in enumerate(lines) if line.rstrip() == begin]
    ends = [i for i, line in enumerate(lines) if line.rstrip() == end]
    if not begins and not ends:
        return "missing", {}, []
    if len(begins) != 1 or len(ends) != 1 or ends[0] < begins[0]:
        return (
            "broken",
            {},
            ["%d BEGIN and %d END marker(s), out of order" % (len(begins), len(ends))],
        )
    values = {}
    problems = []
    for line in lines[begins[0] + 1 : ends[0]]:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = ASSIGNMENT.match(line)
        if not match:
            problems.append("not NAME=value: %r" % line.strip())
            continue
        name = match.group(1)
        value, quoted = unquote(match.group(2))
        if "$" in value or "`" in value:
            problems.append(
                "%s is not literal (pam_env does not expand it): %r" % (name, line.strip())
            )
        elif not quoted and " " in value:
            problems.append("%s has an unquoted space: %r" % (name, line.strip()))
        values[name] = value
    for i, line in enumerate(lines[ends[0] + 1 :], start=ends[0] + 1):
        match = ASSIGNMENT.match(line)
        if match and match.group(1) in ("PATH", "LD_LIBRARY_PATH"):
            problems.append(
                "line %d sets %s after the block, overriding it: %r"
                % (i + 1, match.group(1), line.strip())
            )
    return "ok", values, problems
