"""The mpi4py suite's runner: which modules each job takes, and each rank's XML files
(main.py --xml writes one per test class, suffixed with the rank) merged into one."""

from __future__ import annotations

from pathlib import Path

from tests import mpi4py_suite, peer_suites

CLASS_XML = """<?xml version="1.0" encoding="UTF-8"?>
<testsuite name="{cls}" tests="2" errors="0" failures="{failures}" skipped="1" time="0.2">
  <testcase classname="{cls}" name="testSend" time="0.1"/>
  <testcase classname="{cls}" name="testRecv" time="0.1">{failure}</testcase>
  <testcase classname="{cls}" name="testGPU" time="0"><skipped message="cupy"/></testcase>
</testsuite>
"""


def test_the_one_node_modules_run_alone_and_the_rest_everywhere():
    across, one = mpi4py_suite.command(False), mpi4py_suite.command(True)
    assert across[:4] == ["python", "main.py", "--xml", "results"]
    assert across[4:6] == ["-e", "test_io|test_file|test_spawn"]
    assert one[4:6] == ["-i", "test_io|test_file|test_spawn"]
    assert "--map-by" in mpi4py_suite.ONE_NODE_RUN


def test_each_ranks_class_files_merge_into_one_and_name_the_class(tmp_path: Path):
    for node, rank in (("node1", 0), ("node2", 1)):
        folder = tmp_path / "job" / node / "results"
        folder.mkdir(parents=True)
        for cls in ("test_p2p_buf.TestP2PBufSelf", "test_p2p_buf.TestP2PBufWorld"):
            broken = rank == 1 and cls.endswith("World")
            failure = '<failure message="3 != 4">Traceback</failure>' if broken else ""
            text = CLASS_XML.format(cls=cls, failures=int(broken), failure=failure)
            (folder / f"TEST-{cls}-20261129010203-{rank}.xml").write_text(text)
    outcomes = mpi4py_suite.keep(tmp_path / "job", tmp_path / "store")
    assert sorted(outcomes) == ["rank-0", "rank-1"]
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == ["rank-0.xml", "rank-1.xml"]
    assert len(outcomes["rank-0"].passed) == 4 and not outcomes["rank-0"].failed
    assert outcomes["rank-1"].failed == {"test_p2p_buf.TestP2PBufWorld.testRecv": "3 != 4"}
    assert outcomes["rank-1"].skipped["test_p2p_buf.TestP2PBufSelf.testGPU"] == "cupy"


def test_a_bare_skip_gets_the_reason_the_suites_source_gives():
    outcome = peer_suites.Outcome(
        skipped={
            "test.parallel.test_torch.TorchTests.test_broadcast_state_gpu": "Skipped",
            "test.parallel.test_torch.TorchTests.test_gpu_x": "No GPUs available",
            "test.parallel.test_torch.TorchTests.test_unknown": "",
        }
    )
    reasons = peer_suites.skip_reasons(outcome)
    assert (
        "hangs on K80s" in reasons["test.parallel.test_torch.TorchTests.test_broadcast_state_gpu"]
    )
    assert reasons["test.parallel.test_torch.TorchTests.test_gpu_x"] == "No GPUs available"
    assert reasons["test.parallel.test_torch.TorchTests.test_unknown"] == ""
