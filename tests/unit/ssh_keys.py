"""Public key lines for the users' tests: two made by ssh-keygen, the rest built from
their SSH wire format; and private keys put together at run time (no key armour in
the source), with a distinctive secret the tests look for in every output."""

from __future__ import annotations

import base64

#: ssh-keygen -t ed25519 -C alice@laptop; ssh-keygen -t ecdsa -C alice@phone
ED25519 = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIO/H81FXacOOTQyH6Eq1w02i1XxsglnRA1fskFcShpqx alice@laptop"
)
ECDSA256 = (
    "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBK2jpNGSq1m8yhAs"
    "LtO50gxkNbh4G+Mo9f/IBi5yZ274qgNcJGBiWAQ81I33Z4HuKVLpJOZQ/nDPpi/9VnBU568= alice@phone"
)

#: What every private key the tests paste holds: no message may show it.
SECRET = "c2VjcmV0LXRoYXQtbXVzdC1uZXZlci1iZS1wcmludGVk"  # noqa: S105 (not a password)


def wire(*fields: bytes) -> bytes:
    """SSH wire strings: each a 4-byte length, then its bytes."""
    return b"".join(len(field).to_bytes(4, "big") + field for field in fields)


def key_line(kind: str, *fields: bytes, comment: str = "someone@host", inner: str = "") -> str:
    """A key line of `kind` whose blob holds `inner` (default: `kind`) then `fields`."""
    blob = base64.b64encode(wire((inner or kind).encode(), *fields)).decode()
    return f"{kind} {blob} {comment}".rstrip()


RSA = key_line("ssh-rsa", b"\x01\x00\x01", b"\x00" + b"\xc5" * 256, comment="bob@desk")
ECDSA384 = key_line("ecdsa-sha2-nistp384", b"nistp384", b"\x04" + b"\x11" * 96)
ECDSA521 = key_line("ecdsa-sha2-nistp521", b"nistp521", b"\x04" + b"\x22" * 132)
SK_ED25519 = key_line("sk-ssh-ed25519@openssh.com", b"\x33" * 32, b"ssh:")
SK_ECDSA = key_line("sk-ecdsa-sha2-nistp256@openssh.com", b"nistp256", b"\x04" * 65, b"ssh:")
EVERY_TYPE = [ED25519, ECDSA256, RSA, ECDSA384, ECDSA521, SK_ED25519, SK_ECDSA]
#: Keys of other people (one person, one key: a key two users share is refused).
ED25519_BOB = key_line("ssh-ed25519", b"\x5a" * 32, comment="bob@alices-laptop")
ED25519_EVE = key_line("ssh-ed25519", b"\x6b" * 32, comment="eve@desk")
ED25519_CAROL = key_line("ssh-ed25519", b"\x7c" * 32, comment="carol@laptop")
#: Every type, each carol's own (none of alice's or bob's).
CAROLS_KEYS = [
    ED25519_CAROL,
    key_line("ecdsa-sha2-nistp256", b"nistp256", b"\x04" + b"\x12" * 64),
    key_line("ssh-rsa", b"\x01\x00\x01", b"\x00" + b"\xd6" * 256),
    ECDSA384,
    ECDSA521,
    SK_ED25519,
    SK_ECDSA,
]


def private_openssh() -> str:
    armour = "OPENSSH " + "PRIVATE KEY"
    body = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    return f"-----BEGIN {armour}-----\n{body}{SECRET}AAAA\n-----END {armour}-----\n"


def private_pem() -> str:
    armour = "RSA " + "PRIVATE KEY"
    return f"-----BEGIN {armour}-----\nMIIEowIBAAKCAQEA{SECRET}\n-----END {armour}-----\n"


def private_putty() -> str:
    return (
        "PuTTY-User-Key-File-3: ssh-ed25519\nEncryption: none\nComment: carol\n"
        "Public-Lines: 2\nAAAAC3NzaC1lZDI1NTE5AAAAIO/H81FXacOOTQyH6Eq1w02i1Xxs\nglnRA1fsk\n"
        f"Private-Lines: 1\n{SECRET}\nPrivate-MAC: 0123abcd\n"
    )
