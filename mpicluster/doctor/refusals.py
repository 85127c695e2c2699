"""Why a node's ssh refused a login, from what the probe read on the two ends.

Pure functions of the probe's facts (`access`, `ssh`) and the ssh client's answer:
each returns what was seen (evidence) and the fix for that cause alone, or None
when its cause is not there. The mesh check tries them in turn before it falls back
to saying what it could not tell.
"""

from __future__ import annotations

import ipaddress
from fnmatch import fnmatchcase

Finding = tuple[str, str]  # (what was seen, the fix)


def sshd_settings_of(facts: dict) -> dict[str, list[list[str]]]:
    """{keyword: [[value, "file:line"], ...]} of the node's sshd_config (probe facts)."""
    login = (facts.get("access") or {}).get("login") or {}
    return (login.get("sshd") or {}).get("settings") or {}


def _host_matches(pattern: str, address: str) -> bool:
    if "/" in pattern:
        try:
            return ipaddress.ip_address(address) in ipaddress.ip_network(pattern, strict=False)
        except ValueError:
            return False
    return fnmatchcase(address, pattern)


def _user_matches(pattern: str, user: str, address: str) -> bool:
    name, _, host = pattern.partition("@")
    return fnmatchcase(user, name) and (not host or _host_matches(host, address))


def sshd_refuses(
    facts: dict, node: str, user: str, source: str, addresses: list[str]
) -> Finding | None:
    """sshd_config on `node` (facts) refusing `user` logging in from `source`, whose
    connection comes from one of `addresses` (its cluster address first)."""
    address = addresses[0]
    settings = sshd_settings_of(facts)
    login = (facts.get("access") or {}).get("login") or {}
    groups = login.get("groups") or []
    how = f"{source} logs in as {user} from {address}"
    for value, where in settings.get("denyusers", []):
        hit = next((p for p in value.split() for a in addresses if _user_matches(p, user, a)), None)
        if hit:
            return (
                f"sshd on {node} denies `{hit}` (DenyUsers, {where}); {how}",
                f"remove {user} from DenyUsers at {where} on {node}, then reload sshd",
            )
    allowed = [(p, where) for value, where in settings.get("allowusers", []) for p in value.split()]
    if allowed and not any(_user_matches(p, user, a) for p, _ in allowed for a in addresses):
        patterns = " ".join(p for p, _ in allowed)
        where = allowed[0][1]
        return (
            f"sshd on {node} allows only `{patterns}` (AllowUsers, {where}); {how}",
            f"add `{user}@{address}` (or the cluster's subnet) to AllowUsers at {where} on "
            f"{node}, then reload sshd (systemctl reload ssh)",
        )
    for value, where in settings.get("denygroups", []):
        hit = next((g for g in groups for p in value.split() if fnmatchcase(g, p)), None)
        if hit:
            return (
                f"sshd on {node} denies group {hit} (DenyGroups, {where}), which {user} is in",
                f"remove {hit} from DenyGroups at {where} on {node}, then reload sshd",
            )
    allowed_groups = [
        (p, where) for value, where in settings.get("allowgroups", []) for p in value.split()
    ]
    if allowed_groups and not any(fnmatchcase(g, p) for g in groups for p, _ in allowed_groups):
        where = allowed_groups[0][1]
        return (
            f"sshd on {node} allows only groups `{' '.join(p for p, _ in allowed_groups)}` "
            f"(AllowGroups, {where}); {user} is in {', '.join(groups) or 'no group'}",
            f"add {user} to an allowed group, or the group to AllowGroups at {where} on {node}",
        )
    pubkey = settings.get("pubkeyauthentication", [])
    if pubkey and pubkey[0][0].lower() == "no":
        return (
            f"sshd on {node} has PubkeyAuthentication no ({pubkey[0][1]})",
            f"set PubkeyAuthentication yes at {pubkey[0][1]} on {node}, then reload sshd",
        )
    return None


def strict_modes(facts: dict, node: str) -> Finding | None:
    """A path sshd's StrictModes judges (home, ~/.ssh, authorized_keys) that it rejects."""
    settings = sshd_settings_of(facts)
    strict = settings.get("strictmodes", [])
    if strict and strict[0][0].lower() == "no":
        return None
    login = (facts.get("access") or {}).get("login") or {}
    uid = login.get("uid")
    for info in login.get("paths") or []:
        if "mode" not in info:
            continue
        mode = int(info["mode"], 8)
        if info["uid"] not in (0, uid):
            return (
                f"{info['path']} on {node} belongs to {info['owner']}, not {login.get('user')}: "
                "sshd's StrictModes ignores the keys behind it",
                f"chown {login.get('user')} {info['path']} on {node}",
            )
        if mode & 0o022:
            return (
                f"{info['path']} on {node} has mode {info['mode']} (writable by "
                f"{'group' if mode & 0o020 else 'others'}): sshd's StrictModes ignores the "
                "keys behind it",
                f"chmod go-w {info['path']} on {node}",
            )
    return None


