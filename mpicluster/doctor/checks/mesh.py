"""Check 2: from every node to every node, `ssh -o BatchMode=yes` with strict host key
checking works, on a fresh connection (no ControlMaster), as mpirun's launch needs."""

from __future__ import annotations

from mpicluster import ssh_failures
from mpicluster.doctor import pairs as pair_plan
from mpicluster.doctor.checks.common import UP, plural
from mpicluster.doctor.model import CheckReport, Result, failed, passed, warned
from mpicluster.doctor.runner import Gathered

NAME = "mesh"
TITLE = "Node-to-node ssh (BatchMode, strict host keys, fresh connections)"


def check(g: Gathered) -> CheckReport:
    report = CheckReport(NAME, TITLE, not_checked=list(g.unprobed))
    tried = sorted(g.ssh_pairs)
    failures = {pair for pair, item in g.ssh_pairs.items() if item["rc"] != 0}
    blamed, rest = pair_plan.attribute(tried, failures)
    for node in g.names:
        if node in blamed:
            report.results.append(_blame(g, node, blamed[node], tried, failures))
    for source, target in rest:
        item = g.ssh_pairs[(source, target)]
        cause = ssh_failures.classify(item["stderr"], item["rc"])
        report.results.append(
            failed(
                source,
                f"ssh {source} -> {target}: {_why(cause, target)} ({_evidence(item)})",
                _fix(g, cause, source, target, "in"),
                peer=target,
            )
        )
    for source in g.probed:
        if source in g.exchange_errors:
            report.results.append(
                failed(
                    source,
                    f"the probe on {source} stopped during the mesh: {g.exchange_errors[source]}",
                    f"rerun doctor; if it repeats, look at {source}'s load and sshd logs",
                )
            )
            continue
        if blamed.get(source) in ("out", "both"):
            continue
        mine = [(s, t) for s, t in tried if s == source]
        skipped = sorted(t for s, t in g.not_run if s == source)
        if skipped:
            report.results.append(
                warned(
                    source,
                    f"{plural(len(skipped), 'pair')} from {source} not tried within doctor's "
                    f"time budget ({', '.join(skipped[:5])})",
                    "rerun with `--check mesh`, or a larger --timeout",
                )
            )
        good = [t for s, t in mine if (s, t) not in failures]
        if not mine or not good:
            continue
        others = sorted({t for s, t in mine if (s, t) in failures})
        text = f"ssh to {len(good)} of {plural(len(mine), 'peer')} works"
        second = [t for t in good if g.ssh_pairs[(source, t)].get("attempts") == 2]
        if second:
            text += f" ({', '.join(second[:3])} on a second try: a lossy or busy network?)"
        if others:
            text += f" (failures into {', '.join(others)} are reported there)"
        if g.sampled:
            text += (
                f"; a sample of {pair_plan.PER_NODE} peers per node (seed {g.seed}, "
                "--all-pairs for every pair)"
            )
        report.results.append(passed(source, text))
    silent = sorted(
        n for n in g.names if not g.sessions[n].connected and g.sessions[n].error_kind == "network"
    )
    for node in silent:
        if node not in report.not_checked:
            report.not_checked.append(node)
    return report


def _evidence(item: dict) -> str:
    return ssh_failures.evidence(item["stderr"], item["rc"])


_why = ssh_failures.why


def _blame(g: Gathered, node: str, direction: str, tried, failures) -> Result:
    into = [(s, t) for s, t in tried if t == node and (s, t) in failures]
    out = [(s, t) for s, t in tried if s == node and (s, t) in failures]
    chosen = out if direction == "out" or not into else into
    sample = g.ssh_pairs[chosen[0]]
    cause = ssh_failures.classify(sample["stderr"], sample["rc"])
    if direction == "in":
        what = f"ssh into {node} fails from all {plural(len(into), 'node')} tried"
    elif direction == "out":
        what = f"ssh from {node} fails to all {plural(len(out), 'peer')} tried"
    else:
        what = f"ssh into {node} ({len(into)} tried) and out of it ({len(out)} tried) fails"
    side = "in" if chosen is into else "out"
    source, target = chosen[0]
    return failed(
        node,
        f"{what}: {_why(cause, target, source if side == 'out' else None)} ({_evidence(sample)})",
        _fix(g, cause, source, target, side, both=direction == "both"),
    )


def _fix(g: Gathered, cause: str, source: str, target: str, side: str, both=False) -> str:
    cluster = g.inventory.cluster
    src = (g.facts(source) or {}).get("ssh") or {}
    dst = (g.facts(target) or {}).get("ssh") or {}
    if (both or side == "out") and cause in ("timeout", "unreachable"):
        return (
            f"{target if side == 'in' else source} cannot exchange TCP traffic with its peers: "
            "check its firewall (iptables -S; a DROP on INPUT also eats the replies to its own "
            "connections) and its network link"
        )
    if src and not src.get("key"):
        return f"{source} has no cluster key ~/.ssh/mpicluster_{cluster}: {UP}"
    if src and not src.get("config_block"):
        return f"{source}'s ~/.ssh/config has no `mpicluster {cluster}` block: {UP}"
    if cause in ("host_key_changed", "host_key_unknown"):
        if src and not src.get("known_hosts_block"):
            return f"{source}'s /etc/ssh/ssh_known_hosts has no mpicluster block: {UP}"
        return (
            f"{target}'s host key changed since `mpicluster up` recorded it: if {target} was "
            f"reinstalled, fix the control machine's known_hosts for it, then {UP} "
            "(it records the new key on every node)"
        )
    if cause == "denied":
        if dst and not dst.get("authorized"):
            return (
                f"{target}'s ~/.ssh/authorized_keys lacks the cluster key "
                f"(the line ending ` mpicluster:{cluster}`): {UP}"
            )
        if dst:
            return (
                f"{target} holds the cluster key but refuses {source}: check the from= list "
                f"of its ` mpicluster:{cluster}` line, sshd's AllowUsers and the modes of "
                f"~/.ssh on {target}; {UP} rewrites the key line"
            )
        return (
            f"{target}'s ~/.ssh/authorized_keys must hold the cluster key (the line ending "
            f"` mpicluster:{cluster}`): {UP}"
        )
    if cause == "resolve":
        return f"{source} cannot resolve {target}: {UP} (writes /etc/hosts entries) or fix DNS"
    if cause in ("timeout", "unreachable"):
        return (
            f"check the network and firewalls between {source} and {target} (port 22), "
            f"and that {target}'s sshd answers"
        )
    if cause == "refused":
        return f"start sshd on {target}"
    if cause == "closed":
        return (
            f"{target}'s sshd dropped the connection: raise MaxStartups in its sshd_config, "
            "or check its sshd logs"
        )
    if cause == "command":
        return f"check {target}'s login shell for the MPI user (it must run `true`)"
    return f"run `ssh -v {target} true` on {source} to see why"
