"""The kernel's ARP table limits `local up` raises for big local clusters."""

from __future__ import annotations

from mpicluster.local import host
from mpicluster.nodes import arp_table as neighbour

DEFAULTS = {"gc_thresh1": 128, "gc_thresh2": 512, "gc_thresh3": 1024}


def write(folder, values):
    for key, value in values.items():
        (folder / key).write_text(f"{value}\n")


def read(folder):
    return {key: int((folder / key).read_text()) for key in neighbour.KEYS}


def test_small_cluster_keeps_the_kernel_defaults():
    assert host.neighbour_limits(3, DEFAULTS) == DEFAULTS


def test_32_nodes_outgrow_the_defaults_the_way_the_benchmark_hit_them():
    # 32 containers and this machine, 33 entries each: 33 * 33 = 1089 > gc_thresh3 = 1024
    wanted = host.neighbour_limits(32, DEFAULTS)
    assert wanted["gc_thresh1"] >= 33 * 33
    assert wanted["gc_thresh1"] <= wanted["gc_thresh2"] <= wanted["gc_thresh3"]
    assert wanted["gc_thresh3"] > 2 * 33 * 33


def test_limits_are_only_raised():
    big = {"gc_thresh1": 8192, "gc_thresh2": 32768, "gc_thresh3": 65536}
    assert host.neighbour_limits(32, big) == big
    mixed = {"gc_thresh1": 100000, "gc_thresh2": 512, "gc_thresh3": 1024}
    assert host.neighbour_limits(32, mixed)["gc_thresh1"] == 100000


def test_ensure_writes_the_files_and_says_so(tmp_path):
    write(tmp_path, DEFAULTS)
    said = []
    host.ensure_neighbour_table(32, said.append, root=tmp_path)
    assert read(tmp_path) == host.neighbour_limits(32, DEFAULTS)
    assert len(said) == 1 and "128/512/1024 to " in said[0]
    said.clear()
    host.ensure_neighbour_table(32, said.append, root=tmp_path)  # second run: nothing
    assert said == []


def test_ensure_warns_with_the_command_and_changes_nothing_when_it_may_not(tmp_path):
    write(tmp_path, {"gc_thresh2": 512, "gc_thresh3": 1024})
    # a sysctl nobody may write, not even root (mode 0444), holding a small number
    (tmp_path / "gc_thresh1").symlink_to("/proc/sys/kernel/cap_last_cap")
    current = read(tmp_path)
    said = []
    host.ensure_neighbour_table(32, said.append, root=tmp_path)
    assert len(said) == 1
    assert said[0].startswith("Warning: the kernel's ARP table limits (")
    assert "sysctl -w net.ipv4.neigh.default.gc_thresh1=" in said[0]
    assert read(tmp_path) == current  # all or nothing: gc_thresh2/3 untouched too


def test_no_table_no_change(tmp_path):
    said = []
    host.ensure_neighbour_table(32, said.append, root=tmp_path / "absent")
    assert said == []
