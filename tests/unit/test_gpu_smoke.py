"""The GPU smoke test's pure logic: nccl-tests' output, the mpirun lines of the GPU runs,
how their results are judged and reported, and when the GPU part does not run.

The all_reduce_perf samples in data/ were printed by a small C program that calls
nccl-tests 2.19.6's own printf formats (src/util.cu: writeDeviceReport,
writeResultHeader, writeBenchmarkLinePreamble, writeBenchmarkLineBody with getFloatStr,
writeResultFooter) for made-up timings of 4 ranks on 2 nodes; NCCL INFO lines were put
between them as NCCL_DEBUG=INFO does, and the failure sample uses common.h's NCCLCHECK
and TESTCHECK formats. Trailing spaces are nccl-tests' own.
"""

from __future__ import annotations

import importlib.util
import io
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from mpicluster import remote
from mpicluster.cluster.inventory import parse_inventory
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.render.display import Display
from mpicluster.render.up import show_smoke
from mpicluster.smoke import nccl_tests
from mpicluster.smoke import steps as smoke
from mpicluster.smoke.steps import AllreduceResult, GpuSmoke, PairResult, SmokeReport

DATA = Path(__file__).parent / "data"
GPU_INVENTORY = """\
cluster: t
network: {interface: eth1}
nodes:
  - {name: gpu01, address: 10.0.0.1, gpus: 2}
  - {name: gpu02, address: 10.0.0.2, gpus: 2}
"""
PREFIX = "/opt/mpicluster/current"


def sample(name: str = "all_reduce_perf") -> str:
    return (DATA / f"{name}.txt").read_text()


def inventory(text: str = GPU_INVENTORY):
    return parse_inventory(text)


def base(kind: str = "nccl-tests") -> AllreduceResult:
    return AllreduceResult(False, "gpu01", kind, command="mpirun ...")


# --- nccl-tests' output -------------------------------------------------------------


def test_all_reduce_perf_rows_devices_and_footer_are_read():
    out = nccl_tests.parse(sample())
    assert len(out.rows) == 13  # 8 B .. 128 MiB, x4: the NCCL INFO lines are not rows
    first, last = out.rows[0], out.rows[-1]
    assert (first.bytes, first.count, first.type, first.redop, first.root) == (
        8,
        2,
        "float",
        "sum",
        -1,
    )
    assert first.out_of_place == nccl_tests.Half(18.50, 0.00, 0.00, 0)
    assert last.bytes == 134217728 and last.count == 33554432
    assert last.out_of_place == nccl_tests.Half(6729.39, 19.95, 29.92, 0)
    assert last.in_place == nccl_tests.Half(6796.50, 19.75, 29.62, 0)
    assert all(row.exact for row in out.rows) and out.wrong_rows == []
    assert out.out_of_bounds == 0 and out.avg_busbw_gbs == pytest.approx(10.9208)
    assert out.min_bw_check == "" and out.complete and out.failures == []
    assert (out.version, out.nccl) == ("2.19.6", "2.29.7")
    assert [(d.rank, d.host, d.device) for d in out.devices] == [
        (0, "gpu01", 0),
        (1, "gpu01", 1),
        (2, "gpu02", 0),
        (3, "gpu02", 1),
    ]
    assert {d.name for d in out.devices} == {"NVIDIA H100 80GB HBM3"}
    json.dumps(out.to_dict())


def test_wrong_elements_are_counted_even_in_g_notation():
    out = nccl_tests.parse(sample("all_reduce_perf.wrong"))
    assert out.out_of_bounds == 1
    [row] = out.wrong_rows
    assert row.bytes == 8388608 and row.out_of_place.wrong == 0
    assert row.in_place.wrong == 2097150  # printed with %6g: 2.09715e+06
    assert row.exact is False


def test_an_unchecked_run_has_no_wrong_counts():
    out = nccl_tests.parse(sample("all_reduce_perf.nocheck"))
    assert len(out.rows) == 13
    assert all(r.out_of_place.wrong is None and r.in_place.wrong is None for r in out.rows)
    assert all(r.exact is None for r in out.rows) and out.wrong_rows == []


