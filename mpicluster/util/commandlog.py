"""What runs, for `-v`: every command mpicluster starts (on a node over SSH, on this
machine, a playbook), logged through the `mpicluster.commands` logger with its secrets
hidden. The core only logs; the CLI's -v shows the log on stderr."""

from __future__ import annotations

import logging
import re

LOG = logging.getLogger("mpicluster.commands")

#: A private key's text, wherever it appears.
PEM = re.compile(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?-----END [A-Z0-9 ]*PRIVATE KEY-----", re.S
)
#: NAME=value where the name says it holds a secret (MUNGE_KEY=..., HF_TOKEN=...).
SECRET_ASSIGNMENT = re.compile(
    r"\b([A-Za-z0-9_]*(?:KEY|TOKEN|SECRET|PASSWORD|PASSWD)[A-Za-z0-9_]*)=('[^']*'|\"[^\"]*\"|\S+)",
    re.I,
)
#: A command longer than this is cut (the rest counted): -v is read by a person.
LONGEST = 2000


def hidden(text: str) -> str:
    """`text` with private keys and secret-named values replaced by <hidden>."""
    text = PEM.sub("<private key hidden>", text)
    return SECRET_ASSIGNMENT.sub(lambda m: f"{m.group(1)}=<hidden>", text)


def ran(where: str, command: str, *, stdin: str | bytes | None = None) -> None:
    """Log one command about to run `where` (a node's name, "local", "ansible")."""
    if not LOG.isEnabledFor(logging.INFO):
        return
    text = hidden(command)
    if len(text) > LONGEST:
        text = f"{text[:LONGEST]}... ({len(text) - LONGEST} more characters)"
    fed = f" (with {len(stdin)} bytes on its input)" if stdin else ""
    LOG.info("%s: %s%s", where, text, fed)
