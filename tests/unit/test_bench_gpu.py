"""bench's GPU part judged on nccl-tests' output captured from a real run
(tests/unit/data/gpu-h200: all_reduce_perf on one H200, captured by the one-box GPU
proof) and on the recorded failures beside it."""

from __future__ import annotations

import shlex
from pathlib import Path

from mpicluster.bench import gpu
from tests.unit.test_gpu_captures import said, stdout_of

DATA = Path(__file__).parent / "data"


def test_the_h200s_all_reduce_perf_gives_each_sizes_bus_bandwidth():
    found = gpu.judge("all_reduce_perf", stdout_of(said("run-nccl-tests.txt")), 0, None)
    assert found.problem == "" and found.ranks == 1
    assert [r["bytes"] for r in found.rows] == [8 << (2 * i) for i in range(13)]
    assert all(r["exact"] is True and r["efficiency"] is None for r in found.rows)  # one node
    assert found.rows[-1]["busbw_gbs"] == 0 and found.avg_busbw_gbs == 0  # one rank: no bus
    across = gpu.judge("all_reduce_perf", (DATA / "all_reduce_perf.txt").read_text(), 0, 12.5)
    assert across.problem == "" and across.ranks > 1
    largest = across.rows[-1]
    assert largest["efficiency"] == round(largest["busbw_gbs"] / 12.5, 3)


def test_wrong_values_and_nccl_errors_are_the_tests_problem():
    wrong = gpu.judge("all_gather_perf", (DATA / "all_reduce_perf.wrong.txt").read_text(), 7, None)
    assert wrong.problem.startswith("wrong values at ")
    error = (DATA / "all_reduce_perf.nccl_error.txt").read_text()
    failed = gpu.judge("sendrecv_perf", error, 3, None)
    assert "NCCL failure" in failed.problem or "exited 3" in failed.problem
    assert gpu.judge("sendrecv_perf", "", 137, None).problem.startswith("sendrecv_perf exited 137")


def test_the_gpu_command_places_a_rank_per_gpu(tmp_path):
    from tests.unit.test_command_lines import inventory

    text = (
        "cluster: g\nstack: {install: source}\n"
        "nodes:\n  - {name: g1, address: 10.0.0.1, gpus: 2}\n"
        "  - {name: g2, address: 10.0.0.2, gpus: 2}\n"
    )
    plan = inventory(tmp_path, text)
    assert gpu.wanted(plan)
    words = shlex.split(gpu.command(plan, "sendrecv_perf", 5))
    assert words[-11:] == [f"{plan.layout.mpi_bin}/sendrecv_perf", *gpu.ARGS]
    assert "-np" in words and words[words.index("-np") + 1] == "4"
