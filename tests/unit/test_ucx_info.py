"""ucx_info beside the smoke test's allreduce: its two listings read (real captures of UCX
1.13.1 and 1.22.0 in data/ucx/, see its README), the record the smoke keeps (never a
failure of its own), and the line under the allreduce's table where pml ucx carried it."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from mpicluster.cluster.inventory import parse_inventory
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.nodes import transport
from mpicluster.render.up import _transport
from mpicluster.smoke import steps as smoke
from mpicluster.smoke import ucx_info
from mpicluster.smoke.steps import AllreduceResult, SmokeReport

DATA = Path(__file__).parent / "data" / "ucx"
INVENTORY = """\
cluster: t
nodes:
  - {name: cpu01, address: 10.0.0.1}
  - {name: gpu01, address: 10.0.0.2, gpus: 2}
"""


def said(version: str) -> str:
    """What the smoke's one command prints: `ucx_info -v`, then `ucx_info -d`."""
    return "".join((DATA / f"ucx_info-{flag}-{version}.txt").read_text() for flag in "vd")


def test_ucx_1_13_and_1_22_are_read_with_every_transport_and_device():
    old = ucx_info.parse(said("1.13.1"))
    assert old == {
        "version": "1.13.1",
        "transports": {
            "self": ["memory0"],
            "tcp": ["podman1", "lo", "eth0"],
            "sysv": ["memory"],
            "posix": ["memory"],
            "cma": ["memory"],
        },
    }
    new = ucx_info.parse(said("1.22.0"))
    assert new == {
        "version": "1.22.0",
        "transports": {
            "self": ["memory"],
            "tcp": ["eth0", "lo"],
            "sysv": ["memory"],
            "posix": ["memory"],
            "cma": ["memory"],
        },
    }
    assert list(new["transports"]) == ["self", "tcp", "sysv", "posix", "cma"]  # as listed


def test_output_without_a_version_line_is_no_record():
    assert ucx_info.parse("") is None
    assert ucx_info.parse((DATA / "ucx_info-d-1.22.0.txt").read_text()) is None
    only_version = ucx_info.parse((DATA / "ucx_info-v-1.22.0.txt").read_text())
    assert only_version == {"version": "1.22.0", "transports": {}}


def plan() -> ClusterPlan:
    return ClusterPlan.of(parse_inventory(INVENTORY))


def answering(monkeypatch, result: transport.RemoteResult) -> list[str]:
    commands: list[str] = []

    def fake_run_on(plan, node, command, **kw):
        commands.append(command)
        return transport.RemoteResult(
            node.name, result.stdout, result.stderr, result.exit_code, result.error
        )

    monkeypatch.setattr(transport, "run_on", fake_run_on)
    return commands


def test_the_record_names_the_node_and_a_failure_is_only_a_note(monkeypatch):
    cluster = plan()
    node = cluster.nodes[0]
    commands = answering(monkeypatch, transport.RemoteResult("cpu01", said("1.22.0"), "", 0))
    record = smoke.ucx_record(cluster, node)
    assert record == {"node": "cpu01", **ucx_info.parse(said("1.22.0"))}
    assert shlex.split(commands[0])[-1] == f"{cluster.layout.mpi_bin}/ucx_info"
    # no ucx_info in the stack: the command prints nothing and exits 0
    answering(monkeypatch, transport.RemoteResult("cpu01", "", "", 0))
    assert smoke.ucx_record(cluster, node) is None
    # -v answered, -d hung: what was read, and why the rest is missing
    version = (DATA / "ucx_info-v-1.22.0.txt").read_text()
    answering(monkeypatch, transport.RemoteResult("cpu01", version, "", 124))
    assert smoke.ucx_record(cluster, node) == {
        "node": "cpu01",
        "version": "1.22.0",
        "transports": {},
        "problem": "ucx_info gave no answer in 20 s",
    }
    answering(monkeypatch, transport.RemoteResult("cpu01", error="connection refused"))
    assert smoke.ucx_record(cluster, node) == {"node": "cpu01", "problem": "connection refused"}


