"""Errors the core raises; the CLI turns each into one line and an exit code."""

from __future__ import annotations

from mpicluster.util import exitcodes
from mpicluster.util.text import telling_line


class MpiclusterError(Exception):
    """An error with a message meant for the user and the exit code it maps to."""

    exit_code = exitcodes.FAILED

    def __init__(self, message: str, *, hint: str | None = None, exit_code: int | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(MpiclusterError):
    """Bad input from the user; nothing was changed."""

    exit_code = exitcodes.USAGE


class ToolMissingError(MpiclusterError):
    """A program mpicluster needs on this machine is absent and could not be installed."""


class CommandError(MpiclusterError):
    """An external command (podman, vagrant, debootstrap...) failed."""

    def __init__(self, argv: list[str], returncode: int, output: str, *, hint: str | None = None):
        tail = telling_line(output)
        super().__init__(
            f"`{argv[0]} {' '.join(argv[1:3])}` failed ({returncode}): {tail}", hint=hint
        )
        self.argv = argv
        self.returncode = returncode
        self.output = output
