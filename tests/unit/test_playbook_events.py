"""How ansible-runner's events become each node's results: counts, failures, and the
seconds each stage took on each node (`up --json`'s per-node breakdown)."""

from __future__ import annotations

from mpicluster.nodes.ansible_run import HostStats, _Collector


def task(role: str, name: str) -> dict:
    return {"event": "playbook_on_task_start", "event_data": {"role": role, "task": name}}


def result(kind: str, host: str, duration: float, **res) -> dict:
    return {"event": kind, "event_data": {"host": host, "duration": duration, "res": res}}


def test_each_node_gets_the_seconds_of_its_own_tasks_by_stage():
    hosts = {name: HostStats(name) for name in ("a", "b")}
    events = []
    collect = _Collector(hosts, events.append)
    for event in [
        task("base", "Install the packages"),
        result("runner_on_ok", "a", 2.5, changed=True),
        result("runner_on_ok", "b", 0.5),
        task("base", "Note the packages"),
        result("runner_on_ok", "a", 0.25),
        result("runner_on_skipped", "b", 0.0),
        task("ssh_mesh", "Authorize the cluster key"),
        result("runner_on_failed", "b", 1.0, msg="no home"),
        result("runner_on_ok", "a", 0.75),
    ]:
        assert collect(event) is True
    a, b = hosts["a"].to_dict(), hosts["b"].to_dict()
    assert a["stages"] == {"base": 2.8, "ssh_mesh": 0.8}
    assert b["stages"] == {"base": 0.5, "ssh_mesh": 1.0}
    assert (a["status"], a["changed"], b["status"]) == ("changed", 1, "failed")
    assert b["failures"] == ["ssh_mesh: Authorize the cluster key: no home"]
    assert [e.kind for e in events if e.host == "a"] == ["changed", "ok", "ok"]
