"""bench's baseline: what the network carries between two nodes without MPI, and what
each node's card says it can carry.

- Each node's cluster interface (the one holding the address MPI uses: the inventory's
  network cidr or interface where it names one, else the node's address) and its rate
  from sysfs (`/sys/class/net/IF/speed`, Mb/s), and its RDMA ports' rates
  (`/sys/class/infiniband/DEV/ports/N/rate`, "100 Gb/sec (4X EDR)").
- Each pair through `iperf3 --bidir` (TCP, both directions at once, as an allreduce
  sends and receives at once): one end serves (`iperf3 -s -1`), the other connects; the
  pairs of a round run at the same time. The figure is the slower direction's received
  rate, in GB/s (10^9 bytes per second). Where every node has an RDMA port and
  perftest, `ib_write_bw` instead (rdma.py).
"""

from __future__ import annotations

import ipaddress
import json
import re
import shlex
from dataclasses import dataclass, field

from mpicluster.bench import rdma
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.nodes import transport

#: iperf3's port for bench (not its default 5201: a user's own iperf3 server keeps it).
PORT = 5291
#: Seconds each iperf3 test sends, after OMIT seconds it does not count (TCP's slow start).
SECONDS = 3
OMIT = 1

#: What one command tells of a node: its IPv4 addresses, its cards' rates, its RDMA ports'.
FACTS = (
    "ip -o -4 addr show 2>/dev/null; echo '#speeds'; "
    "for d in /sys/class/net/*; do printf '%s %s\\n' \"${d##*/}\" "
    '"$(cat "$d/speed" 2>/dev/null || echo -)"; done; echo \'#rdma\'; '
    'for p in /sys/class/infiniband/*/ports/*; do [ -e "$p/rate" ] && '
    'printf \'%s %s\\n\' "$p" "$(cat "$p/rate")"; done 2>/dev/null; echo \'#tools\'; '
    "command -v iperf3 ib_write_bw 2>/dev/null; true"
)

_ADDR = re.compile(r"^\d+:\s+(\S+)\s+inet\s+([\d.]+)/(\d+)")
_RDMA = re.compile(r"/sys/class/infiniband/([^/]+)/ports/(\d+)\s+([\d.]+)\s*Gb/sec")


@dataclass
class NodeNetwork:
    """One node's cluster interface, its address there and its rate (GB/s; None: the
    card does not say, as virtual ones do not), its RDMA ports' rates, its tools."""

    interface: str = ""
    address: str = ""
    nic_gbs: float | None = None
    rdma: dict[str, float] = field(default_factory=dict)
    tools: list[str] = field(default_factory=list)
    error: str = ""  # why the node's facts could not be read

    def to_dict(self) -> dict:
        return {
            "interface": self.interface,
            "address": self.address,
            "nic_gbs": None if self.nic_gbs is None else round(self.nic_gbs, 3),
            "rdma": {port: round(rate, 3) for port, rate in sorted(self.rdma.items())},
        }


def parse_facts(text: str, *, cidr: str | None, interface: str | None, own: str) -> NodeNetwork:
    """A node's FACTS output: the interface MPI uses there (in `cidr`, named `interface`,
    else holding `own`, the inventory's address of the node), its rate and RDMA ports."""
    sections: dict[str, list[str]] = {"addr": []}
    current = "addr"
    for line in text.splitlines():
        if line.startswith("#") and line[1:] in ("speeds", "rdma", "tools"):
            current = line[1:]
            sections[current] = []
        elif line.strip():
            sections[current].append(line.strip())
    found = NodeNetwork()
    network = ipaddress.ip_network(cidr, strict=False) if cidr else None
    for line in sections["addr"]:
        match = _ADDR.match(line)
        if not match:
            continue
        name, address = match.group(1).split("@")[0], match.group(2)
        if (
            (network and ipaddress.ip_address(address) in network)
            or (interface and name == interface)
            or (not network and not interface and address == own)
        ):
            found.interface, found.address = name, address
            break
    for line in sections.get("speeds", []):
        name, _, speed = line.partition(" ")
        if name == found.interface and speed.strip().isdigit() and int(speed) > 0:
            found.nic_gbs = int(speed) / 8000  # Mb/s to GB/s
    for line in sections.get("rdma", []):
        if match := _RDMA.search(line):
            found.rdma[f"{match.group(1)}:{match.group(2)}"] = float(match.group(3)) / 8
    found.tools = [line.rsplit("/", 1)[-1] for line in sections.get("tools", [])]
    return found


