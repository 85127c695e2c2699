"""Pure logic of the GPU path: what a GPU inventory builds, the GPU presence check before
any change, and the inventory `local up --cuda` writes."""

from __future__ import annotations

import pytest

from mpicluster.local.cluster import render_inventory
from mpicluster.local.spec import LocalSpec
from mpicluster.nodes.facts import check_gpus
from mpicluster.stack import recipe, sources
from mpicluster.stack.fingerprint import fingerprint, platform_of
from mpicluster.util.errors import MpiclusterError, UsageError
from tests.unit.plans import plan_of
from tests.unit.test_stack import FACTS

CUDA_FACTS = FACTS | {
    "cuda": "13.0.88",
    "gpus": {"ok": False, "error": "nvidia-smi not found", "devices": []},
}
H100 = {
    "ok": True,
    "count": 8,
    "names": ["NVIDIA H100 80GB HBM3"],
    "devices": [{"index": str(i), "compute_cap": "9.0"} for i in range(8)],
}
GPU_INVENTORY = "cluster: t\nnodes:\n  - {name: g1, gpus: 8}\n  - {name: g2, gpus: 8}\n"


def test_a_gpu_inventory_builds_nccl_and_nccl_tests_and_only_funcs_is_part_of_the_build():
    inv = plan_of(GPU_INVENTORY)
    assert [s.component for s in sources.needed(inv)] == [
        "openmpi",
        "mpi4py",
        "nccl",
        "nccl_tests",
        "horovod",
    ]
    assert sources.needed(inv)[3].filename == "nccl-tests-2.19.6.tar.gz"
    off = plan_of(GPU_INVENTORY + "stack: {nccl_tests: {enabled: false}}\n")
    assert "nccl_tests" not in [s.component for s in sources.needed(off)]
    cpu = plan_of("cluster: t\nnodes: [{name: a}]\n")
    assert [s.component for s in sources.needed(cpu)] == ["openmpi", "mpi4py", "horovod"]

    facts = CUDA_FACTS | {"gpus": H100}
    platform = platform_of(facts, inv, 8)
    assert platform.gpu_archs == ("9.0",)
    fp, document = fingerprint(platform, sources.needed(inv), inv, "w", "r")
    assert "nccl_tests" in document["sources"]
    assert document["options"]["nccl"] == {"only_funcs": None}
    limited = plan_of(GPU_INVENTORY + "stack: {nccl: {only_funcs: 'AllReduce Sum f32'}}\n")
    assert fingerprint(platform, sources.needed(limited), limited, "w", "r")[0] != fp


def test_nccl_tests_programs_are_named_as_its_makefile_builds_them():
    assert recipe.NCCL_TESTS[0] == "all_reduce_perf"
    assert len(recipe.NCCL_TESTS) == 11
    assert all(name.endswith("_perf") for name in recipe.NCCL_TESTS)


def test_gpu_nodes_must_show_their_gpus_before_anything_changes():
    inv = plan_of(GPU_INVENTORY)
    with pytest.raises(MpiclusterError) as caught:
        check_gpus(inv, {"g1": CUDA_FACTS, "g2": CUDA_FACTS})
    assert caught.value.message == (
        "g1: the inventory says 8 GPU(s), but nvidia-smi is not installed "
        "(nvidia-smi not found) (and 1 more node(s)); nothing was changed on any node"
    )
    assert "stack.gpus_present: false" in caught.value.hint
    fewer = H100 | {"count": 4, "devices": H100["devices"][:4]}
    with pytest.raises(MpiclusterError, match=r"g2: the inventory says 8 GPU\(s\), nvidia-smi "):
        check_gpus(inv, {"g1": CUDA_FACTS | {"gpus": H100}, "g2": CUDA_FACTS | {"gpus": fewer}})
    check_gpus(inv, {"g1": CUDA_FACTS | {"gpus": H100}, "g2": CUDA_FACTS | {"gpus": H100}})
    # more than the inventory lists: the others would sit idle, unseen
    more = H100 | {"count": 9, "devices": [*H100["devices"], H100["devices"][0]]}
    with pytest.raises(
        MpiclusterError, match=r"g1: the inventory says 8 GPU\(s\), nvidia-smi shows 9"
    ):
        check_gpus(inv, {"g1": CUDA_FACTS | {"gpus": more}, "g2": CUDA_FACTS | {"gpus": H100}})
    absent = plan_of(GPU_INVENTORY + "stack: {gpus_present: false, nccl: {cuda_archs: ['9.0']}}\n")
    check_gpus(absent, {"g1": CUDA_FACTS, "g2": CUDA_FACTS})  # build-only: no check


