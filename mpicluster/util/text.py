"""Picking the telling line out of a program's output, for one-line messages."""

from __future__ import annotations


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
