"""Run local programs (podman, vagrant, debootstrap, ansible) and collect their output."""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from mpicluster.util import commandlog
from mpicluster.util.errors import CommandError, ToolMissingError

LineSink = Callable[[str], None]


@dataclass(frozen=True)
class Result:
    argv: list[str]
    returncode: int
    output: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def run(
    argv: list[str],
    *,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    on_line: LineSink | None = None,
    input_bytes: bytes | None = None,
    timeout: float | None = None,
    cwd: Path | None = None,
    hint: str | None = None,
) -> Result:
    """Run `argv`, stdout and stderr merged; feed each line to `on_line` as it comes.

    Stdin is empty unless `input_bytes` gives it: nothing run here may wait on a
    prompt. Raises ToolMissingError when the program is absent, CommandError when it
    times out, or fails and `check` is true.
    """
    full_env = {**os.environ, **env} if env is not None else None
    commandlog.ran("local", shlex.join(argv), stdin=input_bytes)
    try:
        if on_line is None:
            done = subprocess.run(
                argv,
                env=full_env,
                cwd=cwd,
                input=input_bytes if input_bytes is not None else b"",
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                timeout=timeout,
                check=False,
            )
            output = done.stdout.decode("utf-8", "replace")
            returncode = done.returncode
        else:
            returncode, output = _stream(argv, full_env, on_line, timeout, cwd)
    except FileNotFoundError:
        raise ToolMissingError(f"{argv[0]} is not installed on this machine") from None
    except subprocess.TimeoutExpired:
        raise CommandError(argv, -1, f"timed out after {timeout:.0f} s", hint=hint) from None
    result = Result(list(argv), returncode, output)
    if check and returncode != 0:
        raise CommandError(argv, returncode, output, hint=hint)
    return result


def _stream(
    argv, env, on_line: LineSink, timeout: float | None, cwd: Path | None
) -> tuple[int, str]:
    lines: list[str] = []
    with subprocess.Popen(
        argv,
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        bufsize=1,
    ) as proc:
        for line in proc.stdout or ():
            line = line.rstrip("\n")
            lines.append(line)
            on_line(line)
        returncode = proc.wait(timeout=timeout)
    return returncode, "\n".join(lines)
