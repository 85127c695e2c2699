"""doctor's users check (issue 52): the facts as the probe returns them, judged (pure),
and the probe's reader run for real on this machine's own accounts."""

from __future__ import annotations

import copy
import os
import pwd
from pathlib import Path

import pytest

from mpicluster.doctor.checks import users as check
from mpicluster.doctor.model import Status
from mpicluster.doctor.runner import Options, _spec
from tests.unit.ssh_keys import ED25519, ED25519_BOB
from tests.unit.test_doctor_checks import NODES, gathered, inventory_text
from tests.unit.test_doctor_probe import read, spec, start

WANTED = {"alice": None, "bob": 2001}


def account(uid: int, gid: int | None = None, **changes) -> dict:
    """One user's account as the probe reads it (probe.user_accounts)."""
    name = {2000: "alice", 2001: "bob"}.get(uid, "alice")
    found = {
        "uid": uid,
        "gid": uid if gid is None else gid,
        "home": f"/home/{name}",
        "shell": "/bin/bash",
        "shell_runs": True,
        "home_stat": {"dir": True, "mode": 0o700, "uid": uid, "gid": uid, "owner": name},
        "home_missing": False,
        "home_error": None,
    }
    found.update(changes)
    return found


def healthy() -> dict[str, dict]:
    """Each node's facts: alice (uid 2000) and bob (uid 2001, the inventory's) alike."""
    return {
        node: {
            "users": {"alice": account(2000), "bob": account(2001)},
            "accounts": {"users": {"alice": [2000, 2000], "bob": [2001, 2001]}, "groups": {}},
        }
        for node in NODES
    }


def bad(results) -> list[tuple[str | None, str, str, str | None]]:
    return [(r.node, str(r.status), r.evidence, r.fix) for r in results if r.status != Status.PASS]


def test_users_alike_on_every_node_pass_with_a_line_per_node():
    results = check.judge(WANTED, healthy())
    assert bad(results) == []
    assert [r.node for r in results] == NODES
    line = results[0].evidence
    assert line.startswith("alice (uid 2000, gid 2000, home 0700), bob (uid 2001, gid 2001,")
    assert "the same on every node" in line and "not read" in line


def test_a_user_missing_on_a_node_is_named_with_up_as_the_fix():
    facts = healthy()
    facts["node3"]["users"]["alice"] = None
    ((node, status, evidence, fix),) = bad(check.judge(WANTED, facts))
    assert (node, status, evidence) == ("node3", "fail", "alice has no account on node3")
    assert "mpicluster up" in fix
    # alice is not alike everywhere: no node's pass line lists her; bob's still pass
    passes = [r.evidence for r in check.judge(WANTED, facts) if r.status == Status.PASS]
    assert len(passes) == 3 and all(p.startswith("bob (uid 2001") for p in passes)


def test_a_user_missing_everywhere_is_one_finding_for_the_cluster():
    facts = healthy()
    for node in NODES:
        facts[node]["users"]["alice"] = None
    ((node, status, evidence, _),) = bad(check.judge(WANTED, facts))
    assert (node, status, evidence) == (None, "fail", "alice has no account on any node")


def test_a_differing_uid_names_the_odd_node_against_the_majority():
    facts = healthy()
    facts["node3"]["users"]["alice"] = account(1002, gid=2000)
    ((node, status, evidence, fix),) = bad(check.judge(WANTED, facts))
    assert (node, status) == ("node3", "fail")
    assert evidence == "alice is uid 1002 on node3, 2000 elsewhere"
    assert "`usermod -u 2000 alice`" in fix and "find / -xdev -uid 1002" in fix
    assert "refuses" in fix  # up will not mend it: the fix is by hand


def test_a_differing_gid_and_a_uid_held_by_another_account_there():
    facts = healthy()
    facts["node2"]["users"]["alice"] = account(2000, gid=2005)
    facts["node2"]["accounts"]["groups"]["staff"] = 2000
    ((node, _, evidence, fix),) = bad(check.judge(WANTED, facts))
    assert (node, evidence) == ("node2", "alice's group is gid 2005 on node2, 2000 elsewhere")
    assert fix.startswith("gid 2000 is the group 'staff''s on node2: move it first")
    assert "`groupmod -g 2000 $(id -gn alice)`" in fix