def test_the_bandwidth_check_and_failures_are_read():
    text = sample().replace("10.9208 \n", "10.9208 FAILED\n")
    out = nccl_tests.parse(text)
    assert (out.avg_busbw_gbs, out.min_bw_check) == (10.9208, "FAILED")
    failed = nccl_tests.parse(sample("all_reduce_perf.nccl_error"))
    assert failed.rows == [] and not failed.complete and len(failed.devices) == 4
    assert failed.failures[0].startswith("gpu02: Test NCCL failure common.cu:1249")


def test_nccl_version_codes_and_exit_statuses():
    assert nccl_tests.nccl_version(22907) == "2.29.7"
    assert nccl_tests.nccl_version(21805) == "2.18.5"
    assert nccl_tests.nccl_version(2805) == "2.8.5"  # before 2.9: major*1000
    # src/common.h's testResult_t is the exit status
    assert (nccl_tests.OK, nccl_tests.NCCL_ERROR, nccl_tests.WRONG_OR_SLOW) == (0, 3, 7)
    assert "NCCL error" in nccl_tests.exit_meaning(3)
    assert "NCCL_TESTS_MIN_BW" in nccl_tests.exit_meaning(7)
    assert nccl_tests.exit_meaning(139) == "exit status 139"


# --- the mpirun lines ----------------------------------------------------------------


def command(kind: str, text: str = GPU_INVENTORY, major: int = 5, user: str = "root") -> str:
    inv = inventory(text)
    return smoke.mpirun_command(ClusterPlan.of(inv), major, user, kind)


def test_nccl_tests_runs_one_rank_per_gpu_over_the_hostfile():
    assert command("nccl-tests") == (
        f"{PREFIX}/bin/mpirun --hostfile /etc/mpicluster/hostfile -np 4 --map-by slot "
        f"--allow-run-as-root --prefix {PREFIX} "
        "--mca btl_tcp_if_include eth1 --prtemca oob_tcp_if_include eth1 "
        "-x NCCL_DEBUG=INFO -x NCCL_DEBUG_SUBSYS=INIT,NET "
        f"{PREFIX}/bin/all_reduce_perf -b 8 -e 128M -f 4 -g 1 -c 1"
    )


def test_nccl_says_which_network_it_chose():
    """NCCL_DEBUG=INFO's lines as NCCL 2.29's init.cc, net_ib and net_socket print them."""
    ib = "\n".join(
        [
            "gpu01:811:811 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; "
            "OOB eth0:10.0.0.1<0>",
            "gpu01:811:811 [0] NCCL INFO Using network IB",
            "gpu02:90:90 [1] NCCL INFO Using network IB",
            "#  Rank  0 Group  0 Pid    811 on      gpu01 device  0 [0x1b] NVIDIA H100",
        ]
    )
    assert nccl_tests.networks(ib) == {"IB": "[0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]"}
    sockets = (
        "gpu01:811:811 [0] NCCL INFO NET/IB : No device found.\n"
        "gpu01:811:811 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n"
        "gpu01:811:811 [0] NCCL INFO Using network Socket\n"
    )
    assert nccl_tests.networks(sockets) == {"Socket": "[0]eth0:10.0.0.1<0>"}
    assert nccl_tests.networks("# nccl-tests version 2.19.6") == {}
    assert all(nccl_tests.INFO_LINE.search(x) for x in sockets.splitlines())
    assert nccl_tests.INFO_LINE.search("gpu01:811:811 [0] NCCL WARN Cuda failure") is None


def test_the_cuda_and_torch_programs_and_a_non_root_open_mpi_4_user():
    line = command("cuda", major=4, user="mpi")
    assert line == (
        f"{PREFIX}/bin/mpirun --hostfile /etc/mpicluster/hostfile -np 4 --map-by slot "
        f"--prefix {PREFIX} --mca btl_tcp_if_include eth1 --mca oob_tcp_if_include eth1 "
        "--mca pml_base_verbose 10 "
        f"{PREFIX}/libexec/mpicluster/cuda_allreduce 1 1024 1048576 16777216"
    )
    assert "--allow-run-as-root" not in line
    assert command("torch").endswith(
        f"{PREFIX}/venv/bin/python /etc/mpicluster/smoke/torch_allreduce.py "
        "10.0.0.1 29500 1 1024 1048576 16777216"
    )


