"""`up`'s fast path: the record of what `up` applied (taken on the node by the same code
the probe runs) and the judgement that skips the playbooks only when nothing changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mpicluster import remote
from mpicluster.cluster.inventory import parse_inventory
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.remote.plugins.module_utils import mpicluster_applied as record_code
from mpicluster.up import applied

BEGIN, END = "# BEGIN mine", "# END mine"
FOOTPRINT = [
    {"path": "~/.ssh", "kind": "dir"},
    {"path": "~/.ssh/key", "kind": "file"},
    {"path": "~/.ssh/authorized_keys", "kind": "line", "regexp": " mpicluster:t$"},
    {"path": "~/.ssh/mpicluster-*", "kind": "glob"},
    {"path": "ENV", "kind": "block", "begin": BEGIN, "end": END},
    {"path": "CONF", "kind": "tree"},
    {"path": "STACKS", "kind": "tree", "stack": True},
]


@pytest.fixture
def node(tmp_path) -> dict:
    """A node's home and files as a successful `up` leaves them, and its record."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    (home / ".ssh" / "key").write_text("private\n")
    (home / ".ssh" / "key").chmod(0o600)
    (home / ".ssh" / "authorized_keys").write_text(
        "ssh-ed25519 AAAA other\nfrom=x k mpicluster:t\n"
    )
    env = tmp_path / "environment"
    env.write_text(f"LANG=C\n{BEGIN}\nPATH=/opt/bin\n{END}\n")
    conf = tmp_path / "conf"
    (conf / "smoke").mkdir(parents=True)
    (conf / "hostfile").write_text("a slots=1\n")
    (conf / "smoke" / "allreduce.py").write_text("print(1)\n")
    stacks = tmp_path / "stacks"
    (stacks / "fp1" / "bin").mkdir(parents=True)
    footprint = [
        {
            **e,
            "path": {"ENV": str(env), "CONF": str(conf), "STACKS": str(stacks)}.get(
                e["path"], e["path"]
            ),
        }
        for e in FOOTPRINT
    ]
    path = conf / "applied.json"
    taken = record_code.record({"code": "1"}, "t", footprint, [], str(home), str(path))
    path.write_text(json.dumps(taken))
    return {"home": home, "env": env, "conf": conf, "stacks": stacks, "record": path}


def changed(node: dict) -> list[str]:
    seen = record_code.check(str(node["record"]), str(node["home"]))
    assert seen["cluster"] == "t" and seen["inputs"] == {"code": "1"}
    return seen["changed"]


def test_an_untouched_node_matches_its_record(node):
    assert changed(node) == []


def test_what_is_not_managed_may_change(node):
    node["env"].write_text(node["env"].read_text() + "EDITOR=vi\n")  # outside the block
    auth = node["home"] / ".ssh" / "authorized_keys"
    auth.write_text(auth.read_text() + "ssh-rsa BBBB a-new-key\n")  # a user's own key
    (node["conf"] / "smoke" / "__pycache__").mkdir()  # Python's, not up's
    (node["stacks"] / "fp1" / "bin" / "mpirun").write_text("")  # inside a build
    assert changed(node) == []


@pytest.mark.parametrize(
    "change, path",
    [
        (lambda n: n["env"].write_text(f"LANG=C\n{BEGIN}\nPATH=/usr/bin\n{END}\n"), "env"),
        (lambda n: (n["home"] / ".ssh" / "key").chmod(0o644), "key"),
        (lambda n: (n["home"] / ".ssh" / "authorized_keys").write_text("x\n"), "auth"),
        (lambda n: (n["conf"] / "hostfile").write_text("b slots=1\n"), "conf"),
        (lambda n: (n["conf"] / "stray").write_text(""), "conf"),
        (lambda n: (n["stacks"] / "fp2").mkdir(), "stacks"),
        (lambda n: n["stacks"].rename(str(n["stacks"]) + ".gone"), "stacks"),
    ],
)
def test_a_change_to_what_up_manages_is_named(node, change, path):
    change(node)
    where = {
        "env": str(node["env"]),
        "key": str(node["home"] / ".ssh" / "key"),
        "auth": str(node["home"] / ".ssh" / "authorized_keys"),
        "conf": str(node["conf"]),
        "stacks": str(node["stacks"]),
    }[path]
    assert changed(node) == [where]


def test_no_record_and_a_damaged_record(node):
    assert record_code.check(str(node["record"]) + ".none", str(node["home"])) is None
    node["record"].write_text("{not json")
    seen = record_code.check(str(node["record"]), str(node["home"]))
    assert seen == {"cluster": None, "inputs": None, "changed": [str(node["record"])]}


