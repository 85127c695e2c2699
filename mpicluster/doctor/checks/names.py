"""Check 4: every node resolves every node's name to the address the inventory says,
and its own hostname not to a loopback address (Open MPI then advertises 127.0.x.x
to its peers and mpirun hangs)."""

from __future__ import annotations

import ipaddress

from mpicluster.cluster.validators import is_ip
from mpicluster.doctor.checks.common import UP, per_node, plural
from mpicluster.doctor.model import CheckReport, Result, failed, passed, warned
from mpicluster.doctor.runner import Gathered


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


NAME = "names"
TITLE = "Name resolution (every node's name, and each node's own hostname)"


def check(g: Gathered) -> CheckReport:
    expected = {name: expected_addresses(g, name) for name in g.names}
    return per_node(g, NAME, TITLE, lambda node, facts: judge(expected, node, facts))


def expected_addresses(g: Gathered, name: str) -> list[str] | None:
    """The addresses `name` may resolve to: the inventory's, else the node's own."""
    node = g.plan.node(name)
    if node.address and is_ip(node.address):
        return [node.address]
    facts = g.facts(name)
    if not facts:
        return None
    found = []
    for info in (facts.get("interfaces") or {}).values():
        for cidr in info.get("addresses", []):
            address = cidr.split("/")[0]
            if not _loopback(address):
                found.append(address)
    return found or None


def judge(expected: dict[str, list[str] | None], node: str, facts: dict) -> list[Result]:
    resolved = facts.get("resolve") or {}
    results: list[Result] = []
    for name, wanted in expected.items():
        answer = resolved.get(name) or {"error": "not looked up"}
        result = _judge_name(node, facts, name, wanted, answer)
        if result is not None:
            results.append(result)
    hostname = facts.get("hostname")
    if hostname and hostname not in expected:
        results.extend(_judge_own_hostname(node, hostname, resolved.get(hostname) or {}))
    if not results:
        own = ", ".join((resolved.get(hostname) or {}).get("addresses", []))
        results.append(
            passed(
                node,
                f"resolves {plural(len(expected), 'node name')} as the inventory says; "
                f"own name {hostname} -> {own} (not loopback)",
            )
        )
    return results


def _judge_name(
    node: str, facts: dict, name: str, wanted: list[str] | None, answer: dict
) -> Result | None:
    """How `node` resolves the cluster name `name`: not at all, its own name to loopback,
    to a wrong first address, or to extra addresses besides the right one."""
    if "error" in answer:
        return _unresolved(node, facts, name, answer["error"])
    addresses = answer["addresses"]
    looped = [a for a in addresses if _loopback(a)]
    if name == node and looped:
        return failed(
            node,
            f"{node} resolves its own name to {', '.join(addresses)}: Open MPI "
            "advertises the loopback address to its peers and mpirun hangs",
            f"remove the line `{looped[0]} {name}` from {node}:/etc/hosts (installers add it); "
            "the name must resolve to the node's cluster address",
        )
    if wanted is None:
        return None
    first = addresses[0] if addresses else None
    if first not in wanted:
        return _wrong_address(node, facts, name, wanted, addresses)
    if len(addresses) > 1 and set(addresses) - set(wanted):
        return _extra_addresses(node, facts, name, wanted, addresses)
    return None


def _unresolved(node: str, facts: dict, name: str, error: str) -> Result:
    """`node` cannot resolve `name` (perhaps because nsswitch.conf skips /etc/hosts)."""
    skipped = _files_skipped(facts, name)
    return failed(
        node,
        f"cannot resolve {name}: {error}" + (f"; {skipped[0]}" if skipped else ""),
        skipped[1]
        if skipped
        else f"{UP} (it adds the cluster's names to {node}:/etc/hosts) or fix DNS",
        peer=None if name == node else name,
    )


def _wrong_address(
    node: str, facts: dict, name: str, wanted: list[str], addresses: list[str]
) -> Result:
    """`name` resolves first to an address the inventory does not give."""
    line = _shadowing_line(facts, name, wanted)
    return failed(
        node,
        f"{name} resolves to {', '.join(addresses) or 'nothing'} on {node}; "
        f"the inventory says {', '.join(wanted)}"
        + (f"; /etc/hosts:{line[0]} is `{line[1]}`" if line else ""),
        f"remove `{line[1]}` (/etc/hosts:{line[0]} on {node}): the resolver takes "
        f"the first line naming {name}, and this one comes before mpicluster's"
        if line
        else f"fix {name}'s entry in {node}:/etc/hosts or DNS ({UP} writes the cluster's "
        "names at the top of /etc/hosts)",
        peer=None if name == node else name,
    )


def _extra_addresses(
    node: str, facts: dict, name: str, wanted: list[str], addresses: list[str]
) -> Result:
    """`name` resolves first to the right address, but also to others."""
    stale = _stale_lines(facts, name, wanted)
    return warned(
        node,
        f"{name} resolves to {', '.join(addresses)} on {node}: the first is right, "
        "tools that take another will not reach it"
        + "".join(f"; /etc/hosts:{n} is `{text}`" for n, text in stale),
        "remove "
        + ", ".join(f"`{text}` (/etc/hosts:{n})" for n, text in stale)
        + f" on {node}: getaddrinfo sorts it after the right address here, but "
        "gethostbyname and tools that read the first line take it"
        if stale
        else f"remove the extra entries for {name} from {node}:/etc/hosts or DNS",
        peer=None if name == node else name,
    )


def _judge_own_hostname(node: str, hostname: str, answer: dict) -> list[Result]:
    """The node's own hostname (when not a cluster name) must not resolve to loopback."""
    looped = [a for a in answer.get("addresses", []) if _loopback(a)]
    if not looped:
        return []
    return [
        failed(
            node,
            f"{node}'s hostname {hostname} resolves to {looped[0]}: Open MPI "
            "advertises the loopback address to its peers and mpirun hangs",
            f"remove `{looped[0]} {hostname}` from {node}:/etc/hosts, or give the inventory the "
            "node's hostname",
        )
    ]


def _resolver(facts: dict) -> dict:
    return (facts.get("access") or {}).get("resolver") or {}


def _shadowing_line(facts: dict, name: str, wanted: list[str]) -> tuple[int, str] | None:
    """The first /etc/hosts line naming `name` with an address the inventory does not
    give, when it is the first line naming it (the one the resolver takes)."""
    lines = _resolver(facts).get("hosts_lines", {}).get(name) or []
    if lines and lines[0][1].split()[0] not in wanted:
        return lines[0][0], lines[0][1]
    return None


def _stale_lines(facts: dict, name: str, wanted: list[str]) -> list[tuple[int, str]]:
    """/etc/hosts lines naming `name` with an address the inventory does not give."""
    lines = _resolver(facts).get("hosts_lines", {}).get(name) or []
    return [(n, text) for n, text in lines if text.split()[0] not in wanted]


def _files_skipped(facts: dict, name: str) -> tuple[str, str] | None:
    """/etc/hosts holds `name`, but nsswitch.conf's hosts line never reads it."""
    resolver = _resolver(facts)
    line = resolver.get("nsswitch_hosts")
    if not line or "files" in line.split() or not resolver.get("hosts_lines", {}).get(name):
        return None
    return (
        f"/etc/hosts has {name}, but /etc/nsswitch.conf says `{line}`",
        f"/etc/nsswitch.conf's hosts line (`{line}`) does not read /etc/hosts, where "
        f"mpicluster up wrote the cluster's names: put `files` first (`hosts: files dns`)",
    )