def test_nodes_without_gpus_or_with_own_slots_are_left_out_by_name():
    mixed = """\
cluster: t
nodes:
  - {name: head, slots: 8}
  - {name: g1, address: 10.0.0.11, gpus: 2}
  - {name: g2, gpus: 4, slots: 16}
"""
    line = command("torch", mixed)
    assert " --host g1:2,g2:4 -np 6 --map-by slot " in line and "--hostfile" not in line
    # rank 0 runs on the first GPU node: the rendezvous is there, not on the head
    assert "/torch_allreduce.py 10.0.0.11 29500 " in line


def test_the_ranks_say_which_pml_carried_the_run():
    """pml_base_verbose 10's lines (as Open MPI 5.0.7's pml_base_select.c writes them) give
    the selected PML; they are left out of what a failure shows."""
    lines = [
        "[node1:4211] mca: base: components_open: found loaded component ob1",
        "[node1:4211] select: initializing pml component ucx",
        "[node1:4211] select: init returned failure for component ucx",
        "[node1:4211] select: initializing pml component ob1",
        "[node1:4211] select: init returned priority 20",
        "[node1:4211] selected ob1 best priority 20",
        "[node1:4211] select: component ob1 selected",
        "[node2:977] select: component ob1 selected",
        "[node2:977] check:select: checking my pml ob1 against process [[4686,1],0] pml ob1",
    ]
    assert smoke.selected_pmls("\n".join(lines)) == ["ob1"]
    assert smoke.selected_pmls(lines[-2] + "\n[node3:5] select: component ucx selected") == [
        "ob1",
        "ucx",
    ]
    assert all(smoke.PML_CHATTER.search(x) for x in lines)
    assert smoke.PML_CHATTER.search("[node1:4211] mpi4py: rank 0 failed") is None
    assert " --mca pml_base_verbose 10 " in command("mpi4py")
    assert "pml_base_verbose" not in command("nccl-tests") + command("torch")


def test_the_cpu_runs_place_up_to_two_ranks_on_every_node():
    line = command("mpi4py")
    hosts = ",".join(f"{n.name}:2" for n in inventory().nodes)
    assert line.startswith(f"{PREFIX}/bin/mpirun --host {hosts} -np {2 * len(inventory().nodes)} ")
    assert "--map-by" not in line


# --- judging a run -------------------------------------------------------------------


def nodes(*names: str):
    return [n for n in inventory().nodes if n.name in names]


def test_a_good_nccl_tests_run_passes_with_its_table():
    run = smoke.judge_nccl_tests(base(), 0, sample(), sample(), nodes("gpu01", "gpu02"))
    assert run.ok, run.problem
    assert run.ranks == 4 and run.hosts == ["gpu01", "gpu01", "gpu02", "gpu02"]
    assert run.library == "nccl-tests 2.19.6, NCCL 2.29.7"
    assert run.details["avg_busbw_gbs"] == pytest.approx(10.9208)
    last = run.sizes[-1]
    assert last["bytes"] == 134217728 and last["elements"] == 33554432
    assert last["seconds"] == pytest.approx(6729.39e-6)
    assert (last["algbw_gbs"], last["busbw_gbs"], last["exact"]) == (19.95, 29.92, True)
    assert last["in_place"]["busbw_gbs"] == 29.62


def test_nccl_tests_wrong_values_error_and_missing_nodes_fail():
    wrong = smoke.judge_nccl_tests(
        base(), 7, sample("all_reduce_perf.wrong"), "", nodes("gpu01", "gpu02")
    )
    assert not wrong.ok
    assert wrong.problem == "wrong allreduce result at 8388608 bytes (2097150 wrong elements)"
    text = sample("all_reduce_perf.nccl_error")
    error = smoke.judge_nccl_tests(base(), 3, text, text, nodes("gpu01", "gpu02"))
    assert error.problem == "all_reduce_perf exited 3 (an NCCL error)"
    assert "Connection refused" in error.cause
    three = [*nodes("gpu01", "gpu02"), *inventory(GPU_INVENTORY.replace("gpu02", "gpu03")).nodes]
    missing = smoke.judge_nccl_tests(base(), 0, sample(), sample(), three)
    assert missing.problem == "no rank ran on gpu03"
    slow = sample().replace("10.9208 \n", "10.9208 FAILED\n")
    assert "NCCL_TESTS_MIN_BW" in smoke.judge_nccl_tests(base(), 7, slow, slow, []).problem


