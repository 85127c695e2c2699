"""Check 5: the network MPI uses.

`ports`: every node opens a TCP listener on an ephemeral high port (where Open MPI's
TCP transport and daemons listen) and every peer connects to it, so a firewall that
drops those ports (the other classic hang) shows up with the node that drops them.

`interfaces`: the interface or network the inventory names exists on every node,
and bridges MPI might pick (docker0, virbr0, ...) are flagged when nothing tells
MPI to avoid them. Each node's ARP table must hold every peer: above gc_thresh3
entries the kernel refuses new ones ("neighbor table overflow") and connections to
some peers time out; above gc_thresh2 it evicts entries within seconds.
"""

from __future__ import annotations

import ipaddress

from mpicluster.doctor.checks.common import UP, majority, per_node, plural
from mpicluster.doctor.model import CheckReport, Result, failed, passed, warned
from mpicluster.doctor.runner import Gathered
from mpicluster.nodes import arp_table as neighbour
from mpicluster.nodes import pairs as pair_plan

PORTS = "ports"
PORTS_TITLE = "TCP between nodes on ephemeral high ports (MPI's data and daemon traffic)"
INTERFACES = "interfaces"
INTERFACES_TITLE = "Network interfaces (the inventory's network, stray bridges)"
BRIDGE_PREFIXES = ("docker", "virbr", "br-", "cni", "podman", "lxcbr", "lxdbr", "flannel", "kube")
#: ARP entries a node needs beyond its peers: gateway, control machine, services.
NEIGHBOUR_SPARE = 32


def check_ports(g: Gathered) -> CheckReport:
    report = CheckReport(PORTS, PORTS_TITLE, not_checked=list(g.unprobed))
    tried = sorted(g.tcp_pairs)
    failures = {pair for pair, item in g.tcp_pairs.items() if not item["ok"]}
    blamed, rest = pair_plan.attribute(tried, failures)
    for node in g.names:
        if node in blamed:
            report.results.append(_blame(g, node, blamed[node], tried, failures))
    for source, target in rest:
        item = g.tcp_pairs[(source, target)]
        report.results.append(
            failed(
                source,
                f"TCP {source} -> {_endpoint(g, target)}: {item['error']}",
                f"allow TCP from {source} to {target}'s ports 1024-65535 (firewalls on both, "
                "and between them)",
                peer=target,
            )
        )
    for source in g.probed:
        if source in g.exchange_errors or blamed.get(source) in ("out", "both"):
            continue
        skipped = sorted(t for s, t in g.tcp_not_run if s == source)
        if skipped:
            report.results.append(
                warned(
                    source,
                    f"TCP from {source} to {', '.join(skipped[:5])} not tried within doctor's "
                    "time budget",
                    "rerun with `--check ports`",
                )
            )
        mine = [(s, t) for s, t in tried if s == source]
        good = [t for s, t in mine if (s, t) not in failures]
        if good:
            others = sorted({t for s, t in mine if (s, t) in failures})
            text = f"TCP to a high port on {len(good)} of {plural(len(mine), 'peer')} works"
            second = [t for t in good if g.tcp_pairs[(source, t)].get("attempts") == 2]
            if second:
                text += f" ({', '.join(second[:3])} on a second try: a lossy network?)"
            if others:
                text += f" (failures into {', '.join(others)} are reported there)"
            report.results.append(passed(source, text))
    return report


def _endpoint(g: Gathered, node: str) -> str:
    facts = g.facts(node) or {}
    return f"{node} ({g.mpi_address(node)}:{facts.get('port')})"


def _blame(g: Gathered, node: str, direction: str, tried, failures) -> Result:
    into = [(s, t) for s, t in tried if t == node and (s, t) in failures]
    out = [(s, t) for s, t in tried if s == node and (s, t) in failures]
    sample = g.tcp_pairs[(out if direction == "out" or not into else into)[0]]
    cidr = g.plan.network.cidr or "the cluster's network"
    if direction == "in":
        what = (
            f"TCP into {_endpoint(g, node)} fails from all {plural(len(into), 'peer')} "
            f"tried ({sample['error']})"
        )
        fix = (
            f"a firewall on {node} blocks MPI's ports: allow TCP from {cidr} "
            f"(e.g. iptables -I INPUT -s {cidr} -j ACCEPT on {node})"
        )
    elif direction == "out":
        what = f"TCP from {node} to all {plural(len(out), 'peer')} tried fails ({sample['error']})"
        fix = f"check {node}'s outbound firewall (iptables -S OUTPUT) and its routes to {cidr}"
    else:
        what = (
            f"TCP into {_endpoint(g, node)} and out of it fails for every peer tried "
            f"({sample['error']})"
        )
        fix = (
            f"a firewall on {node} drops MPI's ports, which also eats the replies to its own "
            f"connections: allow TCP from {cidr} (e.g. iptables -I INPUT -s {cidr} -j ACCEPT "
            f"on {node}; iptables -S shows the rule)"
        )
    return failed(node, what, fix)


