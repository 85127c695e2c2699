"""`doctor --cordon` and `bench --cordon`: which nodes a run cordons and returns
(cluster/cordon_verdicts.py, pure), each report as cordoning reads it (doctor/cordoning.py,
bench/cordoning.py), the changes made in one read and one write (health/cordons.py), and
the commands' --cordon. No node is reached: the nodes' files are a dict here."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from mpicluster import bench, doctor
from mpicluster.bench.report import BenchReport, PairFigure, SizeFigure
from mpicluster.bench.verdict import Finding
from mpicluster.cli import app
from mpicluster.cluster import cordons
from mpicluster.cluster.cordon_verdicts import Failure, Findings, cordoned_for, decide, reason
from mpicluster.cluster.cordons import REASON_MAX, Cordon, CordonState
from mpicluster.cluster.layout import CORDONS
from mpicluster.doctor.model import CheckReport, DoctorReport, failed, passed, warned
from mpicluster.health import apply_findings
from mpicluster.nodes import transport
from mpicluster.nodes.transport import GroupResult, RemoteResult
from tests.unit.plans import plan_of

NODES = ["n1", "n2", "n3", "n4"]
INVENTORY = "cluster: t\nssh: {user: alice}\nnodes:\n" + "".join(
    f"  - {{name: {name}, address: 10.0.0.{i}}}\n" for i, name in enumerate(NODES, 1)
)
PLAN = plan_of(INVENTORY)


def cordoned(*entries: tuple[str, str, str]) -> CordonState:
    """A state with (node, by, reason) cordons."""
    return CordonState(len(entries), {n: Cordon(why, 1.0, by, "me@here") for n, by, why in entries})


def doctor_report(*checks: CheckReport) -> DoctorReport:
    return DoctorReport("t", list(checks))


def every_node(name: str, *results) -> CheckReport:
    """A check that passed on every node, but for `results`' nodes."""
    said = {r.node for r in results}
    passes = [passed(n, "fine") for n in NODES if n not in said]
    return CheckReport(name, name, [*results, *passes])


def decided(report: DoctorReport, state: CordonState | None = None):
    return decide(doctor.cordon_findings(report, PLAN), state or CordonState())


# -- what a doctor run cordons --------------------------------------------------------


def test_a_failure_on_one_node_cordons_it_with_the_finding_as_the_reason():
    report = doctor_report(
        every_node("ssh"),
        every_node("disk", failed("n2", "/tmp is not writable by alice (mode 0755)", "chmod")),
        every_node("clock", failed("n2", "clock off by 9 s", "chrony")),
    )
    decision = decided(report)
    assert decision.cordon == {"n2": "doctor: disk: /tmp is not writable by alice (mode 0755)"}
    assert decision.give_back == [] and decision.notes == []


def test_a_warning_cordons_nothing():
    report = doctor_report(every_node("disk", warned("n2", "/tmp: 300 MiB free", "clean it")))
    assert not decided(report).changes


def test_a_failure_of_the_whole_cluster_cordons_nothing_and_says_so():
    report = doctor_report(
        every_node("versions", failed(None, "two MPI builds: 5.0.7 on n1, n2; 4.1.4 on n3", "up"))
    )
    decision = decided(report)
    assert not decision.changes
    assert decision.notes == [
        "not cordoning for versions: it failed for the whole cluster, not a node"
    ]


def test_a_pair_failure_cordons_neither_end_but_doctor_s_blame_of_one_node_does():
    pair = failed("n1", "ssh n1 -> n3: connection timed out", "firewall", peer="n3")
    blame = failed("n4", "ssh into n4 fails from all 3 nodes tried", "authorized_keys")
    decision = decided(doctor_report(every_node("mesh", pair, blame)))
    assert decision.cordon == {"n4": "doctor: mesh: ssh into n4 fails from all 3 nodes tried"}
    assert decision.notes == [
        "not cordoning for mesh between two nodes (n1-n3): either end may be the cause, "
        "so neither is cordoned"
    ]


def test_an_unreachable_node_fails_the_ssh_check_and_is_cordoned():
    report = doctor_report(
        every_node("ssh", failed("n3", "alice@10.0.0.3:22: connection timed out", "power")),
        CheckReport("disk", "disk", [passed(n, "fine") for n in ("n1", "n2", "n4")], ["n3"]),
    )
    assert decided(report).cordon == {"n3": "doctor: ssh: alice@10.0.0.3:22: connection timed out"}
    # without the ssh check (--check disk), a node no check could reach is such a failure
    alone = doctor_report(report.checks[1])
    assert decided(alone).cordon == {"n3": "doctor: ssh: doctor could not reach n3"}


