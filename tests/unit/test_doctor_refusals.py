"""Why a login was refused, from what the probe read (doctor/refusals.py): each cause is
named only when its trace is in the facts."""

from __future__ import annotations

from mpicluster.doctor import refusals


def facts(settings=None, paths=None, key=None, groups=("vagrant",), authorized_from=None):
    return {
        "access": {
            "login": {
                "user": "vagrant",
                "uid": 1000,
                "groups": list(groups),
                "paths": paths or [],
                "key": key or {},
                "sshd": {"settings": settings or {}},
            },
            "known_host_keys": {
                "node1": ["SHA256:one"],
                "192.168.66.11": ["SHA256:one"],
                "node3": ["SHA256:three"],
            },
            "ssh_client": [
                "/home/vagrant/.ssh/config:1: Host *",
                "/home/vagrant/.ssh/config:2: User root",
            ],
        },
        "ssh": {"authorized_from": authorized_from},
    }


def test_allowusers_that_leaves_out_the_source_is_named_with_its_file_and_line():
    seen = facts({"allowusers": [["vagrant@192.168.66.1 admin", "/etc/ssh/x.conf:3"]]})
    found = refusals.sshd_refuses(seen, "node2", "vagrant", "node1", ["192.168.66.11"])
    assert found is not None
    assert "AllowUsers, /etc/ssh/x.conf:3" in found[0] and "192.168.66.11" in found[0]
    assert "vagrant@192.168.66.11" in found[1]


def test_allowusers_matching_by_subnet_or_wildcard_refuses_nothing():
    for pattern in ("vagrant@192.168.66.0/24", "vag*", "*@192.168.66.*"):
        seen = facts({"allowusers": [[pattern, "/etc/ssh/sshd_config:9"]]})
        assert refusals.sshd_refuses(seen, "node2", "vagrant", "node1", ["192.168.66.11"]) is None


def test_denyusers_and_groups():
    seen = facts({"denyusers": [["*@192.168.66.11", "/etc/ssh/sshd_config:4"]]})
    assert "DenyUsers" in refusals.sshd_refuses(seen, "n", "vagrant", "node1", ["192.168.66.11"])[0]
    seen = facts({"allowgroups": [["sshusers", "/etc/ssh/sshd_config:5"]]})
    assert "AllowGroups" in refusals.sshd_refuses(seen, "n", "vagrant", "node1", ["10.0.0.1"])[0]
    assert refusals.sshd_refuses(facts(), "n", "vagrant", "node1", ["10.0.0.1"]) is None


def test_strict_modes_names_the_path_its_mode_and_owner():
    home = {"path": "/home/vagrant", "mode": "0757", "uid": 1000, "owner": "vagrant"}
    found = refusals.strict_modes(facts(paths=[home]), "node2")
    assert found is not None
    assert "mode 0757" in found[0] and "others" in found[0]
    assert found[1] == "chmod go-w /home/vagrant on node2"
    owned = {"path": "/home/vagrant/.ssh", "mode": "0700", "uid": 1001, "owner": "alice"}
    assert "chown vagrant" in refusals.strict_modes(facts(paths=[owned]), "node2")[1]
    off = facts({"strictmodes": [["no", "/etc/ssh/sshd_config:1"]]}, paths=[home])
    assert refusals.strict_modes(off, "node2") is None
    fine = {"path": "/home/vagrant", "mode": "0755", "uid": 1000, "owner": "vagrant"}
    assert refusals.strict_modes(facts(paths=[fine]), "node2") is None


def test_from_list_without_the_source_address():
    seen = facts(authorized_from=["192.168.66.12", "192.168.66.13"])
    found = refusals.from_list_refuses(seen, "node2", "c", "node1", ["192.168.66.11"])
    assert found is not None and "192.168.66.11" in found[1] and "from=" in found[0]
    assert refusals.from_list_refuses(seen, "node2", "c", "node3", ["192.168.66.13"]) is None
    assert refusals.from_list_refuses(facts(), "node2", "c", "node1", ["192.168.66.11"]) is None


def test_client_config_names_the_line_that_sets_another_user():
    item = {"config": {"user": ["root"], "port": ["22"], "hostname": ["192.168.66.12"]}}
    expected = {"user": "vagrant", "port": "22", "hostname": "192.168.66.12"}
    found = refusals.client_config(item, facts(), "node1", "node2", expected)
    assert found is not None
    assert "User root" in found[0] and "/home/vagrant/.ssh/config:2" in found[1]
    item = {"config": {"user": ["vagrant"], "port": ["22"], "hostname": ["192.168.66.12"]}}
    assert refusals.client_config(item, facts(), "node1", "node2", expected) is None
    # a value no line of the user's sets (no mpicluster block yet: ssh's defaults)
    item = {"config": {"user": ["vagrant"], "port": ["22"], "hostname": ["node2"]}}
    assert refusals.client_config(item, facts(), "node1", "node2", expected) is None


def test_key_mode_known_hosts_and_stale_key():
    loose = {"path": "/home/vagrant/.ssh/mpicluster_c", "mode": "0644", "uid": 1000}
    assert "chmod 600" in refusals.key_mode(facts(key=loose), "node2")[1]
    assert refusals.key_mode(facts(key={**loose, "mode": "0600"}), "node2") is None
    assert "no key for node2" in refusals.known_hosts_lacks(facts(), "node1", "node2", [])[1]
    assert refusals.known_hosts_lacks(facts(), "node1", "node3", []) is None
    known = ["SHA256:abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG"]
    offered = "SHA256:abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG"
    assert "stale" in refusals.stale_host_key(offered, known, "node1", "node2")[1]
    assert refusals.stale_host_key("SHA256:other", known, "node1", "node2") is None
    assert refusals.stale_host_key(offered, [], "node1", "node2") is None


def test_a_source_whose_other_address_is_allowed_is_not_refused():
    """Logins leave from the address routing to the target: the cluster network's, not
    necessarily the inventory's."""
    seen = facts(authorized_from=["10.1.0.11"])
    assert (
        refusals.from_list_refuses(seen, "node2", "c", "node1", ["192.0.2.11", "10.1.0.11"]) is None
    )
    seen = facts({"allowusers": [["vagrant@10.1.0.0/16", "/etc/ssh/sshd_config:2"]]})
    assert refusals.sshd_refuses(seen, "n", "vagrant", "node1", ["192.0.2.11", "10.1.0.11"]) is None