def node_facts(plan: ClusterPlan, names: list[str]) -> dict[str, NodeNetwork]:
    """Each node's NodeNetwork; one that did not answer is asked once more, then has an
    empty one with the reason in `error`."""
    network = plan.network
    wanted = [n for n in plan.nodes if n.name in names]
    done = transport.run_everywhere(plan, FACTS, nodes=wanted, timeout=30)
    failed = done.failed
    again = [n for n in wanted if n.name in failed]
    if again:
        done.update(transport.run_everywhere(plan, FACTS, nodes=again, timeout=30))
    found = {}
    for node in wanted:
        result = done[node.name]
        found[node.name] = parse_facts(
            result.stdout if result.ok else "",
            cidr=network.cidr if network else None,
            interface=network.interface if network else None,
            own=plan.node_ip(node),
        )
        if not result.ok:
            found[node.name].error = result.error or f"exit {result.exit_code}"
    return found


def server_command() -> str:
    """One test served, then gone; never past a round's time even if no client came."""
    return f"timeout {SECONDS + OMIT + 30} iperf3 -s -1 -p {PORT} >/dev/null 2>&1; true"


def client_command(peer: str) -> str:
    """The client, tried again while the peer's server is not listening yet (iperf3 -J
    exits 0 even when it could not connect: its words tell)."""
    test = shlex.join(
        ["iperf3", "-c", peer, "-p", str(PORT), "--bidir", "-t", str(SECONDS), "-O", str(OMIT)]
    )
    return (
        f"for i in $(seq 40); do out=$({test} -J 2>&1); "
        "case $out in *'unable to connect'*) sleep 0.25;; *) break;; esac; done; "
        'printf "%s\\n" "$out"'
    )


def parse_iperf(text: str) -> tuple[float | None, str]:
    """(GB/s each way, the slower direction; None with iperf3's words when it failed)."""
    try:  # the first JSON object: a warning may come before it, or a line after it
        report, _ = json.JSONDecoder().raw_decode(text[text.index("{") :])
    except ValueError:
        said = [line.strip() for line in text.splitlines() if line.strip() and "{" not in line]
        return None, f"iperf3 printed no report: {said[-1] if said else 'no output'}"
    if report.get("error"):
        return None, str(report["error"])
    end = report.get("end", {})
    rates = [
        end.get(key, {}).get("bits_per_second")
        for key in ("sum_received", "sum_received_bidir_reverse")
    ]
    if not all(isinstance(rate, (int, float)) and rate > 0 for rate in rates):
        return None, "iperf3 reported no rate both ways"
    return min(rates) / 8e9, ""


def measure_round(
    plan: ClusterPlan,
    pairs: list[tuple[str, str]],
    address: dict[str, str],
    rdma_ports: dict[str, str] | None = None,
) -> dict[tuple[str, str], tuple[float | None, str]]:
    """The pairs of one round at once: (a, b): a connects to b's address. Through
    iperf3, or ib_write_bw on each node's RDMA port where `rdma_ports` names them."""
    role = {}
    for a, b in pairs:
        if rdma_ports:
            role[a] = rdma.client_command(rdma_ports[a], address[b])
            role[b] = rdma.server_command(rdma_ports[b])
        else:
            role[a] = client_command(address[b])
            role[b] = server_command()
    wanted = [n for n in plan.nodes if n.name in role]
    done = transport.run_everywhere(
        plan, lambda node: role[node.name], nodes=wanted, timeout=SECONDS + OMIT + 60
    )
    parse = rdma.parse if rdma_ports else parse_iperf
    found = {}
    for a, b in pairs:
        result = done[a]
        found[(a, b)] = (None, result.error) if result.error else parse(result.stdout)
    return found


def rdma_ports(found: dict[str, NodeNetwork]) -> dict[str, str] | None:
    """Each node's first RDMA port where every node has one and ib_write_bw (None:
    iperf3 measures every pair: TCP works everywhere, a mixed cluster included)."""
    if all(card.rdma and "ib_write_bw" in card.tools for card in found.values()):
        return {name: sorted(card.rdma)[0] for name, card in found.items()}
    return None
