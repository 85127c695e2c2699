"""Check 2: from every node to every node, `ssh -o BatchMode=yes` with strict host key
checking works, on a fresh connection (no ControlMaster), as mpirun's launch needs."""

from __future__ import annotations

from mpicluster.cluster.validators import is_ip
from mpicluster.doctor import refusals
from mpicluster.doctor.checks.common import UP, plural
from mpicluster.doctor.model import CheckReport, Result, failed, passed, warned
from mpicluster.doctor.runner import Gathered
from mpicluster.nodes import pairs as pair_plan
from mpicluster.nodes import ssh_failures

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
    report.results.extend(_failed_pair(g, source, target) for source, target in rest)
    report.results.extend(_predicted(g, blamed))
    for source in g.probed:
        if source in g.exchange_errors:
            report.results.append(
                failed(
                    source,
                    f"the probe on {source} stopped during the mesh: {g.exchange_errors[source]}",
                    f"rerun doctor; if it repeats, look at {source}'s load and sshd logs",
                )
            )
        elif blamed.get(source) not in ("out", "both"):
            report.results.extend(_from_source(g, source, tried, failures))
    silent = sorted(
        n for n in g.names if not g.sessions[n].connected and g.sessions[n].error_kind == "network"
    )
    for node in silent:
        if node not in report.not_checked:
            report.not_checked.append(node)
    return report


def _failed_pair(g: Gathered, source: str, target: str) -> Result:
    """A failed login over one pair that no node's blame covers."""
    item = g.ssh_pairs[(source, target)]
    cause = ssh_failures.classify(item["stderr"], item["rc"])
    seen, fix = _explained(g, cause, source, target, "in", item=item)
    return failed(
        source,
        f"ssh {source} -> {target}: {_why(cause, target)} ({_evidence(item)}){seen}",
        fix,
        peer=target,
    )


def _from_source(g: Gathered, source: str, tried, failures) -> list[Result]:
    """What the logins from `source` came to: pairs left untried within the time budget,
    and a pass for the ones that worked (how many, retried ones, a sampled mesh)."""
    results: list[Result] = []
    mine = [(s, t) for s, t in tried if s == source]
    skipped = sorted(t for s, t in g.not_run if s == source)
    if skipped:
        results.append(
            warned(
                source,
                f"{plural(len(skipped), 'pair')} from {source} not tried within doctor's "
                f"time budget ({', '.join(skipped[:5])})",
                "rerun with `--check mesh`, or a larger --timeout",
            )
        )
    good = [t for s, t in mine if (s, t) not in failures]
    if not mine or not good:
        return results
    others = sorted({t for s, t in mine if (s, t) in failures})
    text = f"ssh to {len(good)} of {plural(len(mine), 'peer')} works"
    second = [t for t in good if g.ssh_pairs[(source, t)].get("attempts") == 2]
    if second:
        text += f" ({', '.join(second[:3])} on a second try: a lossy or busy network?)"
    if others:
        text += f" (failures into {', '.join(others)} are reported there)"
    if g.sampled:
        text += (
            f"; logins on a ring and a sample of {pair_plan.PER_NODE} peers per node "
            f"(seed {g.seed}, --all-pairs for every pair), every other pair judged from "
            "both nodes' facts"
        )
    results.append(passed(source, text))
    return results