def test_ucx_info_runs_where_the_ranks_name_their_pml(monkeypatch):
    """The CPU run's on the head, the CUDA-aware run's on the first GPU node; the others
    (nccl-tests, Horovod, torch) say nothing of a PML and get none."""
    cluster = plan()
    assert smoke.ucx_node(cluster, "mpi4py").name == "cpu01"
    assert smoke.ucx_node(cluster, "cuda").name == "gpu01"
    assert [smoke.ucx_node(cluster, k) for k in ("nccl-tests", "horovod", "torch")] == [None] * 3
    # a failed run keeps it too (the head's facts and ucx_info answered, mpirun did not)
    facts = "mpirun (Open MPI) 5.0.7\n@@mpirun-exit 0\n@@slots\n"

    def fake_run_on(plan, node, command, **kw):
        if "ucx_info" in command:
            return transport.RemoteResult(node.name, said("1.13.1"), "", 0)
        return transport.RemoteResult(node.name, facts, "", 0 if "--version" in command else 1)

    monkeypatch.setattr(transport, "run_on", fake_run_on)
    run = smoke.run_allreduce(cluster, 10, "cuda")
    assert not run.ok
    assert run.details["ucx"]["node"] == "gpu01"
    assert run.details["ucx"]["version"] == "1.13.1"
    data = SmokeReport(["cpu01", "gpu01"], [], run).to_dict()  # what --json prints
    assert json.loads(json.dumps(data))["allreduce"]["details"]["ucx"] == run.details["ucx"]


def carried(pml: str, ucx: dict | None) -> list[str]:
    run = AllreduceResult(True, "cpu01", details={"pml": pml})
    if ucx is not None:
        run.details["ucx"] = ucx
    return _transport(run)


def test_the_line_names_the_transports_where_pml_ucx_carried_the_run():
    record = {"node": "node1", **ucx_info.parse(said("1.22.0"))}
    assert carried("ucx", record) == [
        "  carried by pml ucx (UCX)",
        "  UCX 1.22.0 on node1: self, tcp (eth0, lo), sysv, posix, cma",
    ]
    old = {"node": "node1", **ucx_info.parse(said("1.13.1"))}
    assert carried("ucx", old)[1] == (
        "  UCX 1.13.1 on node1: self, tcp (podman1, lo, eth0), sysv, posix, cma"
    )
    # a GPU node's CUDA transports: UCX names their device "cuda" (src/uct/cuda/base/
    # cuda_iface.c), left out like shared memory's "memory"; InfiniBand's ports are named
    gpu = dict(record, transports={"cuda_copy": ["cuda"], "rc_mlx5": ["mlx5_0:1", "mlx5_1:1"]})
    assert (
        carried("ucx", gpu)[1] == "  UCX 1.22.0 on node1: cuda_copy, rc_mlx5 (mlx5_0:1, mlx5_1:1)"
    )
    # ob1 carried it: nothing new said; ranks split between PMLs: UCX named too
    assert carried("ob1", record) == [
        "  carried by pml ob1 (Open MPI's own BTLs: TCP between nodes)"
    ]
    assert len(carried("ob1,ucx", record)) == 2
    assert carried("ucx", None) == ["  carried by pml ucx (UCX)"]


def test_a_failed_ucx_info_says_why_in_the_same_line():
    hung = {
        "node": "node1",
        "version": "1.22.0",
        "transports": {},
        "problem": "ucx_info gave no answer in 20 s",
    }
    assert carried("ucx", hung)[1] == "  UCX 1.22.0 on node1: ucx_info gave no answer in 20 s"
    refused = {"node": "node1", "problem": "connection refused"}
    assert carried("ucx", refused)[1] == "  UCX on node1: connection refused"
