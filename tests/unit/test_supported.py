"""Which nodes `up` can provision, from their probe's facts (pure logic)."""

from __future__ import annotations

import pytest

from mpicluster.nodes import supported
from mpicluster.util.errors import MpiclusterError
from tests.unit.plans import plan_of

SOURCE = plan_of("cluster: t\nnodes:\n  - {name: a}\n  - {name: b}\n  - {name: c}\n")
PACKAGES = plan_of("cluster: t\nstack: {install: packages}\nnodes:\n  - {name: a}\n  - {name: b}\n")


def facts(system: str, version: str, python: str, *, apt: bool = True, like: str = "") -> dict:
    return {"os": {"id": system, "version_id": version, "like": like, "apt": apt}, "python": python}


def test_debian_and_ubuntu_with_apt_and_a_new_python_pass():
    found = {
        "a": facts("debian", "12", "3.11"),
        "b": facts("ubuntu", "22.04", "3.10", like="debian"),
        "c": facts("debian", "13", "3.13"),
    }
    supported.check(SOURCE, found)


def test_a_system_without_apt_is_named_with_its_kin():
    found = {"a": facts("debian", "12", "3.11"), "b": facts("rocky", "9.4", "3.9", apt=False)}
    found["c"] = facts("fedora", "41", "3.13", apt=False)
    with pytest.raises(MpiclusterError) as refused:
        supported.check(SOURCE, found)
    assert str(refused.value) == (
        "b: rocky 9.4 has no apt-get, which mpicluster installs with (Debian 12 or 13, "
        "Ubuntu 22.04 or 24.04, or another system with apt) (and 1 more node(s)); "
        "nothing was changed on any node"
    )
    like = supported.why_not(facts("rocky", "9.4", "3.9", apt=False, like="rhel centos"), True)
    assert like and like.startswith("rocky 9.4 (like rhel centos) has no apt-get")


def test_an_old_python_is_refused_only_where_the_source_stack_needs_it():
    old = {"a": facts("ubuntu", "20.04", "3.8", like="debian"), "b": facts("debian", "12", "3.11")}
    with pytest.raises(MpiclusterError, match=r"^a: ubuntu 20.04's Python is 3.8: the source "):
        supported.check(SOURCE, {**old, "c": facts("debian", "12", "3.11")})
    supported.check(PACKAGES, old)  # the distribution's own mpi4py


def test_facts_of_an_older_probe_are_not_refused():
    supported.check(SOURCE, {name: {"os": {"id": "debian"}} for name in "abc"})
    assert supported.python_version("3.x") == ()


def test_slurm_across_two_releases_is_refused_and_one_release_passes():
    slurm = plan_of(
        "cluster: t\nstack: {install: packages}\nscheduler: {type: slurm}\n"
        "nodes:\n  - {name: a}\n  - {name: b}\n  - {name: c}\n"
    )
    one = {name: facts("debian", "13", "3.13") for name in "abc"}
    supported.check(slurm, one)
    mixed = {**one, "a": facts("debian", "12", "3.11")}
    supported.check(SOURCE, mixed)  # without Slurm: one build per release, one world
    with pytest.raises(MpiclusterError) as refused:
        supported.check(slurm, mixed)
    assert str(refused.value) == (
        "scheduler: slurm installs each node's own distribution's Slurm, and these nodes run "
        "2 releases (a: debian 12; b, c: debian 13), whose Slurm daemons do not work "
        "together: give the Slurm cluster nodes of one release; nothing was changed on any node"
    )
