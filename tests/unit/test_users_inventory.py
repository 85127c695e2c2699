"""The inventory's `users:` (issue 52): people's accounts, validated before any node is
touched. Each bad input is one line naming the field, the user and the inventory's line;
a private key pasted is refused and never printed; the plan carries the key lines read."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mpicluster.cli import app
from mpicluster.cluster.inventory import InventoryError, load_inventory
from mpicluster.cluster.plan import ClusterPlan, UserAccount
from tests.unit.ssh_keys import (
    CAROLS_KEYS,
    ECDSA256,
    ED25519,
    ED25519_BOB,
    ED25519_EVE,
    RSA,
    SECRET,
    key_line,
    private_openssh,
    private_putty,
)

HEAD = "cluster: test\nssh: {user: mpi}\nnodes:\n  - {name: n1}\n  - {name: n2}\n"


@pytest.fixture(autouse=True)
def login_name(monkeypatch):
    """The login name here (the MPI user where ssh.user is unset) is a known one."""
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.setenv(name, "operator")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "bob.pub").write_text(
        f"# bob's keys\n\n{RSA}\n  # the old laptop, kept\n{ECDSA256}\n"
    )
    (tmp_path / "keys" / "carol.pub").write_text("\n".join(CAROLS_KEYS) + "\n")
    return tmp_path


def validate(folder: Path, text: str):
    path = folder / "inventory.yaml"
    path.write_text(text)
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert "Traceback" not in result.output
    return path, result


def problems_of(folder: Path, text: str) -> list[str]:
    """The lines `validate` prints for a bad inventory (exit 2), without `error: FILE:`."""
    path, result = validate(folder, text)
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    lines = result.output.strip().splitlines()
    assert all(line.startswith(f"error: {path}:") for line in lines), result.output
    return [line.removeprefix(f"error: {path}:") for line in lines]


# --- good inventories ---------------------------------------------------------------


GOOD = (
    HEAD
    + f"""\
users:
  - name: alice
    keys: ["{ED25519}"]
  - name: bob
    uid: 2002
    keys: [keys/bob.pub, "{ED25519_BOB}"]
    groups: [video, render]
    sudo: false
  - name: _carol-2
    keys:
      - {{SPACE_KEYS}}
    sudo: true
