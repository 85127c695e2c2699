"""The users check (the inventory's `users:`): each user's account is on every node with
one uid and one gid (the inventory's uid where it gives one), her home is hers alone
(owned by her; others get nothing and no one else writes: 0700, at most 0750 with her own
group) and her shell runs commands.

The probe reads them as the MPI user: her passwd entry (`getpwnam`) and a stat of her
home folder itself, which anyone may make. What is inside a 0700 home (her ~/.ssh, her
keys) is hers alone: doctor does not read it. Her mesh is proven by use instead: one
launch as her (the MPI user's `sudo -n -u USER ssh HEAD mpirun ...`, judged in
user_mesh.py), one rank on every node.

Where the ids differ, the reference is the inventory's uid, else what most nodes have;
with no such majority every value is listed. `up` makes a missing account; it refuses
accounts whose ids differ and changes none of them, so their fix is by hand.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from mpicluster.doctor.checks import user_mesh
from mpicluster.doctor.checks.common import UP
from mpicluster.doctor.model import CheckReport, Result, failed, passed, warned
from mpicluster.doctor.runner import Gathered

NAME = "users"
TITLE = "Users (the same account on every node, each home its user's alone, a shell that logs in)"
#: Shells that run no command: an account with one cannot log in.
NO_LOGIN = ("nologin", "false")
REFUSED = "`mpicluster up` refuses accounts whose ids differ and changes none"
#: What mpicluster gives the users it makes.
SHELL = "/bin/bash"


def check(g: Gathered) -> CheckReport:
    report = CheckReport(NAME, TITLE)
    if not g.plan.users:
        report.results.append(passed(None, "the inventory lists no users: nothing to check"))
        return report
    # a node whose probe was not asked for the users has nothing to judge them by
    facts = {node: g.facts(node) or {} for node in g.probed}
    read = {node: found for node, found in facts.items() if found.get("users") is not None}
    report.not_checked = [node for node in g.names if node not in read]
    wanted = {user.name: user.uid for user in g.plan.users}
    report.results += judge(wanted, read)
    report.results += user_mesh.judge(g.users_launched, _addresses(g))
    report.details = [launch.to_dict() for launch in g.users_launched.values()] or None
    return report


def _addresses(g: Gathered) -> dict[str, str]:
    """Each node's addresses (the inventory's, the one MPI traffic goes to) -> its name."""
    found = {}
    for node in g.plan.nodes:
        for address in (node.address, g.mpi_address(node.name)):
            if address:
                found[address] = node.name
    return found


def judge(wanted: Mapping[str, int | None], facts: Mapping[str, dict]) -> list[Result]:
    """Each user's findings, then a pass per node naming the users found alike there.

    `wanted`: each user's name and the inventory's uid (None: any); `facts`: each node's
    probe facts (their `users`: name -> the account, None where there is none)."""
    results: list[Result] = []
    unlike: set[str] = set()  # users not the same on every node
    troubled: dict[str, set[str]] = {node: set() for node in facts}
    for name, uid in wanted.items():
        accounts = {node: (found.get("users") or {}).get(name) for node, found in facts.items()}
        everywhere = _everywhere(name, uid, accounts, facts)
        if everywhere:
            unlike.add(name)
        results += everywhere
        for node, account in accounts.items():
            if account:
                own = _home(node, name, account) + _shell(node, name, account)
                if own:
                    troubled[node].add(name)
                results += own
    for node in facts:
        seen = facts[node].get("users") or {}
        alike = [
            name
            for name in wanted
            if name not in unlike and name not in troubled[node] and seen.get(name)
        ]
        if alike:
            results.append(passed(node, _alike(alike, seen)))
    return results


def _everywhere(
    name: str, uid: int | None, accounts: Mapping[str, dict | None], facts: Mapping[str, dict]
) -> list[Result]:
    """Her account on every node, with one uid and one gid."""
    present = {node: account for node, account in accounts.items() if account}
    if not present:
        return [
            failed(
                None,
                f"{name} has no account on any node",
                f"{UP}: it makes the account, the same uid and gid on every node",
            )
        ]
    results = [
        failed(
            node,
            f"{name} has no account on {node}",
            f"{UP}: it makes it with the uid and gid {name} has on the other nodes",
        )
        for node in accounts
        if node not in present
    ]
    uids = {node: account["uid"] for node, account in present.items()}
    gids = {node: account["gid"] for node, account in present.items()}
    return results + _ids(name, "uid", uids, uid, facts) + _ids(name, "gid", gids, None, facts)


def _is(name: str, kind: str, value: int) -> str:
    return f"{name} is uid {value}" if kind == "uid" else f"{name}'s group is gid {value}"


def _odd_ones(
    name: str,
    kind: str,
    values: dict[str, int],
    right: int,
    where: str,
    facts: Mapping[str, dict],
) -> list[Result]:
    """A failure on each node whose id is not `right` (which `where` is said to hold)."""
    return [
        failed(
            node,
            f"{_is(name, kind, value)} on {node}, {right} {where}",
            _change(node, name, kind, value, right, facts[node]),
        )
        for node, value in values.items()
        if value != right
    ]


def _ids(
    name: str, kind: str, values: dict[str, int], wanted: int | None, facts: Mapping[str, dict]
) -> list[Result]:
    """One finding per node whose id is not the reference: the inventory's, else what
    most nodes have; one for the cluster where neither says which is right."""
    if wanted is not None:
        odd = {node: value for node, value in values.items() if value != wanted}
        if odd and len(odd) == len(values) and len(set(odd.values())) == 1:
            held = next(iter(odd.values()))
            return [
                failed(
                    None,
                    f"{_is(name, kind, held)} on every node; the inventory says uid {wanted}",
                    f"give {name} `uid: {held}` in the inventory (the account's), or no uid",
                )
            ]
        also = "elsewhere and in the inventory" if len(odd) < len(values) else "in the inventory"
        return _odd_ones(name, kind, values, wanted, also, facts)
    ranked = Counter(values.values()).most_common()
    if len(ranked) == 1:
        return []
    (best, top), (_, second) = ranked[0], ranked[1]
    if top > second:
        return _odd_ones(name, kind, values, best, "elsewhere", facts)
    groups: dict[int, list[str]] = {}
    for node, value in values.items():
        groups.setdefault(value, []).append(node)
    shown = "; ".join(f"{value} on {', '.join(nodes)}" for value, nodes in groups.items())
    command = _command(name, kind, f"NEW_{kind.upper()}")
    return [
        failed(
            None,
            f"{name}'s {kind} differs between nodes, no value on most of them: {shown}",
            f"pick one {kind} and give it {name} on the other nodes, as root: `{command}`; "
            + REFUSED,
        )
    ]


def _command(name: str, kind: str, value: int | str) -> str:
    if kind == "uid":
        return f"usermod -u {value} {name}"
    return f"groupmod -g {value} $(id -gn {name})"


def _change(node: str, name: str, kind: str, have: int, want: int, facts: dict) -> str:
    """How to give her `want` on `node` (and what else holds it there, read from the
    node's /etc/passwd and /etc/group)."""
    table = "users" if kind == "uid" else "groups"
    held = {
        (ids[0] if kind == "uid" else ids): holder
        for holder, ids in ((facts.get("accounts") or {}).get(table) or {}).items()
    }.get(want)
    if kind == "uid":  # usermod refuses while she has a process; it moves her home's files
        fix = (
            f"on {node}, as root, with none of {name}'s processes running: "
            f"`{_command(name, kind, want)}` (the home's files follow; {name}'s files "
            f"elsewhere keep uid {have}: `find / -xdev -uid {have}` lists them); {REFUSED}"
        )
    else:  # groupmod moves no file
        fix = (
            f"on {node}, as root: `{_command(name, kind, want)}` (files keep gid {have}: "
            f"`find / -xdev -gid {have}` lists them, `chgrp` gives them the new one); {REFUSED}"
        )
    if held is not None and held != name:
        what = "the account" if kind == "uid" else "the group"
        fix = f"{kind} {want} is {what} {held!r}'s on {node}: move it first; then {fix}"
    return fix


def _home(node: str, name: str, account: dict) -> list[Result]:
    """Her home hers alone: a folder, owned by her, nothing for others, no one else writes."""
    home = account["home"]
    seen = account.get("home_stat")
    if seen is None:
        if account.get("home_missing"):
            return [
                failed(
                    node,
                    f"{name}'s home {home} does not exist on {node}",
                    f"on {node}, as root: `install -d -m 0700 -o {name} -g $(id -gn {name}) "
                    f"{home}`",
                )
            ]
        return [
            warned(
                node,
                f"{name}'s home {home} on {node}: the MPI user cannot look at it "
                f"({account.get('home_error') or 'not read'})",
                f"on {node}, as root: `ls -ld {home}` (it should be {name}'s, mode 0700)",
            )
        ]
    if not seen["dir"]:
        return [
            failed(
                node,
                f"{name}'s home {home} on {node} is not a folder",
                f"on {node}, as root: make {home} a folder of {name}'s, mode 0700",
            )
        ]
    results = []
    if seen["uid"] != account["uid"]:
        owner = seen.get("owner") or f"uid {seen['uid']}"
        results.append(
            failed(
                node,
                f"{name}'s home {home} on {node} is {owner}'s, not {name}'s",
                f"on {node}, as root: `chown {name}: {home}`",
            )
        )
    mode = seen["mode"]
    opened = _opened(mode, seen["gid"] == account["gid"])
    if opened:
        results.append(
            failed(
                node,
                f"{name}'s home {home} on {node} is mode {mode:04o}: {', '.join(opened)} "
                "(mpicluster keeps homes 0700, at most 0750 with the user's own group)",
                f"on {node}, as root: `chmod 0700 {home}`",
            )
        )
    elif mode & 0o001:
        results.append(
            warned(
                node,
                f"{name}'s home {home} on {node} is mode {mode:04o}: others cannot list it, "
                "but may open a file in it whose name they know",
                f"on {node}, as root: `chmod 0700 {home}`",
            )
        )
    return results


def _opened(mode: int, her_group: bool) -> list[str]:
    """Who else may read or write a home of this mode."""
    opened = []
    if mode & 0o004:
        opened.append("others can read it")
    if mode & 0o002:
        opened.append("others can write in it")
    if mode & 0o020:
        opened.append("its group can write in it")
    elif mode & 0o040 and not her_group:
        opened.append("a group not the user's own can read it")
    return opened


def _shell(node: str, name: str, account: dict) -> list[Result]:
    shell = account.get("shell") or "/bin/sh"
    fix = f"on {node}, as root: `chsh -s {SHELL} {name}` (the shell mpicluster gives its users)"
    if shell.rsplit("/", 1)[-1] in NO_LOGIN:
        return [failed(node, f"{name}'s shell on {node} is {shell}: {name} cannot log in", fix)]
    if not account.get("shell_runs"):
        return [
            failed(
                node,
                f"{name}'s shell {shell} is no program on {node}: {name} cannot log in",
                fix,
            )
        ]
    return []


def _alike(names: list[str], accounts: Mapping[str, dict]) -> str:
    shown = ", ".join(
        f"{name} (uid {accounts[name]['uid']}, gid {accounts[name]['gid']}, "
        f"home {accounts[name]['home_stat']['mode']:04o})"
        for name in names
    )
    return (
        f"{shown}: the same on every node, each home its user's alone, a shell that logs in "
        "(what is inside the homes is theirs alone: not read)"
    )