def test_without_a_majority_every_value_is_listed():
    facts = {node: healthy()[node] for node in NODES[:2]}
    facts["node2"]["users"]["alice"] = account(1002, gid=2000)
    ((node, _, evidence, fix),) = bad(check.judge(WANTED, facts))
    assert node is None
    assert evidence == (
        "alice's uid differs between nodes, no value on most of them: 2000 on node1; 1002 on node2"
    )
    assert "usermod -u NEW_UID alice" in fix


def test_the_inventorys_uid_is_the_reference():
    facts = healthy()
    facts["node1"]["users"]["bob"] = account(1003, gid=2001)
    ((node, _, evidence, fix),) = bad(check.judge(WANTED, facts))
    assert (node, evidence) == (
        "node1",
        "bob is uid 1003 on node1, 2001 elsewhere and in the inventory",
    )
    assert "`usermod -u 2001 bob`" in fix
    # every node agrees on another uid than the inventory's: one finding, the inventory's fix
    for node in NODES:
        facts[node]["users"]["bob"] = account(3000, gid=2001)
    ((node, _, evidence, fix),) = bad(check.judge(WANTED, facts))
    assert (node, evidence) == (None, "bob is uid 3000 on every node; the inventory says uid 2001")
    assert fix.startswith("give bob `uid: 3000` in the inventory")


@pytest.mark.parametrize(
    ("mode", "status", "words"),
    [
        (0o755, "fail", "mode 0755: others can read it"),
        (0o770, "fail", "mode 0770: its group can write in it"),
        (0o703, "fail", "mode 0703: others can write in it"),
        (0o711, "warn", "mode 0711: others cannot list it, but may open a file"),
    ],
)
def test_a_home_open_to_others(mode, status, words):
    facts = healthy()
    facts["node2"]["users"]["alice"]["home_stat"]["mode"] = mode
    ((node, found, evidence, fix),) = bad(check.judge(WANTED, facts))
    assert (node, found) == ("node2", status)
    assert evidence.startswith("alice's home /home/alice on node2 is ") and words in evidence
    assert fix == "on node2, as root: `chmod 0700 /home/alice`"
    # she stays alike on the other nodes: their pass lines list her
    passes = {r.node: r.evidence for r in check.judge(WANTED, facts) if r.status == Status.PASS}
    assert passes["node1"].startswith("alice (") and passes["node2"].startswith("bob (")


def test_a_home_of_0750_with_her_own_group_passes_and_with_another_group_fails():
    facts = healthy()
    facts["node2"]["users"]["alice"]["home_stat"]["mode"] = 0o750
    assert bad(check.judge(WANTED, facts)) == []
    facts["node2"]["users"]["alice"]["home_stat"]["gid"] = 100
    ((_, _, evidence, _),) = bad(check.judge(WANTED, facts))
    assert "a group not the user's own can read it" in evidence


def test_a_home_not_hers_or_missing():
    facts = healthy()
    facts["node1"]["users"]["alice"]["home_stat"].update(uid=2001, owner="bob")
    facts["node3"]["users"]["alice"].update(
        home_stat=None, home_missing=True, home_error="No such file or directory"
    )
    found = bad(check.judge(WANTED, facts))
    assert [(n, e) for n, _, e, _ in found] == [
        ("node1", "alice's home /home/alice on node1 is bob's, not alice's"),
        ("node3", "alice's home /home/alice does not exist on node3"),
    ]
    assert found[0][3] == "on node1, as root: `chown alice: /home/alice`"
    assert "install -d -m 0700 -o alice" in found[1][3]


@pytest.mark.parametrize("shell", ["/usr/sbin/nologin", "/bin/false"])
def test_a_shell_that_refuses_logins_fails(shell):
    facts = healthy()
    facts["node2"]["users"]["alice"]["shell"] = shell
    ((node, status, evidence, fix),) = bad(check.judge(WANTED, facts))
    assert (node, status) == ("node2", "fail")
    assert evidence == f"alice's shell on node2 is {shell}: alice cannot log in"
    assert fix.startswith("on node2, as root: `chsh -s /bin/bash alice`")