def test_the_hostfile_check_cordons_nobody():
    stale = failed("n2", "/etc/mpicluster/hostfile lists n1, n2, n3, n4; the inventory: n1", "up")
    assert not decided(doctor_report(every_node("hostfile", stale))).changes


def test_the_users_check_cordons_nobody():
    # a person's account missing on a node is hers to fix: the MPI user's jobs run there
    missing = failed("n2", "alice has no account on n2", "run `mpicluster up`")
    assert not decided(doctor_report(every_node("users", missing))).changes


def test_a_check_every_node_fails_is_the_cluster_s_fault():
    disk = every_node("disk", *(failed(n, "/tmp is not writable", "chmod") for n in NODES))
    gpus = every_node("gpus", failed("n3", "2 GPUs, the inventory says 4", "nvidia-smi"))
    decision = decided(doctor_report(every_node("ssh"), disk, gpus))
    assert decision.cordon == {"n3": "doctor: gpus: 2 GPUs, the inventory says 4"}
    assert decision.notes == [
        "not cordoning for disk: every node fails it (4 nodes): the cluster's fault, not a node's"
    ]


def test_failures_that_would_cordon_every_node_cordon_none():
    checks = [every_node(f"check{i}", failed(n, f"broken {i}", "fix")) for i, n in enumerate(NODES)]
    decision = decided(doctor_report(*checks))
    assert not decision.changes
    assert decision.notes == [
        "not cordoning: every node fails a check (n1: check0, n2: check1, n3: check2, "
        "n4: check3): the cluster's fault, not a node's"
    ]
    # a node cordoned already that fails too counts: the other three are no lone fault
    state = cordoned(("n1", "operator", "bad disk"))
    assert not decided(doctor_report(*checks), state).changes


def test_a_one_node_cluster_is_cordoned_when_its_node_fails():
    plan = plan_of("cluster: t\nnodes:\n  - {name: n1, address: 10.0.0.1}\n")
    report = doctor_report(CheckReport("disk", "disk", [failed("n1", "full", "clean")]))
    assert decide(doctor.cordon_findings(report, plan), CordonState()).cordon == {
        "n1": "doctor: disk: full"
    }


def test_a_node_cordoned_already_keeps_its_cordon():
    state = cordoned(("n2", "operator", "bad disk"))
    report = doctor_report(every_node("disk", failed("n2", "/tmp is not writable", "chmod")))
    decision = decided(report, state)
    assert not decision.changes


# -- what a doctor run returns ---------------------------------------------------------


def test_doctor_returns_its_own_cordon_once_the_node_passes():
    state = cordoned(("n2", "doctor", "doctor: disk: /tmp is not writable"))
    decision = decided(doctor_report(every_node("ssh"), every_node("disk")), state)
    assert decision.give_back == ["n2"] and decision.cordon == {}


def test_an_operator_s_cordon_and_bench_s_are_never_returned_by_doctor():
    state = cordoned(
        ("n1", "operator", "bad disk"),
        ("n2", "bench", "bench: slow node: n2: 0.10 GB/s, expected 1.00"),
        ("n3", "doctor", "doctor: disk: full"),
    )
    decision = decided(doctor_report(every_node("ssh"), every_node("disk")), state)
    assert decision.give_back == ["n3"]


def test_a_node_this_run_did_not_look_at_is_not_returned():
    state = cordoned(("n2", "doctor", "doctor: disk: full"), ("n3", "doctor", "doctor: ssh: x"))
    disk = CheckReport("disk", "disk", [passed(n, "fine") for n in ("n1", "n3", "n4")], ["n2"])
    ssh = every_node("ssh", failed("n2", "connection timed out", "power"))
    assert decided(doctor_report(ssh, disk), state).give_back == ["n3"]
    # --perf after a failed launch looked at no node
    perf = CheckReport("perf", "perf", [], ["every node: the launch failed (measuring needs it)"])
    assert decided(doctor_report(every_node("disk"), perf), state).give_back == []


def test_a_node_is_returned_only_when_the_check_it_was_cordoned_for_ran_again():
    state = cordoned(("n2", "doctor", "doctor: disk: full"))
    assert decided(doctor_report(every_node("clock")), state).give_back == []
    assert decided(doctor_report(every_node("clock"), every_node("disk")), state).give_back == [
        "n2"
    ]


def test_a_pair_failure_keeps_its_ends_cordoned():
    state = cordoned(("n2", "doctor", "doctor: disk: full"))
    pair = failed("n1", "ssh n1 -> n2: refused", "sshd", peer="n2")
    assert (
        decided(doctor_report(every_node("disk"), every_node("mesh", pair)), state).give_back == []
    )


def test_a_failure_of_the_whole_cluster_returns_nobody():
    state = cordoned(("n2", "doctor", "doctor: disk: full"))
    whole = every_node("launch", failed(None, "every pair launch failed", "look"))
    decision = decided(doctor_report(every_node("disk"), whole), state)
    assert decision.give_back == []
    assert "not returning n2 yet: it passes, but launch failed for the whole cluster" in (
        decision.notes
    )


