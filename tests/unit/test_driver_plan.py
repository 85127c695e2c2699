"""The plan reads the driver before anything is built: the CUDA a node's driver runs
against its toolkit's and its PyTorch wheel's (pure logic over node facts)."""

from __future__ import annotations

import pytest

from mpicluster.stack import cuda_compat
from mpicluster.stack.cuda_compat import needs, refusal, release, torch_cuda
from mpicluster.stack.prepare import check_drivers
from mpicluster.stack.wheels import Wheelhouse
from mpicluster.util.errors import MpiclusterError
from tests.unit.plans import plan_of
from tests.unit.test_gpu_path import CUDA_FACTS, GPU_INVENTORY, H100
from tests.unit.test_torch_build import CUDA_WHEEL, _wheel


def test_releases_and_a_wheels_cuda_are_read_from_what_pip_and_nvidia_smi_say():
    assert release("13.0.88") == (13, 0) and release("12.8") == (12, 8)
    assert release(None) is None and release("N/A") is None
    # PyTorch's own index labels its builds; PyPI's pin the CUDA runtime
    assert torch_cuda("2.9.1+cu128", []) == "12.8"
    assert torch_cuda("2.7.0+cu118", []) == "11.8"
    assert (
        torch_cuda("2.13.0+cpu", ['cuda-toolkit[cudart]==13.0.3; platform_system == "Linux"'])
        is None
    )
    assert (
        torch_cuda("2.14.1", ['cuda-toolkit[cublas,cudart]==13.0.3; platform_system == "Linux"'])
        == "13.0"
    )
    assert (
        torch_cuda("2.6.0", ["nvidia-cuda-runtime-cu12==12.4.127; platform_system == 'Linux'"])
        == "12.4"
    )
    assert torch_cuda("2.6.0", ["filelock"]) is None


@pytest.mark.parametrize(
    ("driver", "runs", "toolkit", "torch", "expected"),
    [
        # a driver of the CUDA 12 era and PyPI's CUDA 13 PyTorch (the case)
        (
            "550.54.15",
            "12.4",
            "12.4.1",
            ("2.13.0", "13.0"),
            "driver 550.54.15 runs CUDA <= 12.4; PyTorch 2.13.0 (built for CUDA 13.0) needs "
            "CUDA 13: set stack.pytorch.index_url: https://download.pytorch.org/whl/cu124, "
            "or upgrade to a driver >= 580.65.06",
        ),
        # a CUDA 13 toolkit on a 570 driver: builds cleanly against the stubs, fails later
        (
            "570.86.10",
            "12.8",
            "13.0.88",
            None,
            "driver 570.86.10 runs CUDA <= 12.8; the CUDA toolkit at /usr/local/cuda (13.0.88) "
            "needs CUDA 13: install a CUDA 12.x toolkit and point stack.cuda_home at it, or "
            "upgrade to a driver >= 580.65.06",
        ),
        # same major, newer minor: minor version compatibility, not refused
        ("550.54.15", "12.4", "12.8.0", ("2.9.1+cu128", "12.8"), None),
        ("580.95.05", "13.0", "13.0.88", ("2.13.0", "13.0"), None),
        # no CUDA version from nvidia-smi: the GPU check names that node, not this one
        ("580.95.05", None, "13.0.88", None, None),
    ],
)
def test_a_driver_is_refused_only_for_a_newer_major_with_the_fix(
    driver, runs, toolkit, torch, expected
):
    assert refusal(driver, runs, needs(toolkit, "/usr/local/cuda", torch)) == expected


def test_the_hint_names_the_newest_pytorch_index_the_driver_runs():
    assert cuda_compat.torch_fix((12, 5)).endswith("/whl/cu124")
    assert cuda_compat.torch_fix((12, 9)).endswith("/whl/cu129")
    assert cuda_compat.torch_fix((11, 4)) == (
        "set stack.pytorch.index_url to a PyTorch index for CUDA 11.x"
    )


