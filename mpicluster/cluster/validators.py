"""Checks for the names and addresses an inventory holds.

Each check returns None when the value is fine, else a short message saying why
not. Everything these checks accept is safe to put on a command line unquoted.
"""

from __future__ import annotations

import ipaddress
import re

SHELL_METACHARACTERS = set(";&|$`<>(){}[]*?!~'\"\\ \t\n#%^,=")
_LABEL = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
_CLUSTER = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")
_USER = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")
#: A person's user or group name, as every useradd takes it: no ".", no "$", at most 32.
_ACCOUNT = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
_IFNAME = re.compile(r"^[A-Za-z0-9_.@-]{1,15}$")
_NUMERIC_DOTTED = re.compile(r"^[0-9.]+$")


def _metacharacter(value: str) -> str | None:
    for char in value:
        if char in SHELL_METACHARACTERS:
            return f"contains {char!r}, a shell metacharacter"
    return None


def hostname_problem(value: str) -> str | None:
    """None if `value` is an RFC 1123 host name (single label or dotted)."""
    if not value:
        return "must not be empty"
    bad = _metacharacter(value)
    if bad:
        return f"{bad}; not a valid hostname"
    if len(value) > 253:
        return "longer than 253 characters; not a valid hostname"
    if _NUMERIC_DOTTED.fullmatch(value):
        return "not a valid IP address"
    if has_port(value):
        return f"not a hostname; {PORT_HINT}"
    labels = value.rstrip(".").split(".")
    for label in labels:
        if not _LABEL.fullmatch(label):
            return (
                f"not an RFC 1123 hostname (label {label!r}: use letters, digits and '-', "
                "1-63 characters, not starting or ending with '-')"
            )
    return None


def address_problem(value: str) -> str | None:
    """None if `value` is an IPv4/IPv6 address or an RFC 1123 hostname."""
    if is_ip(value):
        return None
    problem = hostname_problem(value)
    if problem is None:
        return None
    if has_port(value):
        return f"not an IP address or hostname; {PORT_HINT}"
    if _metacharacter(value):
        return f"{_metacharacter(value)}; not an IP address or hostname"
    return "not an IP address or hostname"


PORT_HINT = "put the port in ssh.port (or the node's ssh.port)"
_WITH_PORT = re.compile(r"^(?:\[(?P<v6>[^\]]+)\]|(?P<host>[^:\[\]]+)):[0-9]{1,5}$")


def has_port(value: str) -> bool:
    """Whether `value` is a host with a port: 10.0.0.14:22, gpu01:2222, [fe80::1]:22
    (an IPv6 address alone, fe80::1, is not: is_ip takes it)."""
    match = _WITH_PORT.match(value)
    if match is None:
        return False
    if match["v6"] is not None:
        return is_ip(match["v6"])
    return is_ip(match["host"]) or hostname_problem(match["host"]) is None


def cluster_name_problem(value: str) -> str | None:
    if _CLUSTER.fullmatch(value):
        return None
    bad = _metacharacter(value)
    if bad:
        return bad
    return "use 1-40 lowercase letters, digits and '-', not starting or ending with '-'"


def user_problem(value: str) -> str | None:
    if _USER.fullmatch(value):
        return None
    bad = _metacharacter(value)
    if bad:
        return bad
    return "not a valid POSIX user name (lowercase letters, digits, '_', '-', '.')"


def account_problem(value: str, kind: str = "user") -> str | None:
    """None if `value` is a portable POSIX user (or group) name: a lowercase letter or
    _, then lowercase letters, digits, _ or -, at most 32 characters."""
    if _ACCOUNT.fullmatch(value):
        return None
    bad = _metacharacter(value)
    if bad:
        return bad
    if len(value) > 32:
        return f"longer than 32 characters; not a POSIX {kind} name"
    return (
        f"not a POSIX {kind} name (a lowercase letter or _, then lowercase letters, digits, _ or -)"
    )


def group_problem(value: str) -> str | None:
    return account_problem(value, "group")


def interface_problem(value: str) -> str | None:
    if _IFNAME.fullmatch(value):
        return None
    if len(value) > 15:
        return "longer than 15 characters; not a Linux interface name"
    bad = _metacharacter(value)
    if bad:
        return bad
    return "not a Linux interface name"


def is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True
