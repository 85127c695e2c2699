"""`mpicluster nodes`: each node's answer judged (pure: RemoteResults in, states out)."""

from __future__ import annotations

import json

from mpicluster.health.states import NodesReport, judged
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


def answer(name: str, out: str = "", code: int = 0, **kw) -> RemoteResult:
    return RemoteResult(name, stdout=out, exit_code=code, **kw)


def test_each_answer_is_one_state_with_its_first_failure():
    ready = judged("n1", answer("n1", json.dumps(HEALTHY)), check=False)
    sick = judged("n2", answer("n2", json.dumps(SICK) + "\n", code=1), check=True)
    gone = judged("n3", answer("n3", error="timed out after 10 s"), check=False)
    never = judged("n4", answer("n4", ""), check=False)
    assert [s.state for s in (ready, sick, gone, never)] == [
        "ready",
        "unhealthy",
        "unreachable",
        "unknown",
    ]
    assert sick.finding["check"] == "stack" and gone.problem == "timed out after 10 s"
    assert never.problem == "no health check has run as root here yet"
    report = NodesReport("c", [ready, sick, gone, never])
    assert report.exit_code == 1 and NodesReport("c", [ready]).exit_code == 0
    assert report.to_dict()["nodes"][1]["finding"]["evidence"] == "1 changed"


def test_a_check_that_could_not_judge_says_why():
    refused = answer("n1", "", code=2, stderr="mpicluster-health: no record of the cluster\n")
    state = judged("n1", refused, check=True)
    assert state.state == "unknown"
    assert (
        state.problem
        == "its health check could not judge: mpicluster-health: no record of the cluster"
    )
    odd = judged("n1", answer("n1", "not json"), check=False)
    assert odd.problem.startswith("its health check's result is not JSON")