def from_list_refuses(
    facts: dict, node: str, cluster: str, source: str, addresses: list[str]
) -> Finding | None:
    """The cluster key's line on `node` limits logins (from=) to addresses none of
    `source`'s (`addresses`, its cluster address first) is among."""
    allowed = ((facts.get("ssh") or {}).get("authorized_from")) or None
    patterns = [p for p in allowed or [] if not p.startswith("!")]
    if allowed is None or any(_host_matches(p, a) for p in patterns for a in addresses):
        return None
    address = addresses[0]
    return (
        f"the cluster key's line in {node}'s ~/.ssh/authorized_keys allows logins only "
        f"from={','.join(allowed)}; {source} connects from {address}",
        f"add {address} to the from= list of the line ending ` mpicluster:{cluster}` in "
        f"{node}'s ~/.ssh/authorized_keys (`mpicluster up` rewrites it with every node's "
        "address)",
    )


def client_config(
    item: dict, facts: dict, source: str, target: str, expected: dict[str, str]
) -> Finding | None:
    """`ssh -G target` on `source` (item["config"]) differing from what mpicluster's block
    sets, and the line of the client's config that sets the value used."""
    config = item.get("config") or {}
    lines = (facts.get("access") or {}).get("ssh_client") or []
    for key, label in (("user", "User"), ("port", "Port"), ("hostname", "HostName")):
        got = (config.get(key) or [None])[0]
        want = expected.get(key)
        if got is None or want is None or got == want:
            continue
        line = next(
            (
                x
                for x in lines
                if x.split(": ", 1)[-1].lower().replace("=", " ").split()[:2] == [key, got.lower()]
            ),
            None,
        )
        if line is None:  # nothing of the user's sets it: not an override
            continue
        where = line.split(": ", 1)[0]
        return (
            f"{source}'s ssh uses {label} {got} for {target} (`ssh -G {target}`), mpicluster's "
            f"block sets {label} {want}; set at {where}",
            f"{where} on {source} sets `{label} {got}` before mpicluster's block in "
            f"~/.ssh/config, and ssh keeps the first value it reads: limit that entry to the "
            f"hosts it is meant for, or move it below the `# END mpicluster` line",
        )
    return None


def key_mode(facts: dict, node: str) -> Finding | None:
    """The cluster key on `node` in a mode or an owner its user's ssh does not use."""
    login = (facts.get("access") or {}).get("login") or {}
    key = login.get("key") or {}
    if "mode" not in key:
        return None
    if login.get("uid") is not None and key["uid"] != login["uid"]:
        return (
            f"{key['path']} on {node} belongs to {key['owner']}, not {login.get('user')}: "
            f"ssh as {login.get('user')} cannot use a private key it does not own (mode 0600)",
            f"chown {login.get('user')} {key['path']} on {node}",
        )
    if not int(key["mode"], 8) & 0o077:
        return None
    return (
        f"{key['path']} on {node} has mode {key['mode']}: ssh refuses a private key "
        "others can read (UNPROTECTED PRIVATE KEY FILE)",
        f"chmod 600 {key['path']} on {node}",
    )


def no_key(facts: dict, node: str, cluster: str) -> Finding | None:
    """`node` has no cluster key to log in to its peers with."""
    if (facts.get("ssh") or {}).get("key") is not False:
        return None
    return (
        f"{node} has no cluster key ~/.ssh/mpicluster_{cluster}",
        f"run `mpicluster up`: it installs the cluster key on {node}",
    )


def not_authorized(facts: dict, node: str, cluster: str) -> Finding | None:
    """`node` does not accept the cluster key: no line of it in authorized_keys."""
    if (facts.get("ssh") or {}).get("authorized") is not False:
        return None
    return (
        f"{node}'s ~/.ssh/authorized_keys has no line ending ` mpicluster:{cluster}`",
        f"run `mpicluster up`: it writes the cluster key's line into {node}'s "
        "~/.ssh/authorized_keys",
    )


def other_key(src: dict, dst: dict, source: str, target: str) -> Finding | None:
    """`target` accepts another cluster key than the one `source` logs in with."""
    mine = (src.get("ssh") or {}).get("key_fp")
    accepted = (dst.get("ssh") or {}).get("authorized_fp")
    if not mine or not accepted or mine == accepted:
        return None
    return (
        f"{target}'s cluster key line holds {accepted}, {source}'s cluster key is {mine}",
        "the two nodes hold different cluster keys (one `up` of another inventory with "
        "the same cluster name?): `mpicluster up` with this inventory rewrites both",
    )


