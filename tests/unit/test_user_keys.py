"""The users' keys, text in and lines or problems out (cluster/user_keys.py): which
entries are files, which lines are public keys, and no problem that shows a key."""

from __future__ import annotations

import base64

import pytest

from mpicluster.cluster import user_keys
from tests.unit.ssh_keys import (
    ED25519,
    EVERY_TYPE,
    RSA,
    SECRET,
    key_line,
    private_openssh,
    private_pem,
    private_putty,
    wire,
)


@pytest.mark.parametrize("line", EVERY_TYPE)
def test_every_type_mpicluster_writes_is_a_public_key(line):
    assert user_keys.line_problem(line) is None
    assert user_keys.entry_problem(f"  {line}  ") is None
    assert not user_keys.is_file_entry(line)


def test_a_line_without_a_comment_is_a_key():
    assert user_keys.line_problem(" ".join(ED25519.split()[:2])) is None


@pytest.mark.parametrize(
    "entry", ["keys/bob.pub", "~/.ssh/id_ed25519.pub", "/etc/keys/alice", "bob.pub"]
)
def test_a_path_is_a_file_entry(entry):
    assert user_keys.is_file_entry(entry)


@pytest.mark.parametrize(
    "entry",
    [
        "",
        "keys/my key.pub",  # a space: a line (a key file's path has none)
        "ssh-ed25519",
        "sk-ssh-ed25519@openssh.com",
        "AAAAC3NzaC1lZDI1NTE5AAAAIO/H81FXacOOTQyH6Eq1w02i1Xxs",
        "keys/bob\x00.pub",
        private_openssh(),
    ],
)
def test_key_text_is_no_file_entry(entry):
    assert not user_keys.is_file_entry(entry)


WRONG = [
    ("empty", "  ", "empty"),
    ("type-alone", "ssh-ed25519", "ssh-ed25519 without the key's base64 after it"),
    ("unknown-type", "ssh-foo AAAAB3 x", "not a public key line (it must start with one of"),
    ("dsa", "ssh-dss AAAAB3NzaC1kc3M= x", "a DSA key (ssh-dss)"),
    (
        "certificate",
        key_line("ssh-ed25519-cert-v01@openssh.com", b"n" * 32),
        "a certificate (ssh-ed25519-cert-v01@openssh.com), not a public key",
    ),
    ("options", f'from="10.0.0.0/8" {ED25519}', "options before the key type"),
    ("command-option", f'command="echo a b",no-pty {ED25519}', "options before the key type"),
    ("bad-base64", "ssh-ed25519 AAAA$$$$ x", "the key's base64 does not decode"),
    ("bad-padding", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5A x", "the key's base64 does not decode"),
    ("truncated", ED25519.split()[0] + " " + ED25519.split()[1][:40], "not an SSH public key"),
    (
        "other-type",
        "ssh-rsa " + ED25519.split()[1],
        "the line says ssh-rsa, but its key is ssh-ed25519",
    ),
    (
        "unknown-inner-type",
        key_line("ssh-ed25519", b"k" * 32, inner="bogus-type"),
        "the line says ssh-ed25519, but its key is another type",
    ),
    ("short-ed25519", key_line("ssh-ed25519", b"k" * 31), "its key is not 32 bytes"),
    ("extra-field", key_line("ssh-ed25519", b"k" * 32, b"more"), "not an SSH ssh-ed25519 key"),
    (
        "other-curve",
        key_line("ecdsa-sha2-nistp256", b"nistp384", b"\x04" * 97),
        "(another curve)",
    ),
    (
        "small-rsa",
        key_line("ssh-rsa", b"\x01\x00\x01", b"\x00" + b"\xc5" * 64),
        "an RSA key of 512 bits: OpenSSH refuses under 1024",
    ),
    ("control-character", ED25519 + "\x1b[2J", "contains a control character"),
    ("two-lines", f"{ED25519}\n{RSA}", "more than one line"),
    ("base64-alone", ED25519.split()[1], "base64 alone, without a key type"),
    ("rfc4716", "---- BEGIN SSH2 PUBLIC KEY ---- AAAA", "an RFC 4716 public key"),
    ("private-openssh", private_openssh(), "a private key, not a public one (not printed)"),
    ("private-pem", private_pem(), "a private key"),
    ("private-putty", private_putty(), "a private key"),
    ("private-folded", private_openssh().replace("\n", " "), "a private key"),
]


@pytest.mark.parametrize(("entry", "expected"), [c[1:] for c in WRONG], ids=[c[0] for c in WRONG])
def test_what_is_wrong_is_said_without_the_key(entry, expected):
    problem = user_keys.entry_problem(entry)
    assert problem is not None and expected in problem, problem
    assert "\n" not in problem
    for word in entry.split():
        if len(word) >= 12 and word not in user_keys.TYPE_NAMES:
            assert word not in problem, (word, problem)
    assert SECRET not in problem


def test_a_file_of_keys_leaves_out_blank_lines_and_comments():
    text = f"# alice's keys\n\n{ED25519}\r\n   # the old laptop\n  {RSA}  \n"
    assert user_keys.file_lines(text) == ([ED25519, RSA], [])


def test_a_file_says_each_wrong_line_by_its_number():
    text = f"{ED25519}\n# fine\nssh-ed25519 AAAA$$\nnonsense here\n"
    keys, problems = user_keys.file_lines(text)
    assert keys == [ED25519]
    assert [n for n, _ in problems] == [3, 4]
    assert "does not decode" in problems[0][1] and "not a public key line" in problems[1][1]


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n"])
def test_a_file_without_keys_is_said(text):
    assert user_keys.file_lines(text) == ([], [(None, "holds no public key line")])


@pytest.mark.parametrize("private", [private_openssh, private_pem, private_putty])
def test_a_private_key_file_is_one_problem_at_its_first_line(private):
    text = f"# mine\n{ED25519}\n" + private()
    keys, problems = user_keys.file_lines(text)
    assert keys == []
    assert problems == [(3, user_keys.PRIVATE)]


def test_an_rfc4716_file_is_one_problem():
    text = '---- BEGIN SSH2 PUBLIC KEY ----\nComment: "x"\nAAAAB3Nza\n'
    text += "---- END SSH2 PUBLIC KEY ----\n"
    keys, problems = user_keys.file_lines(text)
    assert keys == [] and len(problems) == 1 and "ssh-keygen -i" in problems[0][1]


def test_the_wire_reader_refuses_a_length_past_the_end():
    blob = base64.b64encode(wire(b"ssh-ed25519") + b"\x00\x00\x00\x40abc").decode()
    assert "not an SSH public key" in user_keys.line_problem(f"ssh-ed25519 {blob}")