def report_line(**extra) -> str:
    data = {
        "ranks": 4,
        "hosts": ["gpu01", "gpu01", "gpu02", "gpu02"],
        "library": "Open MPI v5.0.7, package: Open MPI root@gpu01 Distribution",
        "results": [
            {
                "elements": 1024,
                "bytes": 4096,
                "iterations": 100,
                "seconds": 2.1e-05,
                "algbw_gbs": 0.195,
                "busbw_gbs": 0.2925,
                "exact": True,
                "wrong_ranks": [],
            }
        ],
        "devices": ["NVIDIA H100 80GB HBM3"] * 4,
    }
    return json.dumps(data | extra) + "\n"


def test_the_cuda_and_torch_reports_are_judged_like_the_mpi_allreduce():
    good = smoke.judge_report(base("cuda"), 0, report_line(), "", nodes("gpu01", "gpu02"))
    assert good.ok and good.devices == ["NVIDIA H100 80GB HBM3"] * 4
    nccl = {"torch_built_with": "2.27.3", "loaded": "/opt/mpicluster/current/lib/libnccl.so.2"}
    torch = smoke.judge_report(
        base("torch"), 0, report_line(nccl=nccl), "", nodes("gpu01", "gpu02")
    )
    assert torch.ok and torch.details == {"nccl": nccl}
    cpu = smoke.judge_report(base("torch"), 0, '{"skipped": "PyTorch is a CPU build"}\n', "", [])
    assert cpu.ok and cpu.skipped == "PyTorch is a CPU build"


def test_a_cuda_error_is_named_by_the_program_itself():
    stderr = (
        "cuda_allreduce: gpu02 rank 3: cudaSetDevice(local_rank % ndev) failed: "
        "invalid device ordinal\n"
        "MPI_ABORT was invoked on rank 3 in communicator MPI_COMM_WORLD\nwith errorcode 2.\n"
    )
    run = smoke.judge_report(base("cuda"), 2, "", stderr, nodes("gpu01", "gpu02"))
    assert run.problem == "mpirun exited 2"
    assert run.cause.startswith("cuda_allreduce: gpu02 rank 3: cudaSetDevice")
    crash = smoke.judge_report(base("cuda"), 139, "", "Segmentation fault (signal 11)", [])
    assert "not CUDA-aware" in crash.cause


# --- when the GPU part runs, and the report ------------------------------------------


ABSENT = GPU_INVENTORY + "stack: {gpus_present: false, nccl: {cuda_archs: ['9.0']}}\n"


def test_no_gpus_present_means_not_run_and_says_why():
    mpi = AllreduceResult(True, "gpu01")
    assert smoke.gpu_not_run(inventory(ABSENT), mpi) == (
        "stack.gpus_present is false: built for GPUs, none to run on"
    )
    packages = inventory(GPU_INVENTORY + "stack: {install: packages}\n")
    assert "stack.install is packages" in smoke.gpu_not_run(ClusterPlan.of(packages), mpi)
    failed = AllreduceResult(False, "gpu01", problem="mpirun exited 1")
    assert "MPI allreduce failed" in smoke.gpu_not_run(inventory(), failed)
    assert smoke.gpu_not_run(inventory(), mpi) == ""


def test_runs_the_inventory_did_not_build_are_skipped():
    inv = inventory(
        GPU_INVENTORY + "stack: {openmpi: {cuda: false}, horovod: {enabled: false}, "
        "nccl_tests: {enabled: false}}\n"
    )
    assert "nccl_tests.enabled is false" in smoke.gpu_skipped(ClusterPlan.of(inv), "nccl-tests")
    assert "not CUDA-aware" in smoke.gpu_skipped(ClusterPlan.of(inv), "cuda")
    assert "horovod" not in smoke.gpu_skipped(ClusterPlan.of(inv), "torch")  # PyTorch is there
    no_torch = inventory(
        GPU_INVENTORY + "stack: {pytorch: {enabled: false}, horovod: {enabled: false}}\n"
    )
    assert "pytorch.enabled is false" in smoke.gpu_skipped(ClusterPlan.of(no_torch), "torch")
    assert [smoke.gpu_skipped(inventory(), kind) for kind in smoke.GPU_KINDS] == [
        "",
        "",
        "",
    ]


