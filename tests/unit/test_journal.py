"""The journal `up` writes before its first change and how `down` gives files back
(module_utils/mpicluster_journal), on real files in a temporary folder."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import pytest

from mpicluster.cluster.inventory import parse_inventory
from mpicluster.cluster.layout import BLOCK_BEGIN, BLOCK_END, Layout
from mpicluster.remote.plugins.module_utils import mpicluster_journal as journal

ROLES = Path(__file__).resolve().parents[2] / "playbooks" / "roles"
BLOCK = f"{BLOCK_BEGIN}\nPATH=/opt/x/bin\n{BLOCK_END}\n"


def footprint(root: Path) -> list[dict]:
    """The real footprint with every absolute path moved under `root`."""
    inventory = parse_inventory("cluster: c1\nnodes: [{name: a}]\n")
    entries = Layout.of(inventory).footprint("c1")
    for entry in entries:
        if entry["path"].startswith("/"):
            entry["path"] = str(root) + entry["path"]
    return entries


@pytest.fixture
def node(tmp_path):
    root, home = tmp_path / "root", tmp_path / "home"
    for folder in ("etc/ssh", "etc/ld.so.conf.d", "opt", "var/lib", "var/tmp"):
        (root / folder).mkdir(parents=True)
    home.mkdir()
    return root, home


def record(root: Path, home: Path) -> dict:
    state = journal.load(str(root / "journal.json"))
    journal.record(state, footprint(root), str(home))
    return state


def test_a_file_up_created_is_removed_and_an_edited_one_comes_back_byte_for_byte(node):
    root, home = node
    environment = root / "etc/environment"
    environment.write_bytes(b'LANG="C.UTF-8"\nEDITOR=vi')  # no newline at the end
    environment.chmod(0o640)
    state = record(root, home)
    assert state["paths"][str(root / "etc/ssh/ssh_known_hosts")] == {"existed": False}

    # what up does: blockinfile ends the last line, then appends; known_hosts is new
    environment.write_bytes(b'LANG="C.UTF-8"\nEDITOR=vi\n' + BLOCK.encode())
    known = root / "etc/ssh/ssh_known_hosts"
    known.write_text(
        "# BEGIN mpicluster c1 host keys\nnode1 ssh-ed25519 AAAA\n# END mpicluster c1 host keys\n"
    )

    actions = journal.undo(state, footprint(root), str(home))
    assert environment.read_bytes() == b'LANG="C.UTF-8"\nEDITOR=vi'
    assert environment.stat().st_mode & 0o777 == 0o640
    assert not known.exists()
    assert actions == {str(environment): "restored", str(known): "removed"}


def test_lines_a_user_added_since_up_are_kept(node):
    root, home = node
    hosts = root / "etc/hosts"
    hosts.write_text("127.0.0.1 localhost\n")
    state = record(root, home)
    hosts.write_text(BLOCK + "127.0.0.1 localhost\n10.9.9.9 added-later\n")
    inode = hosts.stat().st_ino
    journal.undo(state, footprint(root), str(home))
    assert hosts.read_text() == "127.0.0.1 localhost\n10.9.9.9 added-later\n"
    assert hosts.stat().st_ino == inode  # written in place: container runtimes bind-mount it


def test_the_cluster_key_line_goes_and_the_mode_comes_back(node):
    root, home = node
    ssh = home / ".ssh"
    ssh.mkdir(mode=0o755)
    keys = ssh / "authorized_keys"
    keys.write_text("ssh-ed25519 AAAAother someone@laptop")
    keys.chmod(0o644)
    state = record(root, home)
    keys.write_text(
        "ssh-ed25519 AAAAother someone@laptop\n"
        'from="10.0.0.1" ssh-ed25519 AAAAcluster mpicluster:c1\n'
    )
    keys.chmod(0o600)
    (ssh / "mpicluster_c1").write_text("private")
    control = socket.socket(socket.AF_UNIX)  # an ssh master's control socket
    control.bind(str(ssh / "mpicluster-0123abcd"))
    control.close()
    journal.undo(state, footprint(root), str(home))
    assert keys.read_text() == "ssh-ed25519 AAAAother someone@laptop"
    assert keys.stat().st_mode & 0o777 == 0o644
    assert sorted(p.name for p in ssh.iterdir()) == ["authorized_keys"]
    assert ssh.stat().st_mode & 0o777 == 0o755  # it was there before: kept


def test_another_clusters_line_is_not_touched(node):
    root, home = node
    state = record(root, home)
    ssh = home / ".ssh"
    ssh.mkdir(mode=0o700)
    keys = ssh / "authorized_keys"
    keys.write_text("ssh-ed25519 AAAA1 mpicluster:c1\nssh-ed25519 AAAA2 mpicluster:c10\n")
    journal.undo(state, footprint(root), str(home))
    assert keys.read_text() == "ssh-ed25519 AAAA2 mpicluster:c10\n"
    assert ssh.exists()  # up made it, but it holds another cluster's key now


def test_folders_up_made_go_when_empty_and_stacks_stay_when_asked(node):
    root, home = node
    state = record(root, home)
    prefix = root / "opt/mpicluster"
    (prefix / "stacks/abc/bin").mkdir(parents=True)
    (prefix / "current").symlink_to("stacks/abc")
    (root / "etc/mpicluster/smoke").mkdir(parents=True)
    (root / "etc/ld.so.conf.d/mpicluster.conf").write_text("/opt/mpicluster/current/lib\n")
    (home / ".ssh").mkdir()

    journal.undo(state, footprint(root), str(home), keep_stack=True)
    assert (prefix / "current").is_symlink() and (prefix / "stacks/abc/bin").is_dir()
    assert not (root / "etc/mpicluster").exists()
    assert not (root / "etc/ld.so.conf.d/mpicluster.conf").exists()
    assert not (home / ".ssh").exists()

    journal.undo(state, footprint(root), str(home))
    assert not prefix.exists()
    assert (root / "opt").is_dir()


def test_the_first_record_of_a_path_is_kept(node):
    root, home = node
    environment = root / "etc/environment"
    environment.write_text("A=1\n")
    state = record(root, home)
    environment.write_text("A=1\n" + BLOCK)
    assert not journal.record(state, footprint(root), str(home))
    assert state["paths"][str(environment)]["sha256"] == journal.sha256(b"A=1\n")


def test_the_journal_is_written_atomically_and_read_back(node):
    root, home = node
    path = root / "var/lib/mpicluster/journal.json"
    state = journal.load(str(path))
    journal.record(state, footprint(root), str(home))
    journal.write_atomic(str(path), json.dumps(state))
    assert journal.load(str(path)) == state
    assert path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in path.parent.iterdir()] == ["journal.json"]
    path.write_text("{truncated")
    assert journal.load(str(path))["unreadable"]


def test_without_a_journal_blocks_still_go_and_files_stay(node):
    root, home = node
    environment = root / "etc/environment"
    environment.write_text("A=1\n" + BLOCK)
    known = root / "etc/ssh/ssh_known_hosts"
    known.write_text("# BEGIN mpicluster c1 host keys\nx\n# END mpicluster c1 host keys\n")
    journal.undo(journal.load(str(root / "none.json")), footprint(root), str(home))
    assert environment.read_text() == "A=1\n"
    assert known.read_text() == ""  # not known to be up's: emptied, not removed


def test_the_footprint_markers_are_the_ones_the_roles_write():
    inventory = parse_inventory("cluster: c1\nnodes: [{name: a}]\n")
    entries = {e["path"]: e for e in Layout.of(inventory).footprint("c1")}
    mesh = (ROLES / "ssh_mesh/tasks/main.yml").read_text()
    markers = re.findall(r'marker: "(.*)"', mesh)
    rendered = [m.replace("{{ mpicluster_cluster }}", "c1") for m in markers]
    assert rendered == ["# {mark} mpicluster c1 host keys", "# {mark} mpicluster c1"]
    for path, marker in zip(("/etc/ssh/ssh_known_hosts", "~/.ssh/config"), rendered, strict=True):
        assert entries[path]["begin"] == marker.format(mark="BEGIN")
        assert entries[path]["end"] == marker.format(mark="END")
    assert 'regexp: " mpicluster:{{ mpicluster_cluster }}$"' in mesh
    assert re.search(entries["~/.ssh/authorized_keys"]["regexp"], "ssh-ed25519 AAAA mpicluster:c1")
    assert (
        'ssh_mesh_key_name: "mpicluster_{{ mpicluster_cluster }}"'
        in (ROLES / "ssh_mesh/defaults/main.yml").read_text()
    )
    assert (
        "ControlPath ~/.ssh/mpicluster-%C"
        in (ROLES.parents[1] / "templates" / "ssh_config.j2").read_text()
    )


def test_every_path_a_role_writes_is_in_the_footprint():
    """The paths up's roles write, by the layout keys they name, are all taken back."""
    inventory = parse_inventory("cluster: c1\nnodes: [{name: a}]\n")
    layout = Layout.of(inventory)
    paths = {e["path"] for e in layout.footprint("c1")}
    values = layout.as_vars()
    for key in ("environment_file", "ld_conf", "config_dir", "current", "stacks", "prefix"):
        assert values[key] in paths, key
    for key in ("smoke_dir", "cluster_json", "env_file"):
        assert values[key].startswith(values["config_dir"] + "/"), key
    scratch = (ROLES / "stack_build/defaults/main.yml").read_text()
    assert any(f"stack_build_scratch: {p}" in scratch for p in paths)
    assert Path(values["journal"]).is_absolute()
