"""The users' accounts, the same uid and gid on every node (mpicluster/up/accounts.py):
planned from the nodes' accounts before any change, refused naming node and account."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from mpicluster.up.accounts import FIRST_ID, Account, AccountProblems, plan_accounts


@dataclass(frozen=True)
class Want:
    name: str
    uid: int | None = None


def node(users=None, groups=None, directory=None) -> dict:
    base_users = {"root": [0, 0], "vagrant": [1000, 1000]}
    base_groups = {"root": 0, "vagrant": 1000, "video": 44}
    return {
        "accounts": {
            "users": {**base_users, **(users or {})},
            "groups": {**base_groups, **(groups or {})},
        },
        "directory_accounts": directory or {},
    }


def three(**odd) -> dict:
    nodes = {"node1": node(), "node2": node(), "node3": node()}
    nodes.update(odd)
    return nodes


def problems(users, facts, kept=None) -> list[str]:
    with pytest.raises(AccountProblems) as caught:
        plan_accounts(users, facts, kept)
    return caught.value.lines


def test_new_users_get_the_lowest_ids_free_everywhere_and_their_own_group():
    facts = three(node2=node(users={"x": [FIRST_ID, FIRST_ID]}, groups={"x": FIRST_ID}))
    alice, bob = plan_accounts([Want("alice"), Want("bob")], facts)
    everywhere = ("node1", "node2", "node3")
    assert alice == Account("alice", FIRST_ID + 1, FIRST_ID + 1, everywhere, everywhere)
    assert (bob.uid, bob.gid) == (FIRST_ID + 2, FIRST_ID + 2) and not alice.adopted


def test_the_inventorys_uid_and_an_earlier_runs_are_kept():
    (bob,) = plan_accounts([Want("bob", 2002)], three())
    assert (bob.uid, bob.gid) == (2002, 2002)
    (carol,) = plan_accounts([Want("carol")], three(), kept={"carol": {"uid": 2107}})
    assert carol.uid == 2107


def test_an_account_alike_everywhere_is_adopted_and_one_on_some_nodes_is_completed():
    same = {"alice": [1500, 1500]}
    facts = three(
        **{n: node(users=same, groups={"alice": 1500}) for n in ("node1", "node2", "node3")}
    )
    (alice,) = plan_accounts([Want("alice")], facts)
    assert alice.adopted and (alice.uid, alice.gid) == (1500, 1500)
    partly = three(node1=node(users=same, groups={"alice": 1500}))
    (alice,) = plan_accounts([Want("alice")], partly)
    assert alice.create_on == ("node2", "node3") and alice.uid == 1500


def test_ids_that_differ_between_nodes_are_refused_with_each_nodes_ids():
    facts = three(
        node1=node(users={"alice": [1001, 1001]}), node3=node(users={"alice": [1002, 1002]})
    )
    (said,) = problems([Want("alice")], facts)
    assert said == (
        "alice: the account differs between nodes (uid 1001 gid 1001 on node1; "
        "uid 1002 gid 1002 on node3): make it one"
    )


def test_an_id_held_by_another_account_or_group_anywhere_is_refused_naming_both():
    facts = three(node3=node(users={"mallory": [2002, 2002]}))
    (said,) = problems([Want("bob", 2002)], facts)
    assert said == "bob: uid 2002 is taken by the account 'mallory' on node3"
    grouped = three(node2=node(groups={"printers": 2002}))
    (said,) = problems([Want("bob", 2002)], grouped)
    assert said == "bob: gid 2002 is taken by the group 'printers' on node2"
    # on the nodes that lack the account, its ids must be free
    partly = three(
        node1=node(users={"alice": [1500, 1500]}), node2=node(users={"eve": [1500, 1500]})
    )
    (said,) = problems([Want("alice")], partly)
    assert said == "alice: uid 1500 is taken by the account 'eve' on node2"


def test_two_users_of_the_inventory_never_share_an_id():
    (said,) = problems([Want("alice", 2100), Want("bob", 2100)], three())
    assert said == "bob: uid 2100 is taken by the account 'alice' on another user of the inventory"


def test_an_inventory_uid_that_disagrees_with_the_account_is_refused():
    facts = three(**{n: node(users={"alice": [1500, 1500]}) for n in ("node1", "node2", "node3")})
    (said,) = problems([Want("alice", 1600)], facts)
    assert said == "alice: the inventory says uid 1600, node1 has uid 1500"


def test_a_directory_account_and_a_stray_group_are_refused():
    facts = three(node2=node(directory={"alice": 70001}))
    (said,) = problems([Want("alice")], facts)
    assert said.startswith(
        "alice: a directory account (uid 70001) on node2, not in its /etc/passwd"
    )
    grouped = three(node1=node(groups={"bob": 1777}))
    (said,) = problems([Want("bob", 2200)], grouped)
    assert said.startswith("bob: a group 'bob' (gid 1777) is on node1 already")


def test_every_problem_is_reported_at_once():
    facts = three(node3=node(users={"mallory": [2002, 2002]}, directory={"carol": 5}))
    said = problems([Want("bob", 2002), Want("carol"), Want("dave")], facts)
    assert [line.split(":")[0] for line in said] == ["bob", "carol"]


def test_the_nodes_it_made_an_account_on_are_kept_run_after_run():
    """The second run finds the account everywhere: it still knows where it made it (the
    record every node keeps), so its input and the record stay as they were."""
    import json

    from mpicluster.up.accounts import earlier, record

    first = three(node1=node(users={"alice": [1500, 1500]}, groups={"alice": 1500}))
    (made,) = plan_accounts([Want("alice")], first)
    assert made.made_on == ("node2", "node3")
    text = record([made])
    assert json.loads(text)["users"]["alice"] == {
        "uid": 1500,
        "gid": 1500,
        "made_on": ["node2", "node3"],
    }
    now = {
        n: node(users={"alice": [1500, 1500]}, groups={"alice": 1500})
        for n in ("node1", "node2", "node3")
    }
    for found in now.values():
        found["users_record"] = text
    (again,) = plan_accounts([Want("alice")], now, earlier(now))
    assert (again.create_on, again.made_on) == ((), ("node2", "node3"))
    assert record([again]) == text


def test_an_account_mpicluster_locked_is_its_own_again_without_the_record():
    # down kept bob's home on node1 (his account locked, its comment mpicluster's) and
    # took the record away; listed again, node1's account is one mpicluster made
    kept = node(users={"bob": [2345, 2345]}, groups={"bob": 2345})
    kept["accounts"]["locked"] = ["bob"]
    (bob,) = plan_accounts([Want("bob")], three(node1=kept))
    assert bob == Account("bob", 2345, 2345, ("node2", "node3"), ("node1", "node2", "node3"))
    # an account locked by someone else (no such comment) stays adopted
    other = node(users={"bob": [2345, 2345]}, groups={"bob": 2345})
    (bob,) = plan_accounts([Want("bob")], three(node1=other))
    assert bob.made_on == ("node2", "node3")


def test_a_user_taken_out_of_the_inventory_leaves_and_stays_in_the_record():
    """bob left: `up` retires him (his ids kept in the record: never someone else's)."""
    import json

    from mpicluster.up.accounts import UsersPlan, earlier, record

    facts = three()
    alice, bob = plan_accounts([Want("alice"), Want("bob", 2345)], facts)
    text = record([alice, bob])
    for found in facts.values():
        found["users_record"] = text
    kept = earlier(facts)
    now = UsersPlan(tuple(plan_accounts([Want("alice")], facts, kept)), kept)
    assert now.leaving == ["bob"]
    left = json.loads(now.record_text())["users"]["bob"]
    assert left == {"uid": 2345, "gid": 2345, "made_on": ["node1", "node2", "node3"], "left": True}
    assert UsersPlan().record_text() is None


def test_the_accounts_module_removes_only_its_own_block_and_knows_a_bare_home(tmp_path):
    import importlib.util

    from mpicluster import remote

    spec = importlib.util.spec_from_file_location(
        "mpicluster_accounts", remote.MODULES / "mpicluster_accounts.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = "mine 1\n# BEGIN mpicluster c\nours\n# END mpicluster c\nmine 2\n"
    assert module.without_block(text, "mpicluster c") == "mine 1\nmine 2\n"
    assert (
        module.without_block("# BEGIN mpicluster c\nours\n# END mpicluster c\n", "mpicluster c")
        == ""
    )
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    module.SKELETON = str(tmp_path / "skel")
    (tmp_path / "skel").mkdir()
    (tmp_path / "skel" / ".bashrc").write_text("x")
    (home / ".bashrc").write_text("x")
    assert module.only_skeleton(str(home))
    (home / "results.csv").write_text("1,2\n")
    assert not module.only_skeleton(str(home))
    (home / "results.csv").unlink()
    (home / ".ssh" / "id_ed25519").write_text("hers")
    assert not module.only_skeleton(str(home))
