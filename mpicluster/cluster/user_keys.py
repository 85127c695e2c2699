"""Users' public keys as the inventory gives them: a key line, or the path of a file
of key lines. Pure: text in, the lines or the problems out; the caller reads the files.

A problem never holds the text it is about: what is wrong with a key is said, the key
is not printed (a private key pasted by mistake must not reach a terminal or a log).
"""

from __future__ import annotations

import base64
import binascii
import re

#: The key types mpicluster writes into authorized_keys, with the number of SSH wire
#: strings in each one's blob (RFC 4253 6.6, RFC 5656 3.1, OpenSSH's PROTOCOL.u2f).
KEY_TYPES = {
    "ssh-ed25519": 2,  # type, 32-byte key
    "ssh-rsa": 3,  # type, e, n
    "ecdsa-sha2-nistp256": 3,  # type, curve, point
    "ecdsa-sha2-nistp384": 3,
    "ecdsa-sha2-nistp521": 3,
    "sk-ssh-ed25519@openssh.com": 3,  # type, 32-byte key, application
    "sk-ecdsa-sha2-nistp256@openssh.com": 4,  # type, curve, point, application
}
_DSA = "ssh-dss"
_CERTIFICATES = {
    name.replace("@openssh.com", "") + "-cert-v01@openssh.com" for name in [*KEY_TYPES, _DSA]
}
#: The type names a message may show when it finds one: names, not key material.
TYPE_NAMES = {*KEY_TYPES, _DSA, *_CERTIFICATES}
#: OpenSSH refuses smaller RSA keys (RequiredRSASize, 9.1 on).
_RSA_MIN_BITS = 1024

_PRIVATE = re.compile(r"BEGIN [A-Z0-9 ]*PRIVATE KEY|PuTTY-User-Key-File")
_RFC4716 = re.compile(r"BEGIN SSH2 PUBLIC KEY")
#: An entry of base64 alone (a key's middle, without its type), which is no file name.
_BASE64_ONLY = re.compile(r"[A-Za-z0-9+/=]{40,}")

PRIVATE = "a private key, not a public one (not printed): give the public key (its .pub)"


def is_private(text: str) -> bool:
    """Whether `text` holds a private key (PEM or OpenSSH armour, or PuTTY's .ppk)."""
    return _PRIVATE.search(text) is not None


def is_file_entry(entry: str) -> bool:
    """Whether an entry of a user's `keys` names a file rather than giving a key line:
    a path has no whitespace, and is neither key material nor a key type."""
    text = entry.strip()
    if not text or any(c.isspace() or not c.isprintable() for c in text) or is_private(text):
        return False
    return text not in TYPE_NAMES and not _BASE64_ONLY.fullmatch(text)


def entry_problem(entry: str) -> str | None:
    """What is wrong with an entry that is not a file's path, as a key line; None: fine."""
    text = entry.strip()
    if not text:
        return "empty (give a public key line or the path of a file of them)"
    if is_private(text):
        return PRIVATE
    if "\n" in text or "\r" in text:
        return "more than one line: give one key per entry (or a file of them)"
    if _BASE64_ONLY.fullmatch(text):
        return "base64 alone, without a key type before it (not printed): give the whole line"
    return line_problem(text)


def line_problem(line: str) -> str | None:
    """What is wrong with one public key line (`TYPE BASE64 [COMMENT]`); None: fine."""
    if is_private(line):
        return PRIVATE
    if any((ord(c) < 32 and c != "\t") or ord(c) == 127 for c in line):
        return "contains a control character"
    words = line.split()
    if not words:
        return "empty"
    kind = words[0]
    if kind in KEY_TYPES:
        return _blob_problem(kind, words[1] if len(words) > 1 else "")
    if kind in _CERTIFICATES:
        return f"a certificate ({kind}), not a public key: give the key itself"
    if kind == _DSA:
        return "a DSA key (ssh-dss): OpenSSH no longer accepts them; give an ed25519 key"
    if any(word in TYPE_NAMES for word in words[1:]):
        return (
            "options before the key type (from=, command=, ...) are refused: mpicluster "
            "writes the lines it is given as they are; give the key alone"
        )
    if _RFC4716.search(line):
        return _RFC4716_PROBLEM
    return f"not a public key line (it must start with one of {', '.join(KEY_TYPES)})"


_RFC4716_PROBLEM = (
    "an RFC 4716 public key (---- BEGIN SSH2 PUBLIC KEY ----): give it in OpenSSH's "
    "one-line form (ssh-keygen -i -f FILE prints it)"
)


def file_lines(text: str) -> tuple[list[str], list[tuple[int | None, str]]]:
    """The key lines of a file of them (blank lines and # comments left out), and its
    problems as (line number or None for the whole file, message)."""
    numbered = list(enumerate(text.splitlines(), start=1))
    for number, line in numbered:
        if is_private(line):
            return [], [(number, PRIVATE)]
    for number, line in numbered:
        if _RFC4716.search(line):
            return [], [(number, _RFC4716_PROBLEM)]
    keys: list[str] = []
    problems: list[tuple[int | None, str]] = []
    for number, line in numbered:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        problem = line_problem(line)
        if problem:
            problems.append((number, problem))
        else:
            keys.append(line)
    if not keys and not problems:
        problems.append((None, "holds no public key line"))
    return keys, problems


def _blob_problem(kind: str, blob: str) -> str | None:
    """The key's base64: it decodes to `kind`'s fields, the first naming `kind`."""
    if not blob:
        return f"{kind} without the key's base64 after it"
    try:
        data = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        return "the key's base64 does not decode"
    fields = _wire_strings(data)
    if not fields:
        return "the key's data is not an SSH public key"
    inner = fields[0].decode("ascii", "replace")
    if inner != kind:
        said = inner if inner in TYPE_NAMES else "another type"
        return f"the line says {kind}, but its key is {said}"
    if len(fields) != KEY_TYPES[kind]:
        return f"the key's data is not an SSH {kind} key"
    return _fields_problem(kind, fields)


def _fields_problem(kind: str, fields: list[bytes]) -> str | None:
    if kind in ("ssh-ed25519", "sk-ssh-ed25519@openssh.com") and len(fields[1]) != 32:
        return f"the key's data is not an SSH {kind} key (its key is not 32 bytes)"
    if kind.startswith(("ecdsa-", "sk-ecdsa-")):
        curve = kind.removeprefix("sk-").removeprefix("ecdsa-sha2-").split("@")[0]
        if fields[1] != curve.encode():
            return f"the key's data is not an SSH {kind} key (another curve)"
    if kind == "ssh-rsa":
        bits = int.from_bytes(fields[2], "big").bit_length()
        if bits < _RSA_MIN_BITS:
            return f"an RSA key of {bits} bits: OpenSSH refuses under {_RSA_MIN_BITS}"
    return None


def _wire_strings(data: bytes) -> list[bytes]:
    """The SSH wire strings (a 4-byte length, then the bytes) `data` is made of, or []
    when it is not made of them exactly."""
    fields, at = [], 0
    while at < len(data):
        if at + 4 > len(data):
            return []
        size = int.from_bytes(data[at : at + 4], "big")
        at += 4
        if at + size > len(data):
            return []
        fields.append(data[at : at + size])
        at += size
    return fields
