"""Which uid and gid each of the inventory's users gets, the same on every node, decided
from every node's accounts before any change (pure: the nodes' facts in, the accounts or
the refusals out).

- A name no node holds gets the inventory's uid, else the one it was given by an earlier
  `up` (a locked account keeps it), else the lowest id from FIRST_ID free as a uid and as
  a gid on every node; its own group, of the same number.
- A name every node holds with the same uid and gid is adopted as it is; a name some
  nodes hold gets those ids on the others, where they are free.
- Refused, naming the node and the account: a name whose ids differ between nodes, an
  id another account or group holds on any node, an inventory uid that disagrees with
  the account, a name only a directory (LDAP, SSSD) holds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from mpicluster.util.errors import UsageError

#: Where ids the tool picks start: clear of the first accounts an installer makes (1000,
#: 1001, ...), below Debian's dynamic range's end (59999) and nobody (65534).
FIRST_ID = 2000
LAST_ID = 59999


class WantedUser(Protocol):
    name: str
    uid: int | None


@dataclass(frozen=True)
class Account:
    name: str
    uid: int
    gid: int
    #: The nodes where `up` makes it now (the others hold it already, with these ids).
    create_on: tuple[str, ...]
    #: The nodes where mpicluster made it, now or in an earlier run: there `up` keeps it
    #: as it made it (and `down` may take it back); elsewhere it was adopted.
    made_on: tuple[str, ...] = ()

    @property
    def adopted(self) -> bool:
        return not self.create_on


class AccountProblems(UsageError):
    """Accounts that cannot be made the same on every node: one line each (nothing was
    changed on any node)."""

    def __init__(self, lines: list[str]):
        self.lines = lines
        super().__init__(
            "; ".join(lines) + "; nothing was changed on any node",
            hint="make the accounts agree on every node, or give the users other names or uids",
        )


def earlier(facts: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """What earlier runs did, from each node's record of the users `up` made: name ->
    {"uid": the uid it gave, "made_on": the nodes where it made the account}."""
    kept: dict[str, dict[str, Any]] = {}
    for found in facts.values():
        try:
            record = json.loads(found.get("users_record") or "{}")
        except ValueError:
            continue
        for name, made in (record.get("users") or {}).items():
            if not isinstance(made, dict) or not isinstance(made.get("uid"), int):
                continue
            gid = made.get("gid") if isinstance(made.get("gid"), int) else made["uid"]
            entry = kept.setdefault(name, {"uid": made["uid"], "gid": gid, "made_on": []})
            for node in made.get("made_on") or []:
                if isinstance(node, str) and node not in entry["made_on"]:
                    entry["made_on"].append(node)
    return kept


@dataclass(frozen=True)
class UsersPlan:
    """What `up` does with the cluster's users: their accounts, and those who left."""

    accounts: tuple[Account, ...] = ()
    #: What earlier runs did (earlier()).
    kept: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def leaving(self) -> list[str]:
        return leaving(self.kept, self.accounts)

    def record_text(self) -> str | None:
        """The record for every node; None when there is nobody to record."""
        if not self.accounts and not self.leaving:
            return None
        return record(list(self.accounts), self.kept)


def leaving(kept: Mapping[str, Mapping[str, Any]], users: Iterable[WantedUser]) -> list[str]:
    """The users an earlier run made that the inventory no longer lists: `up` retires
    them (locked, their keys gone, their homes kept)."""
    listed = {user.name for user in users}
    return sorted(name for name in kept if name not in listed)


