"""The GPU smoke test's judges on real output from a GPU (tests/unit/data/gpu-h200: one
H200, captured by tests/gpu/prove_on_one_gpu.sh; its README says how)."""

from __future__ import annotations

import json
from pathlib import Path

from mpicluster.verify import nccl_tests, smoke
from mpicluster.verify.smoke import AllreduceResult

DATA = Path(__file__).parent / "data" / "gpu-h200"


def said(name: str) -> str:
    return (DATA / name).read_bytes().decode("utf-8", "replace")


def stdout_of(text: str) -> str:
    """What the smoke test reads as rank 0's standard output: without Open MPI's bracketed
    verbose lines (the capture holds stdout and stderr together)."""
    return "\n".join(line for line in text.splitlines() if not line.startswith("["))


def test_cuda_aware_allreduce_on_two_ranks_of_one_h200_is_judged_exact():
    text = said("run-cuda.txt")
    judged = smoke.judge_report(AllreduceResult(False, "box", "cuda"), 0, stdout_of(text), text, [])
    # the JSON line follows Open MPI's warning and a NUL on the same line
    assert judged.ok, judged.problem
    assert judged.ranks == 2 and judged.devices == ["NVIDIA H200", "NVIDIA H200"]
    assert [size["elements"] for size in judged.sizes] == smoke.GPU_SIZES
    assert all(size["exact"] for size in judged.sizes)
    assert judged.library.startswith("Open MPI v5.0.7")
    assert smoke.selected_pmls(text) == ["ob1"]


def test_all_reduce_perf_on_one_h200_parses_and_names_the_network():
    text = said("run-nccl-tests.txt")
    parsed = nccl_tests.parse(stdout_of(text))
    assert len(parsed.rows) == 13  # 8 B to 128 MiB in steps of x4
    assert parsed.rows[-1].bytes == 134217728
    assert parsed.rows[-1].out_of_place.algbw_gbs == 2009.8  # one rank: a copy on the GPU
    assert parsed.avg_busbw_gbs == 0  # one rank moves nothing between GPUs
    assert parsed.out_of_bounds == 0
    assert nccl_tests.networks(text) == {"Socket": "[0]eth0:192.0.2.2<0>"}
    judged = smoke.judge_nccl_tests(
        AllreduceResult(False, "box", "nccl-tests"), 0, stdout_of(text), text, []
    )
    assert judged.ok, judged.problem
    assert judged.library == "nccl-tests 2.19.6, NCCL 2.29.7"


def test_torch_over_nccl_with_a_world_of_one_reports_the_nccl_it_loaded():
    text = said("run-torch.txt")
    judged = smoke.judge_report(
        AllreduceResult(False, "box", "torch"), 0, stdout_of(text), text, []
    )
    assert judged.ok, judged.problem
    assert judged.library == "PyTorch 2.11.0+cu130 (CUDA 13.0, NCCL 2.28.9)"
    assert judged.details["nccl"]["loaded"].endswith("nvidia/nccl/lib/libnccl.so.2")


def test_the_node_probe_read_the_h200_as_the_plan_needs_it():
    facts = json.loads((DATA / "node-facts.json").read_text())
    gpus = facts["gpus"]
    assert (gpus["count"], gpus["driver"], gpus["cuda"]) == (1, "580.159.04", "13.0")
    assert gpus["devices"][0]["compute_cap"] == "9.0"
    assert facts["cuda"] == "13.0.88"
