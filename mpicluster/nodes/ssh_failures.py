"""What a failed `ssh` between nodes means: one classifier for doctor's mesh and the
smoke test's env matrix, from the OpenSSH client's exit code and stderr."""

from __future__ import annotations

import re

from mpicluster.util.text import last_line

#: What an OpenSSH client's stderr means, most specific first.
SSH_CAUSES = [
    ("host_key_changed", ("remote host identification has changed", "host key for")),
    ("host_key_unknown", ("host key verification failed", "no ed25519 host key is known")),
    ("key_mode", ("unprotected private key file", "bad permissions")),
    ("nologin", ("account is currently not available",)),
    ("denied", ("permission denied",)),
    ("resolve", ("could not resolve hostname", "name or service not known")),
    ("timeout", ("timed out", "operation timed out")),
    ("unreachable", ("no route to host", "network is unreachable")),
    ("refused", ("connection refused",)),
    ("closed", ("connection closed by", "connection reset", "kex_exchange_identification")),
]


def classify(stderr: str, rc: int | None) -> str:
    """One of the SSH_CAUSES names, "command" (the login worked, the command failed),
    or "other"; rc None means no answer at all within the timeout."""
    if rc is None:
        return "timeout"
    text = (stderr or "").lower()
    for cause, needles in SSH_CAUSES:
        if any(needle in text for needle in needles):
            return cause
    return "command" if rc not in (0, 255) else "other"


def offered_fingerprint(stderr: str) -> str | None:
    match = re.search(r"(SHA256:[A-Za-z0-9+/]{20,})", stderr or "")
    return match.group(1) if match else None


def evidence(stderr: str, rc: int | None) -> str:
    """What was seen: the client's last line, and the host key it was offered."""
    if rc is None:
        return "no answer within the timeout"
    line = last_line(stderr) or f"exit {rc}"
    fingerprint = offered_fingerprint(stderr)
    if fingerprint and fingerprint not in line:
        line += f"; offered key {fingerprint}"
    return line


def why(cause: str, target: str, source: str | None = None, command: str = "true") -> str:
    """Why a pair failed; with `source`, worded for a node whose every connection out fails."""
    if source and cause in ("timeout", "unreachable"):
        return f"{source}'s connections to its peers' port 22 get no answer"
    return {
        "host_key_changed": f"{target}'s host key differs from the one the nodes trust",
        "host_key_unknown": f"{target}'s host key is not in the source's known_hosts",
        "denied": f"{target} refuses the cluster key",
        "resolve": f"{target}'s name does not resolve",
        "timeout": f"{target} does not answer on port 22",
        "unreachable": f"no route to {target}",
        "refused": f"{target} refuses connections on port 22",
        "closed": f"{target} closed the connection",
        "key_mode": "ssh refuses to use the cluster key (its file is readable by others)",
        "nologin": "the MPI user's login shell refuses commands (nologin)",
        "command": f"the login works but `{command}` failed (login shell?)",
    }.get(cause, "ssh failed")