def record(accounts: list[Account], kept: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """The record every node keeps (layout.USERS_RECORD): the users, and those who left
    (their accounts stay, locked, and their ids are never given to someone else)."""
    users: dict[str, dict[str, Any]] = {
        a.name: {"uid": a.uid, "gid": a.gid, "made_on": list(a.made_on)} for a in accounts
    }
    for name in leaving(kept or {}, accounts):
        was = (kept or {})[name]
        users[name] = {
            "uid": was["uid"],
            "gid": was.get("gid", was["uid"]),
            "made_on": list(was.get("made_on") or []),
            "left": True,
        }
    return json.dumps({"users": users}, indent=1, sort_keys=True) + "\n"


def plan_accounts(
    users: Iterable[WantedUser],
    facts: Mapping[str, Mapping[str, Any]],
    kept: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[Account]:
    """Every user's account, or AccountProblems naming each that cannot be made.
    `facts`: node -> its facts (`accounts`: {"users": {name: [uid, gid]}, "groups":
    {name: gid}}, `directory_accounts`: {name: uid}); `kept`: what earlier runs did
    (earlier())."""
    users = list(users)
    kept = dict(kept or {})
    problems: list[str] = []
    taken_uids = _held(facts, "users", lambda ids: ids[0])
    taken_gids = _held(facts, "groups", lambda gid: gid)
    planned: list[Account] = []
    wanted_names = {u.name for u in users}
    for user in users:
        found = _account(user, facts, kept, taken_uids, taken_gids, wanted_names, problems)
        if found is not None:
            planned.append(found)
            taken_uids.setdefault(found.uid, {})["(planned)"] = user.name
            taken_gids.setdefault(found.gid, {})["(planned)"] = user.name
    if problems:
        raise AccountProblems(problems)
    return planned


def _held(facts: Mapping[str, Mapping[str, Any]], table: str, id_of) -> dict[int, dict[str, str]]:
    """id -> {node: the name holding it there}."""
    held: dict[int, dict[str, str]] = {}
    for node, found in facts.items():
        for name, ids in ((found.get("accounts") or {}).get(table) or {}).items():
            held.setdefault(id_of(ids), {})[node] = name
    return held


def _account(
    user: WantedUser,
    facts: Mapping[str, Mapping[str, Any]],
    kept: Mapping[str, Mapping[str, Any]],
    taken_uids: dict[int, dict[str, str]],
    taken_gids: dict[int, dict[str, str]],
    wanted: set[str],
    problems: list[str],
) -> Account | None:
    name = user.name
    directory = {
        n: f["directory_accounts"][name]
        for n, f in facts.items()
        if name in (f.get("directory_accounts") or {})
    }
    if directory:
        node, uid = next(iter(directory.items()))
        problems.append(
            f"{name}: a directory account (uid {uid}) on {node}, not in its /etc/passwd: "
            "mpicluster does not take over directory accounts; give the user another name"
        )
        return None
    have = {
        n: tuple(f["accounts"]["users"][name])
        for n, f in facts.items()
        if name in ((f.get("accounts") or {}).get("users") or {})
    }
    if len(set(have.values())) > 1:
        shown = "; ".join(f"uid {u} gid {g} on {n}" for n, (u, g) in sorted(have.items()))
        problems.append(f"{name}: the account differs between nodes ({shown}): make it one")
        return None
    if have:
        uid, gid = next(iter(have.values()))
        if user.uid is not None and user.uid != uid:
            node = next(iter(have))
            problems.append(f"{name}: the inventory says uid {user.uid}, {node} has uid {uid}")
            return None
    else:
        uid = user.uid if user.uid is not None else (kept.get(name) or {}).get("uid")
        if uid is None:
            uid = _free_id(taken_uids, taken_gids)
        gid = uid
        groups = {
            n: f["accounts"]["groups"][name]
            for n, f in facts.items()
            if name in ((f.get("accounts") or {}).get("groups") or {})
        }
        odd = {n: g for n, g in groups.items() if g != gid}
        if odd:
            node, held = sorted(odd.items())[0]
            problems.append(
                f"{name}: a group {name!r} (gid {held}) is on {node} already, and the "
                f"account would get gid {gid}: remove the group, or give the user uid {held}"
            )
            return None
    missing = tuple(n for n in facts if n not in have)
    clash = _clash(name, uid, gid, missing, taken_uids, taken_gids, wanted)
    if clash:
        problems.append(clash)
        return None
    # made here: now, by an earlier run (the record), or locked by mpicluster (an account
    # `down` kept, whose record went with it)
    earlier_made = (kept.get(name) or {}).get("made_on", [])
    made = [
        n
        for n in facts
        if n in missing
        or n in earlier_made
        or name in ((facts[n].get("accounts") or {}).get("locked") or [])
    ]
    return Account(name, uid, gid, missing, tuple(made))


def _clash(
    name: str,
    uid: int,
    gid: int,
    nodes: tuple[str, ...],
    taken_uids: dict[int, dict[str, str]],
    taken_gids: dict[int, dict[str, str]],
    wanted: set[str],
) -> str | None:
    """Why `uid`/`gid` cannot be `name`'s on `nodes` (another account or group holds it)."""
    for number, taken, what in ((uid, taken_uids, "uid"), (gid, taken_gids, "gid")):
        for node, holder in sorted((taken.get(number) or {}).items()):
            if holder == name or (node != "(planned)" and node not in nodes):
                continue
            where = "another user of the inventory" if node == "(planned)" else node
            held = "the account" if what == "uid" else "the group"
            return f"{name}: {what} {number} is taken by {held} {holder!r} on {where}"
    return None


def _free_id(taken_uids: dict[int, Any], taken_gids: dict[int, Any]) -> int:
    for number in range(FIRST_ID, LAST_ID + 1):
        if number not in taken_uids and number not in taken_gids:
            return number
    raise AccountProblems([f"no id from {FIRST_ID} to {LAST_ID} is free on every node"])
