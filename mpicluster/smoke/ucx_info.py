"""What UCX offers a rank, read from the stack's `ucx_info`: its version and the
transports with their devices (tcp on eth0 and lo, shared memory, CUDA's copies on a GPU
node). Beside the PML the allreduce's ranks said they selected, it tells which UCX carried
it and over what it could.

One command for a node (both of ucx_info's listings, under one short timeout) and the
parsing of what it printed; the smoke test runs the command and keeps the record.
"""

from __future__ import annotations

import re
import shlex

#: Seconds ucx_info may take: `-d` opens every transport's interface (on a GPU node a
#: CUDA context), about a second; more means something hangs, and the smoke goes on.
TIMEOUT = 20

#: `-v`'s first line: "# Library version: 1.22.0" (1.20.1 and 1.22.0,
#: src/tools/info/version_info.c), "# Version 1.13.1" (Debian 12's 1.13.1).
VERSION = re.compile(r"^# (?:Library version:|Version) (\S+)", re.MULTILINE)
#: `-d`'s two lines on each interface (src/tools/info/tl_info.c, 1.13.1 to 1.22.0):
#: "#      Transport: tcp" and right below it "#         Device: eth0".
PAIR = re.compile(r"^#\s+Transport: (\S+)\n#\s+Device: (\S+)$", re.MULTILINE)

#: The device names UCX gives what is no network card: shared memory ("memory", the
#: self transport's "memory0" in 1.13.1) and the GPU ("cuda": cuda_copy, cuda_ipc,
#: gdr_copy). Naming them says nothing the transport's name does not.
PLACEHOLDER_DEVICES = re.compile(r"memory\d*|cuda")


def command(ucx_info: str) -> str:
    """Both listings in one login. A stack without UCX has no ucx_info: then the
    command prints nothing and exits 0."""
    script = 'test -x "$1" || exit 0; "$1" -v && "$1" -d'
    return f"timeout -k 5 {TIMEOUT} sh -c {shlex.quote(script)} ucx_info {shlex.quote(ucx_info)}"


def parse(output: str) -> dict | None:
    """{"version": "1.22.0", "transports": {"tcp": ["eth0", "lo"], "self": ["memory"],
    ...}} in the order ucx_info listed them; None when it printed no version (no
    ucx_info, or not its output)."""
    version = VERSION.search(output)
    if version is None:
        return None
    transports: dict[str, list[str]] = {}
    for transport, device in PAIR.findall(output):
        devices = transports.setdefault(transport, [])
        if device not in devices:
            devices.append(device)
    return {"version": version.group(1), "transports": transports}