def _predicted(g: Gathered, blamed: dict[str, str]) -> list[Result]:
    """The pairs the mesh did not log in over (a sampled mesh), judged from both nodes'
    facts: the key files, known_hosts against the target's own host keys, the target's
    key line, from= list, sshd settings and StrictModes modes. Pairs sharing a cause
    (a target's sshd, its modes) are reported once."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for source in g.probed:
        if source in g.exchange_errors or blamed.get(source) in ("out", "both"):
            continue
        addresses = _addresses(g, source)
        for target in g.probed:
            if target == source or (source, target) in g.ssh_pairs or not addresses:
                continue
            if blamed.get(target) in ("in", "both"):
                continue
            found = refusals.predict(
                g.facts(source) or {},
                g.facts(target) or {},
                source,
                target,
                cluster=g.plan.cluster,
                user=g.sessions[target].ssh.user,
                source_addresses=addresses,
                target_address=_address(g, target),
            )
            if found is not None:
                groups.setdefault((target, *found), []).append(source)
    results = []
    for (target, evidence, fix), sources in sorted(groups.items()):
        how = "judged from both nodes' facts: not among the pairs doctor logged in over"
        if len(sources) == 1:
            results.append(
                failed(sources[0], f"ssh {sources[0]} -> {target} ({how}): {evidence}", fix, target)
            )
        else:
            shown = ", ".join(sources[:5]) + (", ..." if len(sources) > 5 else "")
            results.append(
                failed(
                    target,
                    f"ssh into {target} from {plural(len(sources), 'node')} ({shown}; {how}): "
                    f"{evidence}",
                    fix,
                )
            )
    return results


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
    seen, fix = _explained(g, cause, source, target, side, both=direction == "both", item=sample)
    why = _why(cause, target, source if side == "out" else None)
    return failed(node, f"{what}: {why} ({_evidence(sample)}){seen}", fix)


def _explained(
    g: Gathered, cause: str, source: str, target: str, side: str, both=False, item=None
) -> tuple[str, str]:
    """("; what was seen on the nodes" or "", the fix)."""
    seen = _seen_cause(g, cause, source, target, item or {})
    if seen is not None:
        return f"; {seen[0]}", seen[1]
    return "", _usual_fix(g, cause, source, target, side, both)


def _seen_cause(
    g: Gathered, cause: str, source: str, target: str, item: dict
) -> refusals.Finding | None:
    """The cause of a failed login as read on its two ends, when one was seen."""
    src_facts = g.facts(source) or {}
    dst_facts = g.facts(target) or {}
    user = g.sessions[target].ssh.user
    if cause == "key_mode":
        return refusals.key_mode(src_facts, source)
    if cause == "nologin":
        return refusals.nologin(target, user)
    has_block = ((src_facts.get("ssh") or {}).get("config_block")) is True
    if has_block and cause in ("denied", "refused", "resolve", "timeout", "unreachable", "other"):
        client = refusals.client_config(item, src_facts, source, target, _expected(g, target))
        if client is not None:
            return client
    if cause == "host_key_unknown":
        return refusals.known_hosts_lacks(src_facts, source, target, _aliases(g, target))
    if cause == "host_key_changed":
        offered = ssh_failures.offered_fingerprint(item.get("stderr", ""))
        # the control machine verified the target's identity and the target's own key
        # files hold the key it offered: the source's copy is the stale one
        own = (dst_facts.get("access") or {}).get("host_keys") or []
        verified = g.sessions[target].connected
        return refusals.stale_host_key(offered, own if verified else [], source, target)
    addresses = _addresses(g, source)
    if cause == "denied" and dst_facts and addresses:
        return (
            refusals.from_list_refuses(dst_facts, target, g.plan.cluster, source, addresses)
            or refusals.sshd_refuses(dst_facts, target, user, source, addresses)
            or refusals.strict_modes(dst_facts, target)
        )
    refused_too = "authentication failed" in (g.sessions[target].error or "")
    if cause == "denied" and not dst_facts and refused_too:
        return (
            f"{target} refuses the control machine's key too",
            f"{target}'s sshd refuses the cluster key and the control machine's key "
            "alike: it ignores the user's ~/.ssh/authorized_keys as a whole (StrictModes: "
            "~, ~/.ssh or authorized_keys writable by group or others; AllowUsers; a "
            "locked account), see the ssh check's finding for how to tell which",
        )
    return None


def _address(g: Gathered, name: str) -> str | None:
    node = g.plan.node(name)
    return node.address if node.address and is_ip(node.address) else g.mpi_address(name)


def _addresses(g: Gathered, name: str) -> list[str]:
    """Where `name`'s connections may come from: its cluster address, then every other
    address it has (a login's source address is the one routing to the target)."""
    found = [a for a in [_address(g, name)] if a]
    for info in ((g.facts(name) or {}).get("interfaces") or {}).values():
        for cidr in info.get("addresses", []):
            address = cidr.split("/")[0]
            if address not in found and not address.startswith("127."):
                found.append(address)
    return found


def _aliases(g: Gathered, name: str) -> list[str]:
    address = _address(g, name)
    return [address] if address else []


def _expected(g: Gathered, target: str) -> dict[str, str]:
    ssh = g.sessions[target].ssh
    address = _address(g, target)
    return {"user": ssh.user, "port": str(ssh.port), **({"hostname": address} if address else {})}


def _usual_fix(g: Gathered, cause: str, source: str, target: str, side: str, both=False) -> str:
    if (both or side == "out") and cause in ("timeout", "unreachable"):
        return (
            f"{target if side == 'in' else source} cannot exchange TCP traffic with its peers: "
            "check its firewall (iptables -S; a DROP on INPUT also eats the replies to its own "
            "connections) and its network link"
        )
    setup = _source_setup_fix(g, source)
    if setup is not None:
        return setup
    if cause in ("host_key_changed", "host_key_unknown"):
        return _host_key_fix(g, cause, source, target)
    if cause == "denied":
        return _denied_fix(g, source, target)
    return _connection_fix(g, cause, source, target)


def _source_setup_fix(g: Gathered, source: str) -> str | None:
    """What `up` sets up on the source and is missing there: the key, the config block."""
    cluster = g.plan.cluster
    src = (g.facts(source) or {}).get("ssh") or {}
    if src and not src.get("key"):
        return f"{source} has no cluster key ~/.ssh/mpicluster_{cluster}: {UP}"
    if src and not src.get("config_block"):
        return f"{source}'s ~/.ssh/config has no `mpicluster {cluster}` block: {UP}"
    return None


def _host_key_fix(g: Gathered, cause: str, source: str, target: str) -> str:
    """The target's host key unknown to the source, or not the one recorded."""
    src = (g.facts(source) or {}).get("ssh") or {}
    own_keys = ((g.facts(target) or {}).get("access") or {}).get("host_keys")
    if cause == "host_key_changed" and own_keys and g.sessions[target].connected:
        return (
            f"the key offered at {target}'s address to {source} is none of {target}'s own "
            f"host keys (read on {target}): {source} reaches another machine there (an "
            f"address conflict, or a name entry on {source} pointing elsewhere: see the names "
            f"check), or something in between; `ip neigh` on {source} shows which MAC answers"
        )
    if src and not src.get("known_hosts_block"):
        return f"{source}'s /etc/ssh/ssh_known_hosts has no mpicluster block: {UP}"
    return (
        f"{target}'s host key changed since `mpicluster up` recorded it: if {target} was "
        f"reinstalled, fix the control machine's known_hosts for it, then {UP} "
        "(it records the new key on every node)"
    )


def _denied_fix(g: Gathered, source: str, target: str) -> str:
    """The target refused the cluster key: its authorized_keys, or a reason sshd's log tells."""
    cluster = g.plan.cluster
    dst = (g.facts(target) or {}).get("ssh") or {}
    if dst and not dst.get("authorized"):
        return (
            f"{target}'s ~/.ssh/authorized_keys lacks the cluster key "
            f"(the line ending ` mpicluster:{cluster}`): {UP}"
        )
    if dst:
        return (
            f"{target} holds the cluster key and doctor saw none of the reasons it can "
            f"read for refusing {source} (the key line's from= list, sshd's AllowUsers, "
            f"DenyUsers and groups, the modes StrictModes judges): sshd's log on {target} "
            "(journalctl -u ssh, /var/log/auth.log) says why"
        )
    return (
        f"doctor could not read {target} (see the ssh check), so two causes fit: its "
        f"~/.ssh/authorized_keys lacks the cluster key's line (` mpicluster:{cluster}`; "
        f"{UP} restores it), or its sshd ignores the file (StrictModes, AllowUsers); "
        f"sshd's log on {target} (journalctl -u ssh, /var/log/auth.log) tells which"
    )


def _connection_fix(g: Gathered, cause: str, source: str, target: str) -> str:
    """The connection itself failed (name, network, port, sshd) or the login's command did."""
    if cause == "resolve":
        return f"{source} cannot resolve {target}: {UP} (writes /etc/hosts entries) or fix DNS"
    if cause in ("timeout", "unreachable"):
        return (
            f"check the network and firewalls between {source} and {target} (port 22), "
            f"and that {target}'s sshd answers"
        )
    if cause == "refused":
        return (
            f"nothing accepts {source}'s connections on {target}'s port 22: sshd is not "
            f"running there, or a firewall rejects the port; `ss -ltn` on {target} shows "
            "whether sshd listens"
        )
    if cause == "closed":
        return _closed(g, source, target)
    if cause == "command":
        return f"check {target}'s login shell for the MPI user (it must run `true`)"
    return f"run `ssh -v {target} true` on {source} to see why"


def _closed(g: Gathered, source: str, target: str) -> str:
    """sshd dropped the connection before the login, on the second try too."""
    settings = refusals.sshd_settings_of(g.facts(target) or {})
    startups = settings.get("maxstartups", [])
    limit = (
        f"MaxStartups {startups[0][0]} ({startups[0][1]})"
        if startups
        else "MaxStartups at its default 10:30:100"
    )
    return (
        f"{target}'s sshd dropped {source}'s connection before the login, twice: two causes "
        f"fit, {limit} dropping a burst of connections (mpirun's launch opens one per "
        f"node), or a rule of /etc/hosts.deny or a firewall limit on new connections; sshd's "
        f"log on {target} says `drop connection` for the first"
    )