def test_a_shell_that_is_not_there_fails():
    facts = healthy()
    facts["node1"]["users"]["bob"] |= {"shell": "/usr/bin/zsh", "shell_runs": False}
    ((node, _, evidence, _),) = bad(check.judge(WANTED, facts))
    assert (node, evidence) == (
        "node1",
        "bob's shell /usr/bin/zsh is no program on node1: bob cannot log in",
    )


def test_no_users_no_check_and_nothing_asked_of_the_nodes():
    g = gathered()
    assert not g.plan.users
    report = check.check(g)
    assert report.status == Status.PASS and report.not_checked == []
    assert [r.evidence for r in report.results] == [
        "the inventory lists no users: nothing to check"
    ]
    everything = Options(checks=("users", "disk"), timeout=10)
    assert _spec(g.plan, "node1", "t", 60, everything)["users"] == []


def test_the_check_asks_the_probe_for_the_inventorys_users_and_judges_its_answer():
    users = (
        "ssh: {user: mpi}\nusers:\n"
        f"  - {{name: alice, keys: ['{ED25519}']}}\n"
        f"  - {{name: bob, uid: 2001, keys: ['{ED25519_BOB}']}}\n"
    )
    g = gathered(inventory_text(users), tweak=lambda facts: _with(facts, healthy()))
    asked = _spec(g.plan, "node1", "t", 60, Options(checks=("users",), timeout=10))
    assert asked["users"] == ["alice", "bob"]
    assert _spec(g.plan, "node1", "t", 60, Options(checks=("disk",), timeout=10))["users"] == []
    report = check.check(g)
    assert report.status == Status.PASS, [r.evidence for r in report.results]
    assert [r.node for r in report.results] == NODES
    # a node whose probe did not read the users is not checked, not judged as missing them
    g.sessions["node2"].facts["users"] = None
    report = check.check(g)
    assert report.not_checked == ["node2"] and report.status == Status.PASS


def _with(facts: dict, extra: dict) -> None:
    for node, found in facts.items():
        found.update(copy.deepcopy(extra[node]))


def test_the_probe_reads_this_machines_own_accounts(monkeypatch):
    # the probe runs on nodes beside nodeinfo.py, which it imports as a top-level module
    from mpicluster import remote

    monkeypatch.syspath_prepend(str(remote.MODULE_UTILS))
    monkeypatch.syspath_prepend(str(remote.HERE))
    import probe

    me = pwd.getpwuid(os.getuid())
    found = probe.user_accounts(["root", me.pw_name, "no-such-user-of-mpicluster"])
    assert found["no-such-user-of-mpicluster"] is None
    root = found["root"]
    assert (root["uid"], root["gid"], root["home"]) == (0, 0, pwd.getpwnam("root").pw_dir)
    if root["home_stat"] is not None:  # a stat of the home itself, whatever its mode
        assert root["home_stat"]["uid"] == 0 and root["home_stat"]["owner"] == "root"
        assert root["home_stat"]["mode"] == Path(root["home"]).stat().st_mode & 0o7777
    mine = found[me.pw_name]
    assert (mine["uid"], mine["shell"]) == (me.pw_uid, me.pw_shell)
    assert mine["shell_runs"] is os.access(me.pw_shell or "/bin/sh", os.X_OK)
    if Path(me.pw_dir).is_dir():
        assert (
            mine["home_stat"]["dir"] is True
            and mine["home_stat"]["uid"] == Path(me.pw_dir).stat().st_uid
        )
    else:
        assert mine["home_stat"] is None and mine["home_error"]
    # what the judge makes of them: no account is a finding, never a crash
    results = check.judge({"no-such-user-of-mpicluster": None}, {"here": {"users": found}})
    assert [r.evidence for r in results] == [
        "no-such-user-of-mpicluster has no account on any node"
    ]


def test_the_real_probe_answers_with_the_accounts_the_spec_names():
    process = start(spec(users=["root", "no-such-user-of-mpicluster"], listen=False))
    try:
        facts = read(process)
        assert facts["users"]["root"]["uid"] == 0
        assert facts["users"]["no-such-user-of-mpicluster"] is None
        assert process.stdin is not None
        process.stdin.close()
        assert process.wait(timeout=10) == 0
    finally:
        process.kill()
    process = start(spec(listen=False))  # no users named: nothing read
    try:
        assert read(process)["users"] is None
    finally:
        process.kill()
