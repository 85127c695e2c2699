"""`up` and `down` never pull a stack from under a running job: the nodes' probe lists
the processes running a stack's programs or libraries, and the plan refuses."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest

from mpicluster.nodes.facts import check_no_job
from mpicluster.util.errors import MpiclusterError
from tests.shipped import load

nodeinfo = load("nodeinfo")


def test_a_program_of_the_stack_is_found_and_others_are_not(tmp_path):
    bin_dir = tmp_path / "stacks" / "abc" / "bin"
    bin_dir.mkdir(parents=True)
    sleep = bin_dir / "sleep"
    shutil.copy2(shutil.which("sleep"), sleep)
    job = subprocess.Popen([str(sleep), "30"])
    other = subprocess.Popen(["sleep", "30"])
    try:
        time.sleep(0.2)
        users = nodeinfo.stack_users(str(tmp_path))
        assert [u["pid"] for u in users] == [job.pid]
        assert users[0]["command"] == f"{sleep} 30"
        assert nodeinfo.stack_users(str(tmp_path / "elsewhere")) == []
    finally:
        job.kill()
        other.kill()
        job.wait()
        other.wait()


def test_the_plan_refuses_to_switch_or_remove_a_busy_stack():
    facts = {
        "node1": {"stack_users": []},
        "node2": {"stack_users": [{"pid": 4242, "command": "python train.py --epochs 3"}]},
    }
    check_no_job(facts, ["node1"], "switching to the new stack")
    with pytest.raises(MpiclusterError) as caught:
        check_no_job(facts, ["node1", "node2"], "removing the stack")
    assert caught.value.message == (
        "node2: a job is running on the active stack (pid 4242: python train.py --epochs 3); "
        "removing the stack would pull the stack from under it; nothing was changed"
    )