def nologin(node: str, user: str, shell: str = "nologin") -> Finding:
    return (
        f"{node}'s login shell for {user} is {shell}",
        f"`chsh -s /bin/bash {user}` on {node}: MPI's daemons start through it",
    )


def not_listening(facts: dict, node: str) -> Finding | None:
    """Nothing listens on `node`'s ssh port (what its peers' ssh connects to), as the
    node's own sockets say (the node's health check reads them: accessfacts.listening)."""
    sshd = (facts.get("access") or {}).get("sshd_listens") or {}
    if sshd.get("listening") is not False:
        return None
    port = sshd["port"]
    return (
        f"nothing listens on {node}'s ssh port {port} (no listening socket in "
        "/proc/net/tcp or tcp6): sshd is not running, or listens on another port",
        f"start sshd on {node} (`systemctl start ssh`), listening on port {port}, the port "
        f"the inventory gives for {node}: its peers' ssh, and so mpirun's launch into it, "
        "are refused; `ss -ltn` there shows what listens",
    )


def own_files(facts: dict, node: str, cluster: str) -> list[Finding]:
    """What on `node` alone keeps the mesh's logins out of it or in: its cluster key
    (there, usable, the one it accepts) and the modes StrictModes judges; one finding
    per cause. What the node's own health check judges of the mesh."""
    found = [
        no_key(facts, node, cluster),
        key_mode(facts, node),
        not_authorized(facts, node, cluster),
        other_key(facts, facts, node, node),
        strict_modes(facts, node),
    ]
    return [finding for finding in found if finding is not None]


def known_hosts_lacks(facts: dict, node: str, target: str, addresses: list[str]) -> Finding | None:
    known = (facts.get("access") or {}).get("known_host_keys")
    if known is None:
        return None
    names = list(known)
    if any(n in names for n in [target, *addresses]):
        return None
    return (
        f"{node}'s /etc/ssh/ssh_known_hosts block has no key for {target} "
        f"(it lists {', '.join(names[:6]) or 'none'})",
        f"{node}'s /etc/ssh/ssh_known_hosts has no key for {target} in mpicluster's block: "
        "`mpicluster up` rewrites the block from every node's keys",
    )


def stale_host_key(offered: str | None, own: list[str], source: str, target: str) -> Finding | None:
    """`target` offered one of its own host keys (`own`, read on it once the control
    machine had verified its identity): `source`'s copy is stale, `target` did not
    change."""
    if not offered or offered not in own:
        return None
    return (
        f"{target} offers {offered}, its own host key (read on {target}, whose identity the "
        f"control machine verified); {source} holds another key for it",
        f"{target} did not change: {source}'s /etc/ssh/ssh_known_hosts holds a stale key for "
        f"it (a copy from before a reinstall, or written by other tooling): `mpicluster up` "
        "rewrites the block from the nodes' current keys",
    )


def predict(
    src: dict,
    dst: dict,
    source: str,
    target: str,
    *,
    cluster: str,
    user: str,
    source_addresses: list[str],
    target_address: str | None,
) -> Finding | None:
    """Whether `source`'s login to `target` can work, judged from both nodes' facts
    alone: what the mesh check reports for a pair it did not log in over. The same
    causes a real login's failure is explained by, each one read on a node."""
    found = no_key(src, source, cluster) or key_mode(src, source)
    if found:
        return found
    own = (dst.get("access") or {}).get("host_keys") or []
    known = (src.get("access") or {}).get("known_host_keys")
    if own and known is not None:
        aliases = [target, *([target_address] if target_address else [])]
        trusted = [fp for name in aliases for fp in known.get(name, [])]
        if not trusted:
            return known_hosts_lacks(src, source, target, aliases[1:])
        if not set(trusted) & set(own):
            return (
                f"{source}'s /etc/ssh/ssh_known_hosts holds {trusted[0]} for {target}, none of "
                f"{target}'s own host keys ({own[0]}, ...)",
                f"{source}'s copy of {target}'s host key is stale: `mpicluster up` rewrites "
                "the block from the nodes' current keys",
            )
    return (
        not_authorized(dst, target, cluster)
        or other_key(src, dst, source, target)
        or from_list_refuses(dst, target, cluster, source, source_addresses)
        or sshd_refuses(dst, target, user, source, source_addresses)
        or strict_modes(dst, target)
    )
