"""`mpicluster nodes`: each node's answer judged (pure: RemoteResults in, states out)."""

from __future__ import annotations

import json

from mpicluster.cluster.cordons import Cordon, CordonState
from mpicluster.health.states import NodesReport, judged, split
from mpicluster.nodes.transport import RemoteResult

HEALTHY = {"node": "n1", "healthy": True, "findings": [], "at": 1700000000.0}
SICK = {
    "node": "n2",
    "healthy": False,
    "findings": [
        {"check": "disk", "status": "warn", "evidence": "/tmp: 300 MiB free", "fix": "x"},
        {"check": "stack", "status": "fail", "evidence": "1 changed", "fix": "run up"},
    ],
}
STATE = CordonState(3, {"n2": Cordon("bad disk", 1700000000.0, "doctor", "me@here")})


def answer(name: str, health: str = "", code: int = 0, cordons: str = "", **kw) -> RemoteResult:
    out = f"{health}\n@@exit {code}\n@@cordons\n{cordons}"
    return RemoteResult(name, stdout=out, exit_code=0, **kw)


def state(name: str, reply: RemoteResult):
    return judged(name, reply, split(reply) if reply.error is None else None)


def test_each_answer_is_one_state_with_its_first_failure():
    ready = state("n1", answer("n1", json.dumps(HEALTHY)))
    sick = state("n2", answer("n2", json.dumps(SICK), code=1))
    gone = state("n3", RemoteResult("n3", error="timed out after 10 s"))
    never = state("n4", answer("n4"))
    assert [s.state for s in (ready, sick, gone, never)] == [
        "ready",
        "unhealthy",
        "unreachable",
        "unknown",
    ]
    assert sick.finding["check"] == "stack" and gone.problem == "timed out after 10 s"
    assert never.problem == "no health check has run as root here yet"
    report = NodesReport("c", [ready, sick, gone, never])
    assert report.exit_code == 5 and NodesReport("c", [ready]).exit_code == 0
    assert NodesReport("c", [ready, gone]).exit_code == 4  # unreachable, none found broken
    assert NodesReport("c", [gone, never]).exit_code == 5
    assert report.to_dict()["nodes"][1]["finding"]["evidence"] == "1 changed"


def test_a_cordon_outranks_every_other_state_and_carries_its_reason():
    reply = answer("n2", json.dumps(SICK), code=1, cordons=STATE.to_json())
    text, code, cordoned = split(reply)
    assert (json.loads(text)["node"], code, cordoned) == ("n2", 1, STATE.to_json())
    found = state("n2", reply)
    found.cordon = STATE.cordons["n2"]
    assert found.state == "cordoned"
    assert found.to_dict()["cordon"] == {
        "reason": "bad disk",
        "since": 1700000000.0,
        "by": "doctor",
        "who": "me@here",
    }


def test_a_check_that_could_not_judge_says_why():
    refused = answer("n1", "", code=2, stderr="mpicluster-health: no record of the cluster\n")
    found = state("n1", refused)
    assert found.state == "unknown"
    assert found.problem == (
        "its health check could not judge: mpicluster-health: no record of the cluster"
    )
    odd = state("n1", answer("n1", "not json"))
    assert odd.problem.startswith("its health check's result is not JSON")


def test_a_node_slurm_drained_shows_as_drained_with_slurms_reason():
    """With Slurm each answer ends with slurmctld's lines: the first that parses is the
    cluster's view, and a node with a drain flag is drained (after a cordon)."""
    from mpicluster.health.states import slurm_view

    lines = (
        "NodeName=n1 CPUTot=2 State=IDLE Partitions=main\n"
        "NodeName=n2 CPUTot=2 State=IDLE+DRAIN Partitions=main "
        "Reason=mpicluster: disk: /tmp is not writable [root@2026-11-29T07:40:03]\n"
    )
    replies = [answer("n1", cordons="@@slurm\n"), answer("n2", cordons="{}\n@@slurm\n" + lines)]
    view = slurm_view(split(r)[2] for r in replies)
    assert view["n2"] == {
        "states": ["IDLE", "DRAIN"],
        "reason": "mpicluster: disk: /tmp is not writable",
    }
    drained = state("n2", answer("n2", json.dumps(HEALTHY), cordons="{}\n@@slurm\n" + lines))
    drained.slurm = view["n2"]
    ready = state("n1", answer("n1", json.dumps(HEALTHY)))
    ready.slurm = view["n1"]
    assert (drained.state, ready.state) == ("drained", "ready")
    assert drained.to_dict()["slurm"]["reason"].startswith("mpicluster: disk")
    drained.cordon = STATE.cordons["n2"]
    assert drained.state == "cordoned"