"""
)


def test_a_good_inventory_gives_the_plan_its_users_with_the_key_lines_read(folder, monkeypatch):
    text = GOOD.replace("{SPACE_KEYS}", "~/carol.pub")
    (folder / "home").mkdir()
    (folder / "home" / "carol.pub").write_text("\n".join(CAROLS_KEYS) + "\n")
    monkeypatch.setenv("HOME", str(folder / "home"))
    monkeypatch.chdir("/")  # keys/bob.pub is the inventory's, wherever the command runs
    path, result = validate(folder, text)
    assert result.exit_code == 0, result.output
    plan = ClusterPlan.load(path)
    alice, bob, carol = plan.users
    assert alice == UserAccount("alice", None, (), False, (ED25519,))
    bob_laptop = ED25519_BOB
    assert bob == UserAccount("bob", 2002, ("video", "render"), False, (RSA, ECDSA256, bob_laptop))
    assert (carol.name, carol.sudo, carol.keys) == ("_carol-2", True, tuple(CAROLS_KEYS))


def test_no_users_is_an_empty_tuple(folder):
    path, result = validate(folder, HEAD)
    assert result.exit_code == 0, result.output
    assert ClusterPlan.load(path).users == ()


def test_the_plan_for_some_nodes_keeps_the_users(folder):
    path, _ = validate(folder, GOOD.replace("{SPACE_KEYS}", "keys/carol.pub"))
    plan = ClusterPlan.load(path)
    assert plan.only_nodes(["n2"]).users == plan.users


def test_a_key_file_changed_after_the_check_is_refused_by_the_plan(folder):
    path, _ = validate(folder, GOOD.replace("{SPACE_KEYS}", "keys/carol.pub"))
    inventory = load_inventory(path)
    (folder / "keys" / "bob.pub").write_text(private_openssh())
    with pytest.raises(InventoryError) as caught:
        ClusterPlan.of(inventory)
    assert "users[1].keys[0]: bob's key file" in caught.value.lines()[0]
    assert SECRET not in "\n".join(caught.value.lines())


def test_validate_counts_the_users(folder):
    _, result = validate(folder, GOOD.replace("{SPACE_KEYS}", "keys/carol.pub"))
    assert "2 node(s), 0 GPU(s), 3 user(s)" in result.output


# --- one bad input, one line ---------------------------------------------------------

SMALL_RSA = key_line("ssh-rsa", b"\x01\x00\x01", b"\x7f" * 64)
ALICE = f'users:\n  - name: alice\n    keys: ["{ED25519}"]\n'


def user(fields: str) -> str:
    """HEAD and one user whose mapping starts on line 7."""
    return HEAD + "users:\n  - " + fields.replace("\n", "\n    ") + "\n"


CASES = [
    # the fields' own values
    (
        "name-upper",
        user(f"name: Alice\nkeys: ['{ED25519}']"),
        "7: users[0].name: 'Alice' is not a POSIX user",
    ),
    (
        "name-dot",
        user(f"name: a.b\nkeys: ['{ED25519}']"),
        "7: users[0].name: 'a.b' is not a POSIX user",
    ),
    (
        "name-digit",
        user(f"name: 1abc\nkeys: ['{ED25519}']"),
        "7: users[0].name: '1abc' is not a POSIX",
    ),
    ("name-long", user(f"name: {'a' * 33}\nkeys: ['{ED25519}']"), "longer than 32 characters"),
    ("name-shell", user(f"name: 'a;b'\nkeys: ['{ED25519}']"), "7: users[0].name: contains ';'"),
    ("name-missing", user(f"keys: ['{ED25519}']"), "7: users[0].name: required"),
    ("uid-low", user(f"name: bob\nuid: 999\nkeys: ['{ED25519}']"), "8: users[0].uid: must be >="),
    (
        "uid-high",
        user(f"name: bob\nuid: 60000\nkeys: ['{ED25519}']"),
        "8: users[0].uid: must be <=",
    ),
    ("uid-nobody", user(f"name: bob\nuid: 65534\nkeys: ['{ED25519}']"), "(got 65534)"),
    (
        "uid-word",
        user(f"name: bob\nuid: '2002'\nkeys: ['{ED25519}']"),
        "8: users[0].uid: must be an",
    ),
    (
        "uid-bool",
        user(f"name: bob\nuid: true\nkeys: ['{ED25519}']"),
        "uid: must be an integer (got a",
    ),
    ("keys-missing", user("name: bob"), "7: users[0].keys: required"),
    ("keys-empty", user("name: bob\nkeys: []"), "8: users[0].keys: at least one key is required"),
    ("keys-string", user(f"name: bob\nkeys: '{ED25519}'"), "8: users[0].keys: must be a list"),
    ("keys-number", user("name: bob\nkeys: [42]"), "8: users[0].keys[0]: must be a string"),
    (
        "group-bad",
        user(f"name: bob\nkeys: ['{ED25519}']\ngroups: [Video]"),
        "9: users[0].groups[0]:",
    ),
    ("group-sudo", user(f"name: bob\nkeys: ['{ED25519}']\ngroups: [sudo]"), "give sudo: true"),
    ("group-root", user(f"name: bob\nkeys: ['{ED25519}']\ngroups: [root]"), "the root group"),
    (
        "groups-word",
        user(f"name: bob\nkeys: ['{ED25519}']\ngroups: video"),
        "groups: must be a list",
    ),
    (
        "sudo-word",
        user(f"name: bob\nkeys: ['{ED25519}']\nsudo: 'no'"),
        "9: users[0].sudo: must be tr",
    ),
    (
        "sudo-number",
        user(f"name: bob\nkeys: ['{ED25519}']\nsudo: 1"),
        "users[0].sudo: must be true or",
    ),
    (
        "unknown-key",
        user(f"name: bob\nkeys: ['{ED25519}']\nshell: /bin/zsh"),
        "9: users[0].shell: un",
    ),
    ("users-mapping", HEAD + "users: {name: bob}\n", "6: users: must be a list"),
    # across users and the rest of the inventory
    (
        "duplicate-name",
        HEAD + ALICE + ALICE.removeprefix("users:\n"),
        "9: users[1].name: duplicate user 'alice' (also users[0])",
    ),
    (
        "duplicate-uid",
        user(f"name: bob\nuid: 2002\nkeys: ['{ED25519}']")
        + f"  - {{name: eve, uid: 2002, keys: ['{ED25519_EVE}']}}\n",
        "10: users[1].uid: 2002 is also users[0]'s uid (bob)",
    ),
    ("root", user(f"name: root\nkeys: ['{ED25519}']"), "7: users[0].name: 'root' is a system"),
    ("daemon", user(f"name: daemon\nkeys: ['{ED25519}']"), "'daemon' is a system account"),
    ("www-data", user(f"name: www-data\nkeys: ['{ED25519}']"), "'www-data' is a system account"),
    ("apt", user(f"name: _apt\nkeys: ['{ED25519}']"), "'_apt' is a system account"),
    ("systemd", user(f"name: systemd-network\nkeys: ['{ED25519}']"), "is a system account"),
    ("slurm", user(f"name: slurm\nkeys: ['{ED25519}']"), "'slurm' is a system account"),
    (
        "mpi-user",
        user(f"name: mpi\nkeys: ['{ED25519}']"),
        "7: users[0].name: 'mpi' is the MPI user mpicluster logs in as (ssh.user)",
    ),
    (
        "mpi-user-of-a-node",
        HEAD.replace("{name: n2}", "{name: n2, ssh: {user: admin}}")
        + f"users:\n  - {{name: admin, keys: ['{ED25519}']}}\n",
        "7: users[0].name: 'admin' is the MPI user mpicluster logs in as (nodes[1].ssh.user)",
    ),
    (
        "mpi-user-login-name",
        HEAD.replace("ssh: {user: mpi}\n", "")
        + f"users:\n  - {{name: operator, keys: ['{ED25519}']}}\n",
        "6: users[0].name: 'operator' is the MPI user mpicluster logs in as (your login name "
        "here, as ssh.user is unset)",
    ),
    # keys given as lines
    ("key-empty", user("name: bob\nkeys: ['']"), "8: users[0].keys[0]: bob's key: empty"),
    (
        "key-unknown-type",
        user("name: bob\nkeys: ['ssh-foo AAAA bob@x']"),
        "8: users[0].keys[0]: bob's key: not a public key line",
    ),
    (
        "key-options",
        user(f"name: bob\nkeys: ['no-pty,from=\"10.0.0.0/8\" {ED25519}']"),
        "8: users[0].keys[0]: bob's key: options before the key type (from=, command=, ...) "
        "are refused: mpicluster writes the lines it is given",
    ),
    (
        "key-second-of-three",
        user(f"name: bob\nkeys:\n  - '{ED25519}'\n  - ssh-rsa AAAA$$\n  - '{RSA}'"),
        "10: users[0].keys[1]: bob's key: the key's base64 does not decode",
    ),
    (
        "key-other-type",
        user(f"name: bob\nkeys: ['ssh-rsa {ED25519.split()[1]}']"),
        "bob's key: the line says ssh-rsa, but its key is ssh-ed25519",
    ),
    (
        "key-small-rsa",
        user(f"name: bob\nkeys: ['{SMALL_RSA}']"),
        "bob's key: an RSA key of 511 bits",
    ),
    ("key-dsa", user("name: bob\nkeys: ['ssh-dss AAAAB3NzaC1kc3M= x']"), "bob's key: a DSA key"),
    # keys given as files
    (
        "key-file-missing",
        user("name: bob\nkeys: [keys/nobody.pub]"),
        "8: users[0].keys[0]: bob's key file: no such file: {folder}/keys/nobody.pub",
    ),
    (
        "key-file-folder",
        user("name: bob\nkeys: [keys]"),
        "bob's key file: {folder}/keys is a folder, not a file of public keys",
    ),
    (
        "key-file-bad-line",
        user("name: bob\nkeys: [keys/mixed.pub]"),
        "8: users[0].keys[0]: bob's key file: {folder}/keys/mixed.pub:3: not a public key line",
    ),
    (
        "key-file-no-keys",
        user("name: bob\nkeys: [keys/empty.pub]"),
        "bob's key file: {folder}/keys/empty.pub: holds no public key line",
    ),
    (
        "key-file-not-utf8",
        user("name: bob\nkeys: [keys/latin1.pub]"),
        "bob's key file: {folder}/keys/latin1.pub: not UTF-8 text",
    ),
    (
        "key-file-rfc4716",
        user("name: bob\nkeys: [keys/ssh2.pub]"),
        "bob's key file: {folder}/keys/ssh2.pub:1: an RFC 4716 public key",
    ),
]


@pytest.fixture
def more_files(folder: Path) -> Path:
    keys = folder / "keys"
    (keys / "mixed.pub").write_text(f"{ED25519}\n# fine\nnonsense here\n")
    (keys / "empty.pub").write_text("# nothing yet\n\n")
    (keys / "latin1.pub").write_bytes(b"ssh-ed25519 AAAA caf\xe9\n")
    (keys / "ssh2.pub").write_text("---- BEGIN SSH2 PUBLIC KEY ----\nAAAA\n---- END SSH2 ----\n")
    return folder


def test_there_are_enough_cases():
    assert len({c[0] for c in CASES}) == len(CASES) >= 40


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_one_bad_input_is_one_line_with_its_line_number(more_files, text, expected):
    lines = problems_of(more_files, text)
    assert len(lines) == 1, lines
    assert expected.replace("{folder}", str(more_files)) in lines[0], lines


# --- private keys --------------------------------------------------------------------


def private_inline(private: str) -> str:
    body = "".join(f"          {line}\n" for line in private.splitlines())
    return HEAD + f"users:\n  - name: carol\n    keys:\n      - '{ED25519}'\n      - |\n{body}"


@pytest.mark.parametrize("private", [private_openssh, private_putty])
def test_a_private_key_pasted_is_refused_and_not_printed(folder, private):
    lines = problems_of(folder, private_inline(private()))
    assert lines == [
        "10: users[0].keys[1]: carol's key: a private key, not a public one (not printed): "
        "give the public key (its .pub); it is in the inventory: if that was shared, "
        "replace the key"
    ]
    assert SECRET not in "".join(lines)


def test_a_private_key_pasted_on_one_line_is_refused_and_not_printed(folder):
    folded = private_openssh().replace("\n", " ")
    lines = problems_of(folder, user(f"name: carol\nkeys: ['{folded}']"))
    assert len(lines) == 1 and "carol's key: a private key" in lines[0]
    assert SECRET not in "".join(lines) and "b3BlbnNzaC1rZXk" not in "".join(lines)


def test_a_private_key_file_is_refused_and_not_printed(folder):
    (folder / "id_ed25519").write_text(private_openssh())
    lines = problems_of(folder, user("name: carol\nkeys: [id_ed25519]"))
    assert lines == [
        f"8: users[0].keys[0]: carol's key file: {folder}/id_ed25519:1: a private key, "
        "not a public one (not printed): give the public key (its .pub)"
    ]


def test_a_real_process_prints_no_private_key(folder):
    path = folder / "inventory.yaml"
    path.write_text(private_inline(private_openssh()))
    done = subprocess.run(
        [sys.executable, "-m", "mpicluster", "validate", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == "" and "Traceback" not in done.stderr
    assert "carol's key: a private key" in done.stderr
    assert SECRET not in done.stderr


# --- every problem at once -----------------------------------------------------------


def test_one_pass_says_every_problem_across_users(folder):
    (folder / "id_rsa").write_text(private_openssh())
    text = HEAD + (
        f"users:\n"
        f"  - {{name: alice, uid: 2001, keys: ['{ED25519}']}}\n"  # 7
        f"  - {{name: alice, keys: ['{ED25519}']}}\n"  # 8: duplicate name
        f"  - {{name: bob, uid: 2001, keys: [keys/none.pub]}}\n"  # 9: uid, missing file
        f"  - {{name: mpi, keys: ['{ED25519_EVE}']}}\n"  # 10: the MPI user
        f"  - {{name: daemon, keys: [id_rsa, 'ssh-foo AAAA']}}\n"  # 11: system, private, bad
    )
    lines = problems_of(folder, text)
    assert lines == [
        "8: users[1].name: duplicate user 'alice' (also users[0])",
        "9: users[2].keys[0]: bob's key file: no such file: " + str(folder / "keys/none.pub"),
        "9: users[2].uid: 2001 is also users[0]'s uid (alice)",
        "10: users[3].name: 'mpi' is the MPI user mpicluster logs in as (ssh.user); "
        "give another name",
        f"11: users[4].keys[0]: daemon's key file: {folder}/id_rsa:1: a private key, not a "
        "public one (not printed): give the public key (its .pub)",
        "11: users[4].keys[1]: daemon's key: not a public key line (it must start with one "
        "of ssh-ed25519, ssh-rsa, ecdsa-sha2-nistp256, ecdsa-sha2-nistp384, "
        "ecdsa-sha2-nistp521, sk-ssh-ed25519@openssh.com, sk-ecdsa-sha2-nistp256@openssh.com)",
        "11: users[4].name: 'daemon' is a system account on Debian nodes; give another name",
    ]
    assert SECRET not in "".join(lines)


def test_one_pass_says_every_problem_in_the_fields(folder):
    text = HEAD + (
        "users:\n"
        "  - {name: Alice, keys: []}\n"  # 7: name, keys
        "  - {name: bob, uid: 12, keys: [x], groups: ['Video']}\n"  # 8: uid, group, key file
        "  - {name: eve, keys: [x], sudo: maybe}\n"  # 9: sudo, key file
    )
    lines = problems_of(folder, text)
    # the users whose fields parsed (bob, eve) are checked further in the same run
    assert [line.split(": ")[0:2] for line in lines] == [
        ["7", "users[0].keys"],
        ["7", "users[0].name"],
        ["8", "users[1].groups[0]"],
        ["8", "users[1].keys[0]"],
        ["8", "users[1].uid"],
        ["9", "users[2].keys[0]"],
        ["9", "users[2].sudo"],
    ]
    assert lines[3] == f"8: users[1].keys[0]: bob's key file: no such file: {folder / 'x'}"


def test_one_key_given_to_two_users_is_refused(folder):
    """Whoever holds a key logs in as every user it is given to: one person, one key."""
    text = HEAD + (
        "users:\n"
        f'  - {{name: alice, keys: ["{ED25519}"]}}\n'
        f'  - {{name: bob, keys: ["{ED25519} bob@laptop"]}}\n'
    )
    said = problems_of(folder, text)
    assert said == [
        "8: users[1].keys: bob and alice share a key: whoever holds it logs in as both; "
        "give each person her own"
    ], said