def test_gpus_not_present_needs_the_architectures_to_build_for():
    with pytest.raises(UsageError) as caught:
        plan_of(GPU_INVENTORY + "stack:\n  gpus_present: false\n")
    (line,) = caught.value.lines()
    assert line.startswith("<inventory>:6: stack.gpus_present: false needs stack.nccl.cuda_archs")


def test_local_cuda_needs_a_toolkit_and_the_docker_provider(tmp_path):
    with pytest.raises(UsageError, match="no CUDA toolkit there"):
        LocalSpec(cuda=str(tmp_path))
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nvcc").write_text("")
    with pytest.raises(UsageError, match="only the docker provider"):
        LocalSpec(cuda=str(tmp_path), provider="libvirt")
    assert LocalSpec(cuda=str(tmp_path)).cuda == str(tmp_path)


def test_the_local_cuda_inventory_is_valid_and_asks_for_a_build_without_gpus(tmp_path, monkeypatch):
    monkeypatch.setenv("MPICLUSTER_HOME", str(tmp_path / "home"))
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nvcc").write_text("")
    spec = LocalSpec(name="gpu", nodes=2, cuda=str(tmp_path))
    spec.known_hosts.parent.mkdir(parents=True)
    spec.known_hosts.write_text("")
    keys = {name: tmp_path / name for name in spec.node_names}
    for key in keys.values():
        key.write_text("key")
        key.chmod(0o600)
    target = tmp_path / "gpu.yaml"
    target.write_text(render_inventory(spec, keys))
    inv = plan_of(target.read_text(), path=target)
    assert [n.gpus for n in inv.nodes] == [1, 1]
    assert inv.stack.gpus_present is False and inv.stack.cuda_home == "/usr/local/cuda"
    assert inv.stack.nccl.cuda_archs == ["9.0"]
    assert inv.stack.nccl.only_funcs == "AllReduce Sum f32 * *|SendRecv"
    assert inv.mpi_env["OMPI_MCA_mpi_yield_when_idle"] == "1"  # the nodes share the cores
    assert inv.stack.horovod.cycle_time_ms == 0.1
    plain = render_inventory(LocalSpec(name="cpu", nodes=2), keys)
    assert "gpus:" not in plain and "cuda_home" not in plain and "gpus_present" not in plain


def test_horovod_gpu_operations_build_against_the_stacks_nccl():
    cpu = recipe.horovod_env(cuda_home=None, nccl_home=None)
    assert cpu["HOROVOD_WITH_MPI"] == "1" and "HOROVOD_GPU_OPERATIONS" not in cpu
    gpu = recipe.horovod_env(cuda_home="/usr/local/cuda", nccl_home="/s", cuda_archs=("9.0", "8.0"))
    assert gpu["HOROVOD_GPU_OPERATIONS"] == "NCCL" and gpu["HOROVOD_NCCL_HOME"] == "/s"
    assert gpu["HOROVOD_NCCL_LINK"] == "SHARED" and gpu["HOROVOD_BUILD_CUDA_CC_LIST"] == "90,80"
    assert gpu["CUDA_HOME"] == "/usr/local/cuda"