# -- reasons ---------------------------------------------------------------------------


def test_a_reason_is_one_line_of_at_most_the_longest_kept():
    text = reason("doctor", "launch", "mpirun said:\n  ORTE\twas\x07 unable\r\n" + "x" * 400)
    assert text.startswith("doctor: launch: mpirun said: ORTE was unable x")
    assert len(text) == REASON_MAX and text.endswith("...")
    assert cordons.check_reason(text) == text
    assert cordoned_for("doctor", text) == "launch"
    assert cordoned_for("bench", text) is None
    assert cordoned_for("doctor", "bad disk") is None


def test_the_changes_are_one_newer_version():
    state = cordoned(("n1", "operator", "bad disk"), ("n2", "doctor", "doctor: disk: full"))
    decision = decide(
        Findings(
            "doctor",
            {"disk": set(NODES)},
            [Failure("disk", "/tmp is not writable", "n3", ("n3",))],
        ),
        state,
    )
    new = decision.applied(state, by="doctor", who="me@here", at=5.0)
    assert new.version == state.version + 1
    assert sorted(new.cordons) == ["n1", "n3"]
    assert new.cordons["n3"] == Cordon(
        "doctor: disk: /tmp is not writable", 5.0, "doctor", "me@here"
    )


# -- bench ---------------------------------------------------------------------------------


def bench_report(
    flagged: list[Finding], pairs=(("n1", "n2"), ("n2", "n3"), ("n3", "n4"), ("n1", "n4"))
):
    report = BenchReport("t", flagged=flagged)
    report.pairs = [PairFigure(p, 1.0, 20.0, 1.0, 1, False) for p in pairs]
    report.allreduce = [SizeFigure(8, 0.1, 0.1, None, True)]
    return report


def test_bench_cordons_a_slow_node_and_neither_end_of_a_slow_link():
    slow = Finding("node", ("n2",), 0.1, 1.0, "every pair with n2 is slow")
    link = Finding("link", ("n3", "n4"), 0.2, 1.0, "n3 and n4 are each fast with other nodes")
    decision = decide(bench.cordon_findings(bench_report([slow, link])), CordonState())
    assert decision.cordon == {
        "n2": "bench: slow node: n2: 0.10 GB/s, expected 1.00 (every pair with n2 is slow)"
    }
    assert decision.notes == [
        "not cordoning for slow link between two nodes (n3-n4): either end may be the "
        "cause, so neither is cordoned"
    ]


def test_bench_returns_its_own_cordon_measured_fast_with_two_partners_and_nothing_else():
    state = cordoned(
        ("n1", "bench", "bench: slow node: n1: 0.10 GB/s"),
        ("n2", "doctor", "doctor: disk: full"),
        ("n3", "bench", "bench: slow node: n3: 0.10 GB/s"),
    )
    decision = decide(bench.cordon_findings(bench_report([])), state)
    assert decision.give_back == ["n1", "n3"]
    # a node measured with one partner only cannot be told fast
    few = bench_report([], pairs=(("n1", "n2"), ("n2", "n3")))
    assert decide(bench.cordon_findings(few), state).give_back == []
    # an allreduce that was not exact is the whole cluster's: nobody returned
    wrong = bench_report([])
    wrong.allreduce = [SizeFigure(8, 0.1, 0.1, None, False)]
    decision = decide(bench.cordon_findings(wrong), state)
    assert decision.give_back == [] and not decision.cordon


# -- the changes made on the nodes: one read, one write ----------------------------------


class Nodes:
    """The nodes' cordon files, read and written through a stand-in transport."""

    def __init__(self, monkeypatch, state: CordonState | None = None, down=()):
        self.files = {name: state.to_json() if state else "" for name in NODES}
        self.hostfiles: dict[str, str] = {}
        self.down, self.reads, self.writes = set(down), 0, 0
        monkeypatch.setattr(transport, "run_everywhere", self.run_everywhere)

    def run_everywhere(self, plan, command, *, nodes=None, stdin=None, **kw):
        targets = [n.name for n in (nodes if nodes is not None else plan.nodes)]
        found = GroupResult()
        if stdin is None:
            self.reads += 1
        else:
            self.writes += 1
        for name in targets:
            if name in self.down:
                found[name] = RemoteResult(name, error="connection timed out")
            elif stdin is None:
                found[name] = RemoteResult(name, f"{self.files[name]}@@nproc\n2\n", exit_code=0)
            else:
                texts = json.loads(stdin)
                self.files[name] = texts[CORDONS]
                self.hostfiles[name] = texts["/etc/mpicluster/hostfile"]
                found[name] = RemoteResult(name, exit_code=0)
        return found

    def state(self, name: str) -> CordonState:
        return cordons.parse(self.files[name])