def test_the_gpu_runs_go_in_order_and_a_hang_spares_the_rest(monkeypatch):
    ran = []

    def fake(plan, timeout, kind):
        ran.append((kind, timeout))
        if kind == "cuda":
            return AllreduceResult(False, "gpu01", kind, problem="mpirun hung for 300 s")
        return AllreduceResult(True, "gpu01", kind)

    monkeypatch.setattr(smoke, "run_allreduce", fake)
    inv = inventory()
    gpu = smoke.run_gpu_smoke(ClusterPlan.of(inv), AllreduceResult(True, "gpu01"), print)
    assert ran == [("nccl-tests", 300), ("cuda", 300)]
    assert [r.kind for r in gpu.runs] == ["nccl-tests", "cuda", "torch"]
    assert gpu.runs[2].ok and gpu.runs[2].skipped == "not run: the cuda run hung (and would again)"
    assert not gpu.ok


def test_absent_gpus_touch_no_node(monkeypatch):
    monkeypatch.setattr(smoke, "run_allreduce", lambda *a, **k: pytest.fail("ran"))
    inv = inventory(ABSENT)
    gpu = smoke.run_gpu_smoke(ClusterPlan.of(inv), AllreduceResult(True, "gpu01"), print)
    assert gpu.ok and gpu.runs == [] and gpu.not_run == smoke.GPUS_ABSENT


def report(gpu: GpuSmoke | None) -> SmokeReport:
    pairs = [PairResult(a, b, True) for a in ("gpu01", "gpu02") for b in ("gpu01", "gpu02")]
    mpi = AllreduceResult(True, "gpu01", ranks=4, hosts=["gpu01", "gpu02"], library="Open MPI")
    return SmokeReport(["gpu01", "gpu02"], pairs, mpi, 1.0, None, gpu)


def test_the_report_counts_gpu_runs_failed_but_not_gpu_runs_not_run():
    assert report(None).ok and report(None).to_dict()["gpu"] is None
    absent = report(GpuSmoke(not_run=smoke.GPUS_ABSENT))
    assert absent.ok
    assert absent.to_dict()["gpu"] == {"ok": True, "not_run": smoke.GPUS_ABSENT, "runs": []}
    skipped = AllreduceResult(True, "gpu01", "torch", skipped="PyTorch is a CPU build")
    passed = AllreduceResult(True, "gpu01", "nccl-tests", details={"avg_busbw_gbs": 10.9})
    assert report(GpuSmoke(runs=[passed, skipped])).ok
    failed = AllreduceResult(False, "gpu01", "cuda", problem="mpirun exited 2")
    bad = report(GpuSmoke(runs=[passed, failed, skipped]))
    assert not bad.ok
    data = bad.to_dict()
    assert data["ok"] is False and data["gpu"]["ok"] is False and data["gpu"]["not_run"] is None
    assert [r["kind"] for r in data["gpu"]["runs"]] == ["nccl-tests", "cuda", "torch"]
    assert data["gpu"]["runs"][2]["skipped"] == "PyTorch is a CPU build"
    assert data["gpu"]["runs"][0]["details"] == {"avg_busbw_gbs": 10.9}
    json.dumps(data)


def render(rep: SmokeReport) -> str:
    display = Display()
    buffer = io.StringIO()
    display.out = Console(file=buffer, width=200, highlight=False)
    display.err = Console(file=buffer, width=200, highlight=False)
    show_smoke(display, rep)
    return buffer.getvalue()


