"""One name for choosing nodes: `--nodes NODE,...` (comma-separated and repeatable, in
order, a node twice or one the inventory lacks a one-line error, exit 2) in `run`,
`bench` and `down`; `local up --count N`. Each old name still works, hidden from help
(tests/unit/test_cli_help.py), and says in one stderr line which name replaces it.

The commands run as real processes against an inventory whose nodes listen nowhere:
every answer here comes before any connection.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mpicluster.cluster import node_choice
from mpicluster.util.errors import UsageError

REPO = Path(__file__).resolve().parents[2]


def test_values_split_at_commas_and_repeats_keep_their_order():
    assert node_choice.split(["n3,n1", "n2"]) == ("n3", "n1", "n2")
    assert node_choice.split([" n1 , n2,"]) == ("n1", "n2")
    assert node_choice.split(None) == () == node_choice.split([])
    with pytest.raises(UsageError, match="--nodes: no node named"):
        node_choice.split([","])


def test_an_unknown_node_or_one_named_twice_is_bad_input():
    known = ["n1", "n2", "n3"]
    assert node_choice.check(known, ("n3", "n1")) == ("n3", "n1")
    with pytest.raises(UsageError) as unknown:
        node_choice.check(known, ("n1", "n9"))
    assert unknown.value.message == "--nodes 'n9': no such node (one of: n1, n2, n3)"
    with pytest.raises(UsageError, match="--nodes names 'n2' twice"):
        node_choice.check(known, ("n2", "n1", "n2"))


@pytest.fixture
def inventory(tmp_path: Path) -> str:
    path = tmp_path / "inventory.yaml"
    path.write_text(
        "cluster: names\n"
        "ssh: {user: alice, port: 1, connect_timeout: 2}\n"
        "nodes:\n"
        "  - {name: n1, address: 127.0.0.1, slots: 2}\n"
        "  - {name: n2, address: 127.0.0.2, slots: 2}\n"
    )
    return str(path)


def mpicluster(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mpicluster", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
        env={
            **os.environ,
            "PYTHONPATH": str(REPO),
            "MPICLUSTER_HOME": str(tmp_path / "state"),
            "NO_COLOR": "1",
        },
    )


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["run", "{inv}", "--nodes", "n2,n9", "--", "true"], "--nodes 'n9': no such node"),
        (["run", "{inv}", "--nodes", "n2", "--nodes", "n1,n2", "--", "true"], "'n2' twice"),
        (["bench", "{inv}", "--nodes", "n1", "--nodes", "n9"], "--nodes 'n9': no such node"),
        (["down", "{inv}", "--nodes", "n9"], "--nodes 'n9': no such node (one of: n1, n2)"),
        (["down", "{inv}", "--nodes", "n1", "--nodes", "n2"], "down takes one node at a time"),
    ],
    ids=["run-unknown", "run-twice", "bench-unknown", "down-unknown", "down-two"],
)
def test_nodes_is_checked_before_any_node_is_asked(tmp_path, inventory, args, error):
    done = mpicluster(tmp_path, *(inventory if a == "{inv}" else a for a in args))
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.startswith("error: ") and error in line, line
    assert done.stdout == ""


#: Each old name, what it says, and an answer that shows its value was used as the new
#: name's would be (the same line as with the new name).
OLD_NAMES = [
    (
        ["run", "{inv}", "--hosts", "n2,n9", "--", "true"],
        "note: --hosts is now --nodes (the old name still works)",
        "error: --nodes 'n9': no such node (one of: n1, n2)",
    ),
    (
        ["down", "{inv}", "--node", "n9"],
        "note: --node is now --nodes (the old name still works)",
        "error: --nodes 'n9': no such node (one of: n1, n2)",
    ),
    (
        ["local", "up", "--nodes", "2", "--release", "bookworm,trixie,trixie"],
        "note: --nodes N is now --count N (the old name still works)",
        "error: --release bookworm,trixie,trixie: give one release for every node, or one "
        "per node (2)",
    ),
]


@pytest.mark.parametrize(
    ("args", "note", "answer"), OLD_NAMES, ids=["run-hosts", "down-node", "local-up-nodes"]
)
def test_an_old_name_says_its_new_one_then_does_the_same(tmp_path, inventory, args, note, answer):
    done = mpicluster(tmp_path, *(inventory if a == "{inv}" else a for a in args))
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [note, answer]
    new = [{"--hosts": "--nodes", "--node": "--nodes"}.get(a, a) for a in args]
    if new[:2] == ["local", "up"]:
        new[2] = "--count"
    again = mpicluster(tmp_path, *(inventory if a == "{inv}" else a for a in new))
    assert (again.returncode, again.stderr.splitlines()) == (2, [answer])
