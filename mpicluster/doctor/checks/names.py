"""Check 4: every node resolves every node's name to the address the inventory says,
and its own hostname not to a loopback address (Open MPI then advertises 127.0.x.x
to its peers and mpirun hangs)."""

from __future__ import annotations

import ipaddress

from mpicluster.doctor.checks.common import UP, per_node, plural
from mpicluster.doctor.model import CheckReport, Result, failed, passed, warned
from mpicluster.doctor.runner import Gathered
from mpicluster.names import is_ip


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
    node = next(n for n in g.inventory.nodes if n.name == name)
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
    hosts = f"{node}:/etc/hosts"
    for name, wanted in expected.items():
        answer = resolved.get(name) or {"error": "not looked up"}
        own = name == node
        if "error" in answer:
            results.append(
                failed(
                    node,
                    f"cannot resolve {name}: {answer['error']}",
                    f"{UP} (it adds the cluster's names to {hosts}) or fix DNS",
                    peer=None if own else name,
                )
            )
            continue
        addresses = answer["addresses"]
        first = addresses[0] if addresses else None
        looped = [a for a in addresses if _loopback(a)]
        if own and looped:
            results.append(
                failed(
                    node,
                    f"{node} resolves its own name to {', '.join(addresses)}: Open MPI "
                    "advertises the loopback address to its peers and mpirun hangs",
                    f"remove the line `{looped[0]} {name}` from {hosts} (installers add it); "
                    "the name must resolve to the node's cluster address",
                )
            )
        elif wanted is not None and first not in wanted:
            results.append(
                failed(
                    node,
                    f"{name} resolves to {', '.join(addresses) or 'nothing'} on {node}; "
                    f"the inventory says {', '.join(wanted)}",
                    f"fix {name}'s entry in {hosts} or DNS ({UP} writes the cluster's "
                    "names at the top of /etc/hosts)",
                    peer=None if own else name,
                )
            )
        elif wanted is not None and len(addresses) > 1 and set(addresses) - set(wanted):
            results.append(
                warned(
                    node,
                    f"{name} resolves to {', '.join(addresses)} on {node}: the first is right, "
                    "tools that take another will not reach it",
                    f"remove the extra entries for {name} from {hosts} or DNS",
                    peer=None if own else name,
                )
            )
    hostname = facts.get("hostname")
    if hostname and hostname not in expected:
        answer = resolved.get(hostname) or {}
        looped = [a for a in answer.get("addresses", []) if _loopback(a)]
        if looped:
            results.append(
                failed(
                    node,
                    f"{node}'s hostname {hostname} resolves to {looped[0]}: Open MPI "
                    "advertises the loopback address to its peers and mpirun hangs",
                    f"remove `{looped[0]} {hostname}` from {hosts}, or give the inventory the "
                    "node's hostname",
                )
            )
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