def test_the_changes_are_read_once_and_written_once_to_every_node(monkeypatch):
    nodes = Nodes(monkeypatch, cordoned(("n2", "doctor", "doctor: disk: full")))
    found = Findings(
        "doctor",
        {"disk": set(NODES)},
        [Failure("disk", "full", "n3", ("n3",)), Failure("disk", "full", "n4", ("n4",))],
    )
    applied = apply_findings(PLAN, found)
    assert (nodes.reads, nodes.writes) == (1, 1)
    assert applied.written == NODES and applied.missed == {} and applied.problem == ""
    state = nodes.state("n1")
    assert state.version == 2 and sorted(state.cordons) == ["n3", "n4"]
    assert state.cordons["n3"].by == "doctor" and state.cordons["n3"].reason == "doctor: disk: full"
    assert nodes.hostfiles["n1"].split() == ["n1", "slots=2", "n2", "slots=2"]
    assert applied.to_dict()["cordoned"] == {"n3": "doctor: disk: full", "n4": "doctor: disk: full"}
    assert applied.to_dict()["returned"] == ["n2"]
    # nothing to change (the disk check did not run: n3 and n4 stay): read, not written
    again = apply_findings(PLAN, Findings("doctor", {"clock": set(NODES)}, []))
    assert (nodes.reads, nodes.writes, again.written) == (2, 1, [])


def test_an_unreachable_node_is_cordoned_without_its_slots(monkeypatch):
    nodes = Nodes(monkeypatch, down=["n3"])
    found = Findings("doctor", {"ssh": set(NODES)}, [Failure("ssh", "timed out", "n3", ("n3",))])
    applied = apply_findings(PLAN, found)
    assert applied.problem == "" and applied.written == ["n1", "n2", "n4"]
    assert applied.missed == {"n3": "connection timed out"}
    assert "n3" not in nodes.hostfiles["n1"] and list(nodes.state("n2").cordons) == ["n3"]


def test_a_state_that_cannot_be_written_is_the_result_s_problem(monkeypatch):
    Nodes(monkeypatch, down=["n4"])  # n4 answers nothing: its slots (its cores) are unknown
    found = Findings("doctor", {"disk": set(NODES)}, [Failure("disk", "full", "n2", ("n2",))])
    applied = apply_findings(PLAN, found)
    assert applied.written == [] and "every ready node's slots" in applied.problem


# -- the commands --------------------------------------------------------------------------


@pytest.fixture
def inventory(tmp_path, monkeypatch):
    monkeypatch.setenv("MPICLUSTER_HOME", str(tmp_path / "state"))
    path = tmp_path / "inventory.yaml"
    path.write_text(INVENTORY)
    return str(path)


def test_doctor_cordon_cordons_then_returns_and_keeps_its_exit_code(inventory, monkeypatch):
    nodes = Nodes(monkeypatch)
    broken = doctor_report(every_node("disk", failed("n2", "/tmp is not writable", "chmod")))
    monkeypatch.setattr(doctor, "run_doctor", lambda plan, **kw: broken)
    runner = CliRunner()
    done = runner.invoke(app, ["doctor", inventory, "--cordon"])
    assert done.exit_code == 5, done.output
    assert "cordoned n2: doctor: disk: /tmp is not writable" in done.output
    assert nodes.state("n1").cordons["n2"].by == "doctor"
    plain = runner.invoke(app, ["doctor", inventory])  # without --cordon: nothing changes
    assert plain.exit_code == 5 and nodes.writes == 1 and "cordoned" not in plain.output
    monkeypatch.setattr(doctor, "run_doctor", lambda plan, **kw: doctor_report(every_node("disk")))
    done = runner.invoke(app, ["doctor", inventory, "--cordon", "--json"])
    assert done.exit_code == 0, done.output
    said = json.loads(done.output)["cordons"]
    assert (said["by"], said["cordoned"], said["returned"]) == ("doctor", {}, ["n2"])
    assert nodes.state("n3").cordons == {}


def test_bench_cordon_cordons_a_slow_node(inventory, monkeypatch):
    nodes = Nodes(monkeypatch)
    slow = Finding("node", ("n2",), 0.1, 1.0, "every pair with n2 is slow")
    monkeypatch.setattr(bench, "run_bench", lambda plan, **kw: bench_report([slow]))
    done = CliRunner().invoke(app, ["bench", inventory, "--cordon"])
    assert done.exit_code == 5, done.output
    assert "cordoned n2: bench: slow node: n2: 0.10 GB/s, expected 1.00" in done.output
    assert nodes.state("n4").cordons["n2"].by == "bench"
