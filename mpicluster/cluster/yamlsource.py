"""Load a YAML file into plain data, remembering the line of every key.

The inventory validator reports problems as ``file:line: field: message``; this
module supplies the lines. Duplicate keys, which PyYAML silently resolves by
keeping the last one, are reported as problems instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]+")

Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input file, at a location inside it."""

    loc: Loc
    message: str
    line: int | None = None

    def render(self, source: str | None = None) -> str:
        where = format_loc(self.loc)
        prefix = source or ""
        if self.line is not None:
            prefix = f"{prefix}:{self.line}" if prefix else f"line {self.line}"
        parts = [p for p in (prefix, where) if p]
        return ": ".join([*parts, self.message])


@dataclass
class YamlDocument:
    data: Any
    lines: dict[Loc, int] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    def line_of(self, loc: Loc) -> int | None:
        """The line of `loc`, or of its nearest ancestor that has one."""
        for end in range(len(loc), -1, -1):
            line = self.lines.get(tuple(loc[:end]))
            if line is not None:
                return line
        return None


class YamlSyntaxError(Exception):
    def __init__(self, message: str, line: int | None):
        super().__init__(message)
        self.message = message
        self.line = line


def format_loc(loc: Loc) -> str:
    """('nodes', 2, 'address') -> 'nodes[2].address'; a key that is not a plain word
    (a newline, a space, a dot) is shown quoted: ('a b',) -> "['a b']"."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not _PLAIN_KEY.fullmatch(str(part)):
            out += f"[{str(part)!r}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def load_text(text: str) -> YamlDocument:
    """Parse one YAML document; raise YamlSyntaxError with a line number on bad syntax."""
    try:
        # the reader checks the characters at once: a control character raises here
        loader = yaml.SafeLoader(text)
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        raise YamlSyntaxError(f"invalid YAML: {exc.reason} (#x{exc.character:04x})", line) from None
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = exc.problem or exc.context or "invalid YAML"
        raise YamlSyntaxError(f"invalid YAML: {problem}", line) from None
    except yaml.YAMLError as exc:
        raise YamlSyntaxError(f"invalid YAML: {exc}", None) from None
    finally:
        loader.dispose()
    doc = YamlDocument(data)
    if node is not None:
        _walk(node, (), doc)
    return doc


def _walk(node: yaml.Node, loc: Loc, doc: YamlDocument) -> None:
    doc.lines.setdefault(loc, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        first_seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = str(key_node.value)
            line = key_node.start_mark.line + 1
            if key in first_seen:
                doc.problems.append(
                    Problem(
                        (*loc, key), f"duplicate key (first given at line {first_seen[key]})", line
                    )
                )
                continue
            first_seen[key] = line
            doc.lines[(*loc, key)] = line
            _walk(value_node, (*loc, key), doc)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _walk(item, (*loc, index), doc)
