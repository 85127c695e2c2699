"""The GPU smoke test's judges on real output from a GPU (tests/unit/data/gpu-h200: one
H200, captured by tests/gpu/prove_on_one_gpu.sh; its README says how)."""

from __future__ import annotations

import json
from pathlib import Path

from mpicluster.smoke import nccl_tests
from mpicluster.smoke import steps as smoke
from mpicluster.smoke.steps import AllreduceResult

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


def test_what_nccl_said_of_gpudirect_rdma():
    # the H200: no InfiniBand, NCCL on sockets, GPUDirect RDMA off for its one "card"
    assert nccl_tests.gpudirect(said("run-nccl-tests.txt")) == {
        "enabled": [],
        "disabled": ["Socket:eth0"],
        "used": False,
    }
    # NCCL 2.29's own format strings (graph/topo.cc, transport/net.cc) on an IB node
    ib = (
        "n1:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Enabled for HCA 0 'mlx5_0'\n"
        "n1:1:1 [0] NCCL INFO NET/IB : GPU Direct RDMA Disabled for HCA 1 'mlx5_1'\n"
        "n1:1:1 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA\n"
    )
    assert nccl_tests.gpudirect(ib) == {
        "enabled": ["IB:mlx5_0"],
        "disabled": ["IB:mlx5_1"],
        "used": True,
    }
    proxied = "n1:1:1 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[0] [send] via NET/IB/1(3)/GDRDMA\n"
    assert nccl_tests.gpudirect(proxied)["used"] is True
    staged = "n1:1:1 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0\n"
    assert nccl_tests.gpudirect(staged) is None
    assert nccl_tests.gpudirect("") is None


def test_up_says_whether_nccl_used_gpudirect_rdma_over_infiniband():
    from mpicluster.render.up import _transport

    run = AllreduceResult(True, "g1", "nccl-tests")
    run.details = {
        "nccl_network": {"IB": "[0]mlx5_0:1/IB"},
        "gpudirect_rdma": {"enabled": [], "disabled": ["IB:mlx5_0"], "used": False},
    }
    lines = _transport(run)
    assert lines[0] == "  NCCL's network: IB [0]mlx5_0:1/IB"
    assert lines[1].startswith("  GPUDirect RDMA: not used: NCCL staged GPU memory through host")
    run.details["gpudirect_rdma"] = {"enabled": ["IB:mlx5_0"], "disabled": [], "used": True}
    assert _transport(run)[1] == "  GPUDirect RDMA: used (IB:mlx5_0)"
    # on sockets there is no RDMA to speak of
    run.details["nccl_network"] = {"Socket": "[0]eth0:192.0.2.2<0>"}
    assert len(_transport(run)) == 1