def check_interfaces(g: Gathered) -> CheckReport:
    report = per_node(g, INTERFACES, INTERFACES_TITLE, lambda node, facts: judge(g, node, facts))
    mtus = {n: m for n in g.probed if (m := _mtu(g, n)) is not None}
    best, odd = majority({n: m[1] for n, m in mtus.items()})
    for node in odd:
        name, mtu = mtus[node]
        others = sorted({m[1] for n, m in mtus.items() if n != node})
        report.results = [r for r in report.results if r.node != node or r.status != "pass"]
        report.results.append(
            warned(
                node,
                f"{node}'s cluster interface {name} has MTU {mtu}; the other nodes' have "
                f"{', '.join(str(m) for m in others)}",
                f"set the same MTU on every node's cluster interface (`ip link set {name} mtu "
                f"{best}` on {node}, and its network config) and on the switch: frames larger "
                "than the smallest MTU on the path are dropped, which TCP's handshake hides "
                "and RDMA, UCX and UDP traffic does not",
            )
        )
    return report


def _mtu(g: Gathered, node: str) -> tuple[str, int] | None:
    """(interface, MTU) of the interface holding the node's MPI address."""
    address = g.mpi_address(node)
    for name, info in ((g.facts(node) or {}).get("interfaces") or {}).items():
        if any(a.split("/")[0] == address for a in info.get("addresses", [])) and info.get("mtu"):
            return name, info["mtu"]
    return None


def judge(g: Gathered, node: str, facts: dict) -> list[Result]:
    network = g.plan.network
    interfaces = facts.get("interfaces") or {}
    results: list[Result] = []
    chosen: str | None = None
    if network.interface:
        info = interfaces.get(network.interface)
        if info is None:
            results.append(
                failed(
                    node,
                    f"interface {network.interface} (network.interface) does not exist on "
                    f"{node}; it has {', '.join(sorted(interfaces)) or 'none'}",
                    "set network.interface to the name MPI traffic uses on every node "
                    "(or use network.cidr when the names differ)",
                )
            )
        elif not info.get("addresses"):
            results.append(
                failed(
                    node,
                    f"interface {network.interface} has no IPv4 address on {node}",
                    f"bring {network.interface} up with its address on {node}",
                )
            )
        else:
            chosen = network.interface
    elif network.cidr:
        net = ipaddress.ip_network(network.cidr)
        for name, info in sorted(interfaces.items()):
            if any(ipaddress.ip_address(a.split("/")[0]) in net for a in info.get("addresses", [])):
                chosen = name
                break
        if chosen is None:
            results.append(
                failed(
                    node,
                    f"no interface on {node} has an address in {network.cidr} (network.cidr)",
                    "fix network.cidr in the inventory: MPI's if_include would match nothing "
                    f"on {node}",
                )
            )
    bridges = sorted(
        name
        for name, info in interfaces.items()
        if name != chosen and (info.get("bridge") or name.startswith(BRIDGE_PREFIXES))
    )
    if bridges and not network.selector:
        results.append(
            warned(
                node,
                f"{node} has bridge interface(s) {', '.join(bridges)} and the inventory sets "
                "no network: Open MPI and NCCL may pick them and hang",
                f"set network.cidr (or network.interface) in the inventory, then {UP}",
            )
        )
    results.extend(_neighbour_table(node, facts.get("neighbour"), len(g.plan.nodes)))
    if not results:
        text = (
            f"MPI network {chosen} ({', '.join(interfaces[chosen]['addresses'])})"
            if chosen
            else "no network set in the inventory; no stray bridges"
        )
        if bridges:
            text += f"; {', '.join(bridges)} present but MPI is restricted to {network.selector}"
        results.append(passed(node, text))
    return results


def _neighbour_table(node: str, limits: dict | None, nodes: int) -> list[Result]:
    """A warning or failure when `node`'s ARP table cannot hold the cluster."""
    if not limits:
        return []  # hidden in this network namespace (a container): the host's concern
    need = nodes + NEIGHBOUR_SPARE
    if neighbour.fits(need, limits):
        return []
    middle, high = limits.get("gc_thresh2", 0), limits.get("gc_thresh3", 0)
    command = neighbour.sysctl_command(neighbour.raised(need, limits))
    fix = f"on {node}: {command} (and the same in /etc/sysctl.d/ to keep it)"
    if need > high:
        return [
            failed(
                node,
                f"{node}'s ARP table holds at most {high} entries (gc_thresh3) and "
                f"{nodes} nodes need about {need}: connections to some peers will time "
                "out ('neighbor table overflow' in dmesg)",
                fix,
            )
        ]
    return [
        warned(
            node,
            f"{node}'s ARP table keeps {middle} entries (gc_thresh2) and {nodes} nodes "
            f"need about {need}: the kernel evicts the rest within seconds, so MPI's "
            "start-up resolves peers again and again",
            fix,
        )
    ]