def test_a_removed_package_is_a_change(node, tmp_path):
    installed = record_code.packages_state(["dpkg"])
    assert installed.startswith("dpkg ") and " installed" in installed
    path = tmp_path / "pkg.json"
    taken = record_code.record("i", "t", [], ["no-such-package-mpicluster"], "/", str(path))
    taken["state"]["packages"] = record_code.digest(installed)  # as if it had been there
    path.write_text(json.dumps(taken))
    assert record_code.check(str(path), "/")["changed"] == ["packages"]


D = {"code": "c", "inventory": "i", "nodes": {"a": "na", "b": "nb"}}
FACTS = {name: {"applied": {"cluster": "t", "inputs": D, "changed": []}} for name in "ab"}


def test_the_verdict_names_the_first_reason_to_run_every_task():
    assert applied.judge("t", D, FACTS, []).unchanged

    def seen(inputs=D, changed=(), cluster="t"):
        return {"applied": {"cluster": cluster, "inputs": inputs, "changed": list(changed)}}

    cases = [
        ({}, ["b"], "the MPI stack or the cluster's packages are to be installed on b"),
        ({"applied": None}, [], "a has no record of an earlier up"),
        (seen(cluster="u"), [], "a's record of the last up is one of cluster u"),
        (seen(cluster=None, changed=["x"]), [], "cannot be read"),
        (seen(inputs="old"), [], "mpicluster (the record's form) changed"),
        (seen(inputs={**D, "code": "x"}), [], "mpicluster (its playbooks or the programs"),
        (seen(inputs={**D, "inventory": "x"}), [], "the inventory (what up writes"),
        (seen(inputs={**D, "nodes": {"a": "na"}}), [], "the cluster's list of nodes changed"),
        (seen(inputs={**D, "nodes": {"a": "na", "b": "x"}}), [], "b (how it is reached"),
        (
            seen(changed=["/etc/environment", "p"]),
            [],
            "a: /etc/environment changed since the last up (and 1 more)",
        ),
    ]
    for node_a, stack, words in cases:
        verdict = applied.judge("t", D, {**FACTS, "a": {**FACTS["a"], **node_a}}, stack)
        assert not verdict.unchanged and words in verdict.reason, (verdict, words)


INVENTORY = parse_inventory(
    "cluster: t\nnodes:\n  - {name: a, address: 10.0.0.1}\n  - {name: b, address: 10.0.0.2}\n"
)
IDENTITY = {"hostname": "a", "addresses": ["10.0.0.1"], "host_keys": ["ssh-ed25519 K"]}


def digest(variables=None, host_vars=None, identity=IDENTITY) -> dict:
    facts = {"a": {"identity": identity}, "b": {"identity": IDENTITY}}
    return applied.inputs_digest(
        ClusterPlan.of(INVENTORY), variables or {"mpicluster_x": 1}, host_vars or {}, facts
    )


def test_the_inputs_digest_follows_what_the_playbooks_make_a_node_from():
    base = digest()
    assert digest() == base
    # the build plan changes between the run that installs and the next: not an input
    assert digest({"mpicluster_x": 1, "mpicluster_stack_groups": {"builder": "a"}}) == base
    assert digest({"mpicluster_x": 2}) == {
        **base,
        "inventory": digest({"mpicluster_x": 2})["inventory"],
    }
    assert digest({"mpicluster_x": 2})["inventory"] != base["inventory"]
    fingerprint = digest(host_vars={"a": {"mpicluster_stack_fingerprint": "f"}})
    assert fingerprint["nodes"]["a"] != base["nodes"]["a"]
    assert fingerprint["nodes"]["b"] == base["nodes"]["b"]
    # the free space asked of a node that installs: gone once the stack is in use
    installing = digest(
        host_vars={"a": {"mpicluster_stack_fingerprint": "f", "preflight_min_free_kb": 9}}
    )
    assert installing == fingerprint
    new_key = digest(identity={**IDENTITY, "host_keys": ["ssh-ed25519 NEW"]})
    assert new_key == {**base, "nodes": {"a": new_key["nodes"]["a"], "b": base["nodes"]["b"]}}
    assert new_key["nodes"]["a"] != base["nodes"]["a"]


def test_the_record_watches_name_resolution_whole():
    watched = applied.watched(
        [{"path": "/etc/hosts", "kind": "block"}, {"path": "x", "kind": "file"}]
    )
    assert {"path": "/etc/hosts", "kind": "file"} in watched
    assert {"path": "/etc/nsswitch.conf", "kind": "file"} in watched
    assert [e for e in watched if e["path"] == "/etc/hosts"] == [
        {"path": "/etc/hosts", "kind": "file"}
    ]


def test_a_program_gets_the_helpers_its_helpers_import():
    text = remote.script("probe")
    for library in ("mpicluster_applied", "nodeinfo", "accessfacts"):
        assert f"_types.ModuleType({library!r})" in text, library
    assert text.index("ModuleType('mpicluster_applied')") < text.index("ModuleType('nodeinfo')")
    assert Path(remote.MODULE_UTILS / "mpicluster_applied.py").exists()
