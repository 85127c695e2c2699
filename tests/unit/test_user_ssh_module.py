"""The users role's module (plugins/modules/mpicluster_user_ssh.py): a user's ssh files
written by a child that has become her, run here on real files (as this machine's own
user: the child's setuid to the same ids)."""

from __future__ import annotations

import importlib.util
import os
import pwd
from pathlib import Path

from mpicluster import remote

PATH = remote.MODULES / "mpicluster_user_ssh.py"


def load():
    spec = importlib.util.spec_from_file_location("mpicluster_user_ssh", PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


user_ssh = load()
MARKER = "mpicluster c1"


def test_the_block_is_replaced_in_place_and_her_own_lines_are_kept():
    mine = "ssh-ed25519 AAAAmine me@laptop\n"
    first = user_ssh.with_block(mine, MARKER, "ssh-ed25519 AAAA1 a\nssh-ed25519 AAAA2 b")
    assert first == (
        "# BEGIN mpicluster c1\nssh-ed25519 AAAA1 a\nssh-ed25519 AAAA2 b\n"
        "# END mpicluster c1\nssh-ed25519 AAAAmine me@laptop\n"
    )
    again = user_ssh.with_block(first + "ssh-rsa AAAAlater x\n", MARKER, "ssh-ed25519 AAAA3 c")
    assert again == (
        "# BEGIN mpicluster c1\nssh-ed25519 AAAA3 c\n# END mpicluster c1\n"
        "ssh-ed25519 AAAAmine me@laptop\nssh-rsa AAAAlater x\n"
    )
    assert (
        user_ssh.with_block(again, MARKER, "")
        == "ssh-ed25519 AAAAmine me@laptop\nssh-rsa AAAAlater x\n"
    )


def me(home: Path):
    """This machine's own account, its home moved to `home`."""
    mine = pwd.getpwuid(os.getuid())
    fields = list(mine)
    fields[5] = str(home)
    return pwd.struct_passwd(fields)


def test_her_files_are_written_whole_0600_and_a_planted_link_is_replaced_not_followed(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    target = tmp_path / "shadow"
    target.write_text("root:secret\n")
    (home / ".ssh").mkdir(mode=0o755)
    (home / ".ssh" / "authorized_keys").symlink_to(target)
    blocks = [("authorized_keys", "ssh-ed25519 AAAA1 a"), ("config", "Host n1\n    Port 22")]
    said = user_ssh.as_user(me(home), user_ssh.files_action(str(home), MARKER, blocks))
    assert said == {"ok": True}
    keys = home / ".ssh" / "authorized_keys"
    assert target.read_text() == "root:secret\n" and not keys.is_symlink()
    assert keys.read_text() == "# BEGIN mpicluster c1\nssh-ed25519 AAAA1 a\n# END mpicluster c1\n"
    assert (
        oct(keys.stat().st_mode)[-3:] == "600" and oct((home / ".ssh").stat().st_mode)[-3:] == "700"
    )
    again = user_ssh.as_user(me(home), user_ssh.files_action(str(home), MARKER, blocks))
    assert again == {"ok": False}  # nothing to change the second time


def test_her_key_is_made_by_root_elsewhere_and_written_by_her_private_half_0600(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / ".ssh").mkdir(mode=0o700)
    planted = tmp_path / "elsewhere"
    (home / ".ssh" / "k").symlink_to(planted)
    said = user_ssh.as_user(
        me(home), user_ssh.key_action(str(home), "k", b"PRIVATE\n", b"ssh-ed25519 AAAA x\n")
    )
    assert said == {"ok": True} and not planted.exists()
    key = home / ".ssh" / "k"
    assert key.read_bytes() == b"PRIVATE\n" and oct(key.stat().st_mode)[-3:] == "600"
    assert (home / ".ssh" / "k.pub").read_text() == "ssh-ed25519 AAAA x\n"
    assert user_ssh.existing_key(me(home), "k") == "ssh-ed25519 AAAA x"


def test_a_failure_in_the_child_is_reported_not_raised(tmp_path):
    said = user_ssh.as_user(
        me(tmp_path / "missing"), user_ssh.files_action(str(tmp_path / "missing"), MARKER, [])
    )
    assert "error" in said and "FileNotFoundError" in said["error"]