def test_the_gpu_tables_and_the_reason_not_run_are_shown():
    assert (
        "GPU smoke test not run: stack.gpus_present is false: built for GPUs, none to run on"
        in (render(report(GpuSmoke(not_run=smoke.GPUS_ABSENT))))
    )
    nccl = smoke.judge_nccl_tests(base(), 0, sample(), sample(), nodes("gpu01", "gpu02"))
    torch = AllreduceResult(True, "gpu01", "torch", skipped="PyTorch is a CPU build")
    cuda = AllreduceResult(False, "gpu01", "cuda", problem="mpirun exited 2", cause="boom")
    text = render(report(GpuSmoke(runs=[nccl, cuda, torch])))
    assert "NCCL all_reduce_perf (nccl-tests): 4 ranks on 2 nodes" in text
    assert "128 MiB" in text and "29.920" in text and "exact" in text
    assert "GPUs: 4 x NVIDIA H100 80GB HBM3" in text
    assert "average bus bandwidth: 10.9208 GB/s" in text
    assert "CUDA-aware MPI allreduce (device memory) from gpu01: mpirun exited 2" in text
    assert "torch.distributed allreduce (NCCL): skipped (PyTorch is a CPU build)" in text
    # the transport each run's ranks named
    nccl.details["nccl_network"] = {"Socket": "[0]eth0:10.0.0.1<0>"}
    cuda = AllreduceResult(True, "gpu01", "cuda", ranks=4, hosts=["gpu01"], sizes=[])
    cuda.details["pml"] = "ucx"
    text = render(report(GpuSmoke(runs=[nccl, cuda])))
    assert (
        "NCCL's network: Socket [0]eth0:10.0.0.1<0> (TCP sockets: no InfiniBand/RoCE NCCL "
        "could use)" in text
    )
    assert "carried by pml ucx (UCX)" in text


# --- the torch.distributed program's helpers (its torch parts need a GPU) -------------


@pytest.fixture(scope="module")
def torch_program():
    spec = importlib.util.spec_from_file_location(
        "torch_allreduce", remote.RANK_PROGRAMS / "torch_allreduce.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # imports torch only in main()
    return module


def test_the_torch_program_reads_ranks_versions_and_the_loaded_nccl(torch_program):
    env = {
        "OMPI_COMM_WORLD_RANK": "5",
        "OMPI_COMM_WORLD_SIZE": "8",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    }
    assert torch_program.mpi_ranks(env) == (5, 8, 1)
    assert torch_program.mpi_ranks({}) == (0, 1, 0)
    assert torch_program.version_text((2, 27, 3)) == "2.27.3"
    assert torch_program.version_text(21805) == "2.18.5"
    assert torch_program.version_text(2708) == "2.7.8"
    venv = "/opt/mpicluster/stacks/0123456789abcdef/venv/lib/python3.11/site-packages"
    maps = (
        "7f2a1c000000-7f2a1c200000 r--p 00000000 fd:01 1311 "
        f"{venv}/torch/lib/libtorch_cuda.so\n"
        "7f2a10000000-7f2a10400000 r--p 00000000 fd:01 2233 "
        f"{venv}/nvidia/nccl/lib/libnccl.so.2\n"
        "7f2a10400000-7f2a18000000 r-xp 00400000 fd:01 2233 "
        f"{venv}/nvidia/nccl/lib/libnccl.so.2\n"
        "7ffd4b5e0000-7ffd4b601000 rw-p 00000000 00:00 0                          [stack]\n"
    )
    assert torch_program.loaded_library(maps) == f"{venv}/nvidia/nccl/lib/libnccl.so.2"
    assert torch_program.loaded_library("7ffd4b5e0000-7ffd4b601000 rw-p 0 00:00 0\n") is None
    algbw, busbw = torch_program.bandwidths(1048576, 0.001, 4)
    assert algbw == pytest.approx(4.194304) and busbw == pytest.approx(4.194304 * 1.5)


@pytest.mark.parametrize(
    ("torch", "reason"),
    [
        (None, "PyTorch is not installed in this Python"),
        (SimpleNamespace(version=SimpleNamespace(cuda=None)), "PyTorch is a CPU build"),
    ],
)
def test_the_torch_program_skips_without_cuda_pytorch(
    torch_program, monkeypatch, capsys, torch, reason
):
    monkeypatch.setitem(sys.modules, "torch", torch)  # None: `import torch` fails
    monkeypatch.setattr(sys, "argv", ["torch_allreduce.py", "10.0.0.1", "29500"])
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "0")
    with pytest.raises(SystemExit) as done:
        torch_program.main()
    assert done.value.code == 0
    assert json.loads(capsys.readouterr().out) == {"skipped": reason}
