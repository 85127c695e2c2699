"""The node health check's rules under Slurm (mpicluster/health/drain_rules.py), and how
it reads slurmctld's node lines (remote/slurmnode.py)."""

from __future__ import annotations

from mpicluster.health.drain_rules import (
    PASSES,
    PREFIX,
    REASON_MAX,
    Drain,
    SlurmNode,
    decide,
    reason_of,
)
from tests.shipped import load

IDLE = SlurmNode(frozenset({"IDLE"}))
REASON = reason_of("disk", "/tmp is not writable by vagrant (mode 0o755, owner root)")
OURS = SlurmNode(frozenset({"IDLE", "DRAIN"}), REASON)


def test_a_failing_node_is_drained_with_mpiclusters_reason_and_recorded():
    step = decide(False, REASON, IDLE, None, nodes=3, now=100.0)
    assert step.action == "drain"
    assert step.record == Drain(REASON, 100.0, 0)
    assert REASON.startswith(PREFIX + "disk: /tmp is not writable")


def test_it_returns_after_two_passes_in_a_row_and_a_failure_between_starts_again():
    record = Drain(REASON, 1.0)
    first = decide(True, "", OURS, record, nodes=3)
    assert (first.action, first.record.passes) == ("count", 1)
    again = decide(False, REASON, OURS, first.record, nodes=3)
    assert (again.action, again.record.passes) == ("hold", 0)
    one = decide(True, "", OURS, again.record, nodes=3)
    two = decide(True, "", OURS, one.record, nodes=3)
    assert PASSES == 2 and (one.action, two.action, two.record) == ("count", "resume", None)


def test_an_operators_drain_is_never_resumed_nor_taken_over():
    theirs = SlurmNode(frozenset({"IDLE", "DRAIN"}), "disk swap, ticket 42")
    assert decide(True, "", theirs, None, nodes=3).action == "none"
    assert decide(False, REASON, theirs, None, nodes=3).action == "none"
    # an operator's drain over mpicluster's: the record is released, nothing resumed
    over = decide(True, "", theirs, Drain(REASON, 1.0, 1), nodes=3)
    assert (over.action, over.record) == ("release", None)
    # the reason's text is no proof: mpicluster's words without its record stay drained
    looks_ours = SlurmNode(frozenset({"IDLE", "DRAIN"}), REASON)
    assert decide(True, "", looks_ours, None, nodes=3).action == "none"


def test_a_resume_by_hand_ends_the_claim_and_a_failure_drains_again_next_time():
    record = Drain(REASON, 1.0)
    step = decide(False, REASON, IDLE, record, nodes=3)
    assert (step.action, step.record) == ("release", None)
    assert decide(False, REASON, IDLE, None, nodes=3).action == "drain"


def test_the_clusters_fault_drains_nothing():
    # up is changing the nodes
    assert decide(False, REASON, IDLE, None, changing=True, nodes=3).action == "cluster"
    # more than half the cluster would be drained by mpicluster
    assert decide(False, REASON, IDLE, None, drained_elsewhere=1, nodes=3).action == "cluster"
    assert decide(False, REASON, IDLE, None, drained_elsewhere=1, nodes=4).action == "drain"
    assert decide(False, REASON, IDLE, None, drained_elsewhere=2, nodes=4).action == "cluster"
    # one node alone is its own cluster: drained
    assert decide(False, REASON, IDLE, None, nodes=1).action == "drain"
    # a node mpicluster drained stays drained while up runs
    assert decide(False, REASON, OURS, Drain(REASON, 1.0), changing=True).action == "hold"


def test_a_job_on_the_node_makes_it_busy():
    assert SlurmNode(frozenset({"MIXED"})).busy
    assert SlurmNode(frozenset({"ALLOCATED", "DRAIN"})).busy
    assert not IDLE.busy and not OURS.busy
    assert OURS.drained and SlurmNode(frozenset({"DRAINED"})).drained


def test_reasons_are_one_printable_line_of_bounded_length():
    reason = reason_of("gpus", "GPU 0: Xid 79\n(fallen off the bus)\t" + "x" * 400)
    assert "\n" not in reason and "\t" not in reason and len(reason) == REASON_MAX
    assert reason.startswith("mpicluster: gpus: GPU 0: Xid 79 (fallen off the bus) x")
    assert reason.endswith("...")


def test_records_are_read_back_and_damaged_ones_are_none():
    assert Drain.of(Drain(REASON, 5.0, 1).to_dict()) == Drain(REASON, 5.0, 1)
    assert Drain.of(None) is None and Drain.of({"at": 1}) is None
    assert Drain.of({"reason": "r", "at": "soon"}) is None


#: `scontrol -o show nodes` as Slurm 22.05 and 24.11 print it (trimmed).
SCONTROL = (
    "NodeName=node1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 CPUTot=2 State=IDLE "
    "ThreadsPerCore=1 Partitions=main LastBusyTime=2026-11-29T07:00:01\n"
    "NodeName=node2 Arch=x86_64 CPUAlloc=0 CPUTot=2 State=IDLE+DRAIN ThreadsPerCore=1 "
    "Partitions=main Reason=mpicluster: disk: /tmp is not writable by vagrant "
    "(mode 0o755, owner root) [root@2026-11-29T07:40:03] Comment=(null)\n"
    "NodeName=node3 CPUAlloc=2 State=MIXED+DRAIN* Partitions=main "
    "Reason=disk swap, ticket [42] [admin@2026-11-29T07:41:00] "
    "ReservationName=maint\n"
)


def test_slurmctlds_node_lines_give_each_nodes_states_and_reason():
    slurmnode = load("slurmnode")
    found = slurmnode.parse_nodes(SCONTROL)
    assert found["node1"] == {"states": ["IDLE"], "reason": ""}
    assert found["node2"] == {
        "states": ["IDLE", "DRAIN"],
        "reason": "mpicluster: disk: /tmp is not writable by vagrant (mode 0o755, owner root)",
    }
    assert found["node3"] == {"states": ["MIXED", "DRAIN"], "reason": "disk swap, ticket [42]"}
