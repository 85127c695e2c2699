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
    key = ((facts.get("access") or {}).get("login") or {}).get("key") or {}
    if "mode" not in key or not int(key["mode"], 8) & 0o077:
        return None
    return (
        f"{key['path']} on {node} has mode {key['mode']}: ssh refuses a private key "
        "others can read (UNPROTECTED PRIVATE KEY FILE)",
        f"chmod 600 {key['path']} on {node}",
    )


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
    trust = src.get("ssh") or {}
    if trust.get("key") is False:
        return (
            f"{source} has no cluster key ~/.ssh/mpicluster_{cluster}",
            f"run `mpicluster up`: it installs the cluster key on {source}",
        )
    found = key_mode(src, source)
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
    theirs = dst.get("ssh") or {}
    if theirs.get("authorized") is False:
        return (
            f"{target}'s ~/.ssh/authorized_keys has no line ending ` mpicluster:{cluster}`",
            f"run `mpicluster up`: it writes the cluster key's line into {target}'s "
            "~/.ssh/authorized_keys",
        )
    mine, accepted = trust.get("key_fp"), theirs.get("authorized_fp")
    if mine and accepted and mine != accepted:
        return (
            f"{target}'s cluster key line holds {accepted}, {source}'s cluster key is {mine}",
            "the two nodes hold different cluster keys (one `up` of another inventory with "
            "the same cluster name?): `mpicluster up` with this inventory rewrites both",
        )
    return (
        from_list_refuses(dst, target, cluster, source, source_addresses)
        or sshd_refuses(dst, target, user, source, source_addresses)
        or strict_modes(dst, target)
    )