def test_a_newer_minor_is_a_note_in_the_plan():
    assert cuda_compat.notes("12.4", needs("12.8.0", "/usr/local/cuda", None)) == [
        "the CUDA toolkit at /usr/local/cuda (12.8.0) is newer than the driver's CUDA 12.4: "
        "it runs under CUDA's minor version compatibility"
    ]
    assert cuda_compat.notes("12.8", needs("12.4.1", "/usr/local/cuda", None)) == []


def _facts(driver: str, runs: str, toolkit: str = "13.0.88") -> dict:
    return CUDA_FACTS | {"cuda": toolkit, "gpus": H100 | {"driver": driver, "cuda": runs}}


@pytest.fixture
def house(tmp_path) -> dict[str, Wheelhouse]:
    _wheel(tmp_path, CUDA_WHEEL, ['cuda-toolkit[cudart]==13.0.3; platform_system == "Linux"'])
    return {"cp311-x86_64": Wheelhouse(tmp_path, (), {CUDA_WHEEL: "1" * 64})}


def test_up_refuses_before_building_and_names_every_node(house):
    inv = plan_of(GPU_INVENTORY + "stack: {pytorch: {version: 2.13.0, cuda: true}}\n")
    old = _facts("550.54.15", "12.4", toolkit="12.4.1")
    with pytest.raises(MpiclusterError) as caught:
        check_drivers(inv, {"g1": old, "g2": old}, house)
    assert caught.value.message.startswith("g1: driver 550.54.15 runs CUDA <= 12.4; PyTorch 2.13.0")
    assert caught.value.message.endswith("(and 1 more node(s)); nothing was changed on any node")
    new = _facts("580.95.05", "13.0")
    assert check_drivers(inv, {"g1": new, "g2": new}, house) == []


def test_without_pytorch_only_the_toolkit_counts_and_absent_gpus_are_not_asked(house):
    inv = plan_of(GPU_INVENTORY + "stack: {pytorch: {enabled: false}, horovod: {enabled: false}}\n")
    assert check_drivers(
        inv, {n: _facts("570.86.10", "12.8", "12.9.1") for n in ("g1", "g2")}, house
    ) == [
        f"{n}: the CUDA toolkit at /usr/local/cuda (12.9.1) is newer than the driver's CUDA "
        "12.8: it runs under CUDA's minor version compatibility"
        for n in ("g1", "g2")
    ]
    absent = plan_of(GPU_INVENTORY + "stack: {gpus_present: false, nccl: {cuda_archs: ['9.0']}}\n")
    assert check_drivers(absent, {"g1": CUDA_FACTS, "g2": CUDA_FACTS}, house) == []


def test_each_pytorch_index_has_its_own_wheelhouse(tmp_path):
    from mpicluster.stack.fingerprint import Platform
    from mpicluster.stack.wheels import ensure_wheelhouse, house_name

    platform = Platform.for_wheels("3.12", "x86_64")
    cu128 = "https://download.pytorch.org/whl/cu128"
    assert house_name(platform, None) == "cp312-x86_64"
    assert house_name(platform, cu128).startswith("cp312-x86_64-")
    assert house_name(platform, cu128) != house_name(platform, cu128.replace("128", "126"))
    with pytest.raises(MpiclusterError, match=house_name(platform, cu128)):
        ensure_wheelhouse(
            tmp_path, platform, ["torch==2.9.1"], print, offline=True, index_url=cu128
        )


def test_the_inventory_takes_an_index_url_and_refuses_what_is_not_one():
    inv = plan_of(
        GPU_INVENTORY + "stack: {pytorch: {index_url: 'https://download.pytorch.org/whl/cu128'}}\n"
    )
    assert inv.stack.pytorch.index_url.endswith("/cu128")
    with pytest.raises(MpiclusterError, match="not a URL"):
        plan_of(GPU_INVENTORY + "stack: {pytorch: {index_url: 'download.pytorch.org'}}\n")
