"""Picking the telling line out of a program's output, for one-line messages."""

from __future__ import annotations

import json


def lines_of(text: str | None) -> list[str]:
    """The non-blank lines of `text`, stripped, without banner rules (`@@@@`)."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return [line for line in lines if not set(line) <= set("@ ")]


def last_line(text: str | None, default: str = "") -> str:
    lines = lines_of(text)
    return lines[-1] if lines else default


def telling_line(text: str | None, default: str = "no output") -> str:
    """The last error line of a failed program's output, else its last line."""
    lines = lines_of(text)
    for line in reversed(lines[-40:]):
        lowered = line.lower()
        if lowered.startswith(("error", "e: ", "fatal", "stderr: error")) or " error:" in lowered:
            return line
    return lines[-1] if lines else default


def json_line(text: str) -> dict | None:
    """The last line of `text` that starts a JSON object, parsed (a program's report)."""
    for line in reversed(text.splitlines()):
        # a NUL can precede it: Open MPI 5.0.7's smcuda warning ("The call to
        # cuMemHostRegister(...) failed") prints stray bytes, seen on an H200
        line = line.lstrip("\x00")
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
    return None


def message_size(nbytes: float) -> str:
    """A message's size as benchmarks write it: 8 B, 32 KiB, 256 MiB, 1 GiB."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:.0f} {unit}"
        nbytes /= 1024
    return f"{nbytes:.0f} GiB"
