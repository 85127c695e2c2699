"""doctor's users check, her own launch (issue 52): how it is started (her login into the
head, then her mpirun) and how its outcome is judged (pure)."""

from __future__ import annotations

import shlex

from mpicluster.doctor.checks import user_mesh
from mpicluster.doctor.launch_proof import PROGRAM, as_user
from mpicluster.doctor.model import Status
from tests.unit.test_doctor_launch import NODES, launch

#: What her launch printed (mpirun 5.0.7, exit 255) on the demo cluster after her node1
#: key's line was taken out of her authorized_keys on node3.
REFUSED_ON_NODE3 = """\
alice@192.168.61.13: Permission denied (publickey).
--------------------------------------------------------------------------
PRTE has lost communication with a remote daemon.

  HNP daemon   : [prterun-node1-23402@0,0] on node node1
  Remote daemon: [prterun-node1-23402@0,2] on node node3

This is usually due to either a failure of the TCP network
connection to the node, or possibly an internal failure of
the daemon itself. We cannot recover from this failure, and
therefore will terminate the job.
--------------------------------------------------------------------------
"""


ADDRESSES = {f"192.168.61.1{i + 1}": node for i, node in enumerate(NODES)}


def judge(launches):
    return user_mesh.judge(launches, ADDRESSES)


def hers(name: str = "alice", **fields):
    found = launch("user", "node1", NODES, **fields)
    found.user = name
    return found


def test_her_launch_is_her_own_login_into_the_head_running_her_mpirun():
    found = hers()
    started = found.started
    assert started[:4] == ["sudo", "-n", "-u", "alice"]
    assert started[4:12] == [
        "ssh", "-o", "BatchMode=yes", "-o", "ControlMaster=no", "-o", "ControlPath=none", "node1"
    ]  # fmt: skip
    assert shlex.split(started[12]) == found.argv  # one word: her login's shell runs it
    assert "--allow-run-as-root" not in found.argv
    assert found.command.startswith("sudo -n -u alice ssh -o BatchMode=yes")
    assert PROGRAM not in found.command and "launch_rank.py" in found.command
    assert found.to_dict()["user"] == "alice"
    assert as_user("bob", "node2", [])[-1] == "node2"


def test_a_launch_across_every_node_passes_naming_where_her_ranks_ran():
    (result,) = judge({"alice": hers()})
    assert result.status == Status.PASS and result.node is None
    assert result.evidence == (
        "alice's own mpirun from node1: a rank on each of node1, node2, node3 "
        "(an mpi4py allreduce), through alice's own node key, ssh config and known hosts"
    )


def test_a_node_that_refuses_her_key_is_the_one_named_with_what_ssh_said():
    (result,) = judge({"alice": hers(output=REFUSED_ON_NODE3, rc=255)})
    assert (result.status, result.node) == (Status.FAIL, "node3")
    assert result.evidence.startswith("alice's own mpirun from node1 across node1, node2, node3: ")
    assert result.evidence.endswith(
        "ssh to node3 failed: alice@192.168.61.13: Permission denied (publickey)."
    )
    assert "mpicluster up --full" in result.fix and "`sudo -u alice ssh node3 true`" in result.fix


def test_open_mpis_own_permission_warning_is_not_taken_for_what_ssh_said():
    # Debian 12's Open MPI 4.1.4 printed this before ssh's line in one CI run
    warning = (
        "[node1:06323] plm:rsh: Warning: setpgid(6329,6329) failed in parent with "
        "errno=Permission denied(13)\n"
    )
    (result,) = judge({"alice": hers(output=warning + REFUSED_ON_NODE3, rc=255)})
    assert result.node == "node3"
    assert result.evidence.endswith(
        "ssh to node3 failed: alice@192.168.61.13: Permission denied (publickey)."
    )
    (alone,) = judge({"alice": hers(output=warning, rc=1)})
    assert "setpgid" not in alone.evidence


def test_her_login_into_the_head_refused_is_the_heads_finding():
    said = "alice@192.168.61.11: Permission denied (publickey).\n"
    (result,) = judge({"alice": hers(output=said, rc=255)})
    assert (result.status, result.node) == (Status.FAIL, "node1")
    assert result.evidence == (
        "alice cannot log in to node1 from node1 with her node key: "
        "alice@192.168.61.11: Permission denied (publickey)."
    )


def test_a_failure_without_a_node_named_is_the_clusters_and_shows_mpiruns_problem():
    (result,) = judge({"alice": hers(output="", rc=None, hung=True)})
    assert (result.status, result.node) == (Status.FAIL, None)
    assert result.evidence.endswith("node1, node2, node3: hung: no result in 15 s")
    assert "`sudo -u alice ssh NODE true`" in result.fix


def test_sudo_refused_to_the_mpi_user_is_a_warning_not_her_fault():
    said = "sudo: a password is required\n"
    (result,) = judge({"bob": hers("bob", output=said, rc=1)})
    assert (result.status, result.node) == (Status.WARN, None)
    assert "`sudo -n -u bob` on node1 said 'sudo: a password is required'" in result.evidence
    assert "passwordless sudo" in result.fix


def test_mpiruns_own_exit_255_naming_no_node_is_not_taken_for_her_login():
    lost = REFUSED_ON_NODE3.replace("node node3", "node node9").splitlines()[1:]
    (result,) = judge({"alice": hers(output="\n".join(lost), rc=255)})
    assert (result.status, result.node) == (Status.FAIL, None)
    assert "mpirun exited 255" in result.evidence


def test_no_launch_no_result():
    assert judge({}) == []
