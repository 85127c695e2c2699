"""The one mpirun command line the smoke test, run and doctor's launches start from."""

from __future__ import annotations

from mpicluster.cluster import mpirun
from mpicluster.cluster.mpirun import Mpirun


def test_hosts_in_order_with_their_counts():
    assert mpirun.hosts({"b": 2, "a": 1}) == ["--host", "b:2,a:1", "-np", "3"]
    assert mpirun.exports(["X", "Y"]) == ["-x", "X", "-x", "Y"]


def test_root_rule_and_order():
    argv = Mpirun("/opt/bin/mpirun", 5, root=True).argv(["--host", "a:1"], ["-v"], ["prog"])
    assert argv == ["/opt/bin/mpirun", "--host", "a:1", "--allow-run-as-root", "-v", "prog"]
    assert "--allow-run-as-root" not in Mpirun().argv([], [], ["prog"])


def test_series_spellings():
    five, four = Mpirun(major=5), Mpirun(major=4)
    assert five.tag_output() == ["--output", "tag"]
    assert four.tag_output() == ["--tag-output"]
    assert five.launcher_ssh("-o X") == ["--prtemca", "plm_ssh_args", "-o X"]
    assert four.launcher_ssh("-o X") == ["--mca", "plm_rsh_args", "-o X"]


def test_the_prefix_comes_before_the_callers_options():
    argv = Mpirun("mpirun", prefix="/opt/mpicluster/current").argv(["-np", "2"], ["-v"], ["p"])
    assert argv == ["mpirun", "-np", "2", "--prefix", "/opt/mpicluster/current", "-v", "p"]
