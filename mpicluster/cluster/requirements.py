"""Requirement lines (PEP 508) of the cluster's own Python packages: the inventory's
`python.requirements` list, or a requirements file of them.

Only requirement lines are read: a name with its version range, extras and markers.
pip's options (`-r`, `-e`, `--index-url`, hashes) and direct URLs are refused with the
line that has them, since the packages are resolved on the control machine into the
verified wheelhouse, from the index the stack's wheels come from.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name


@dataclass(frozen=True)
class Line:
    number: int  # 1-based; 0 for an inventory list's item
    text: str


def problem_of(text: str) -> str | None:
    """Why one requirement line cannot be taken (None: it can)."""
    if text.startswith("-"):
        return f"pip options are not read here, only requirement lines: {text!r}"
    try:
        requirement = Requirement(text)
    except InvalidRequirement as exc:
        return f"not a requirement ({str(exc).splitlines()[0]}): {text!r}"
    if requirement.url:
        return f"a direct URL: give a name and version range from the index instead: {text!r}"
    return None


def lines_of(text: str) -> list[Line]:
    """A requirements file's requirement lines: comments (` #` to the end of a line)
    and blank lines skipped, backslash continuations joined."""
    found: list[Line] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if line:
            found.append(Line(start, line))
    if pending.strip():
        found.append(Line(start, pending.strip()))
    return found


def names(lines: list[str]) -> list[str]:
    """The canonical project names the lines ask for, in order, once each."""
    seen: list[str] = []
    for text in lines:
        name = canonicalize_name(Requirement(text).name)
        if name not in seen:
            seen.append(name)
    return seen
