"""Check 8: the basics: clocks agree, and the hostfiles `up` writes are there and match the
inventory (free disk: disk.py)."""

from __future__ import annotations

import json
import statistics

from mpicluster.cluster import cordons, layout
from mpicluster.cluster import hostfiles as hostfile
from mpicluster.cluster.cordons import CordonState
from mpicluster.doctor.checks.common import UP, per_node
from mpicluster.doctor.model import CheckReport, Result, failed, passed, warned
from mpicluster.doctor.runner import Gathered
from mpicluster.util.errors import UsageError

CLOCK = "clock"
CLOCK_TITLE = "Clock skew between nodes"
HOSTFILE = "hostfile"
HOSTFILE_TITLE = "Hostfiles present and matching the inventory"

CLOCK_WARN = 1.0  # seconds
CLOCK_FAIL = 30.0


def check_clock(g: Gathered) -> CheckReport:
    missing = [n for n in g.names if n not in g.clocks]
    report = CheckReport(CLOCK, CLOCK_TITLE, not_checked=missing)
    if not g.clocks:
        return report
    median = statistics.median(c.skew for c in g.clocks.values())
    for node in [n for n in g.names if n in g.clocks]:
        clock = g.clocks[node]
        off = clock.skew - median
        beyond = abs(off) - clock.uncertainty
        text = (
            f"{abs(off):.3f} s {'ahead of' if off >= 0 else 'behind'} the cluster's median "
            f"(±{clock.uncertainty:.3f} s; control machine {-median:+.3f} s)"
        )
        fix = f"enable time sync (chrony or systemd-timesyncd) on {node}"
        if beyond > CLOCK_FAIL:
            report.results.append(failed(node, text, fix))
        elif beyond > CLOCK_WARN:
            report.results.append(warned(node, text, fix))
        else:
            report.results.append(passed(node, text))
    return report


def cordoned(g: Gathered) -> CordonState:
    """The newest cordon state among the nodes that answered (cluster/cordons.py)."""
    return cordons.newest(cordons.parse((g.facts(n) or {}).get("cordons")) for n in g.probed)


def expected_hostfiles(g: Gathered) -> dict[str, str | None]:
    """The files `up` would write (without the cordoned nodes); None where a node's
    slots cannot be known."""
    cores = {n: int((g.facts(n) or {}).get("nproc") or 1) for n in g.probed}
    ready = cordoned(g).ready(g.names)  # a cordoned node's slots are not needed
    try:
        slots = hostfile.slots(g.plan, cores, ready)
    except UsageError:  # a node without slots, GPUs or facts: its slots are unknown
        return dict.fromkeys(hostfile.PATHS)
    return hostfile.rendered(slots)


def check_hostfile(g: Gathered) -> CheckReport:
    expected = expected_hostfiles(g)
    return per_node(
        g, HOSTFILE, HOSTFILE_TITLE, lambda node, facts: judge_hostfile(g, expected, node, facts)
    )


def judge_hostfile(g: Gathered, expected: dict, node: str, facts: dict) -> list[Result]:
    files = facts.get("files") or {}
    results: list[Result] = []
    names, hosts = g.names, cordoned(g).ready(g.names)  # cluster.json lists the cordoned
    for path, wanted in expected.items():
        text = files.get(path)
        if text is None:
            results.append(failed(node, f"{path} is missing", f"{UP}: it writes the hostfiles"))
            continue
        if wanted is not None and text != wanted:
            results.append(
                failed(
                    node,
                    f"{path} holds {_short(text)}; the inventory gives {_short(wanted)}",
                    f"{UP}: it rewrites the hostfiles from the inventory",
                )
            )
        elif wanted is None and _hosts_in(text) != hosts:
            results.append(
                failed(
                    node,
                    f"{path} lists {', '.join(_hosts_in(text))}; the inventory: {', '.join(hosts)}",
                    f"{UP}: it rewrites the hostfiles from the inventory",
                )
            )
    text = files.get(layout.CLUSTER_JSON)
    if text is None:
        results.append(
            failed(node, f"{layout.CLUSTER_JSON} is missing", f"{UP}: it describes the cluster")
        )
    else:
        try:
            data = json.loads(text)
            listed = [n["name"] for n in data["nodes"]]
            cluster = data["cluster"]
        except (ValueError, KeyError, TypeError):
            listed, cluster = [], None
        if cluster != g.plan.cluster or listed != names:
            results.append(
                failed(
                    node,
                    f"{layout.CLUSTER_JSON} describes cluster {cluster!r} with "
                    f"{', '.join(listed) or 'no nodes'}; the inventory: {g.plan.cluster!r} "
                    f"with {', '.join(names)}",
                    f"{UP}: it rewrites {layout.CLUSTER_JSON}",
                )
            )
    if not results:
        results.append(
            passed(node, f"{layout.HOSTFILE} (+ MPICH, Horovod, cluster.json) match the inventory")
        )
    return results


def _hosts_in(text: str) -> list[str]:
    hosts = []
    for part in text.replace(",", "\n").split():
        host = part.split(":")[0]
        if host and "=" not in host:
            hosts.append(host)
    return hosts


def _short(text: str) -> str:
    flat = ", ".join(line.strip() for line in text.strip().splitlines())
    return repr(flat if len(flat) <= 80 else flat[:77] + "...")
