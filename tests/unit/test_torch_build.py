"""Which PyTorch build the stack installs, and which NCCL it loads (pure logic)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from mpicluster.stack import recipe, sources, wheels
from mpicluster.stack.fingerprint import fingerprint, platform_of
from mpicluster.stack.prepare import torch_spec
from mpicluster.stack.sources import pip_requirement as torch_requirement
from mpicluster.stack.wheels import Wheelhouse, torch_wheel
from mpicluster.util.errors import MpiclusterError
from tests.unit.plans import plan_of
from tests.unit.test_gpu_path import CUDA_FACTS, GPU_INVENTORY, H100

CPU_WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
CUDA_WHEEL = "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl"


def _wheel(folder: Path, name: str, requires: list[str]) -> None:
    version = name.split("-")[1]
    with zipfile.ZipFile(folder / name, "w") as archive:
        metadata = "Metadata-Version: 2.1\nName: torch\nVersion: " + version + "\n"
        metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
        archive.writestr(f"torch-{version}.dist-info/METADATA", metadata)


@pytest.fixture
def house(tmp_path) -> Wheelhouse:
    """A wheelhouse with both builds, as this machine's pip gives (the +cpu file beside
    PyPI's CUDA build)."""
    _wheel(tmp_path, CPU_WHEEL, ["filelock"])
    _wheel(
        tmp_path,
        CUDA_WHEEL,
        [
            'cuda-toolkit[cudart]==13.0.3; platform_system == "Linux"',
            'nvidia-nccl-cu13==2.29.7; platform_system == "Linux"',
        ],
    )
    files = {CPU_WHEEL: "0" * 64, CUDA_WHEEL: "1" * 64, "numpy-2.0.0-cp311.whl": "2" * 64}
    return Wheelhouse(tmp_path, (), files)


def test_the_requirement_names_the_build_and_pip_picks_as_pip_does(house):
    assert torch_requirement("2.13.0", "auto") == "torch==2.13.0"
    assert torch_requirement("2.13.0", True) == "torch==2.13.0,!=2.13.0+cpu"
    assert torch_requirement("2.13.0", False) == "torch==2.13.0+cpu"
    # `==2.13.0` matches the +cpu file too, and pip prefers it (a local label sorts higher)
    assert torch_wheel(house, "torch==2.13.0").filename == CPU_WHEEL
    cuda = torch_wheel(house, torch_requirement("2.13.0", True))
    assert (cuda.filename, cuda.cuda, cuda.nccl) == (CUDA_WHEEL, True, "2.29.7")
    assert cuda.cuda_version == "13.0"  # its cuda-toolkit pin
    cpu = torch_wheel(house, torch_requirement("2.13.0", False))
    assert (cpu.cuda, cpu.nccl, cpu.cuda_version) == (False, None, None)
    assert torch_wheel(house, "torch==2.14.1") is None


def _inventory(pytorch: str):
    return plan_of(GPU_INVENTORY + f"stack:\n  pytorch: {pytorch}\n")


def test_stack_nccl_replaces_the_wheels_when_it_is_at_least_as_new(house):
    inv = _inventory("{cuda: true, nccl: stack}")
    nccl = next(s for s in sources.needed(inv) if s.component == "nccl")
    spec = torch_spec(inv, house, True, nccl)
    assert spec == {
        "requirement": "torch==2.13.0,!=2.13.0+cpu",
        "version": "2.13.0",
        "cuda": True,
        "cuda_version": "13.0",
        "wheel_nccl": "2.29.7",
        "nccl": "stack",
    }
    # a node group without CUDA builds no NCCL: PyTorch keeps its wheel's
    assert torch_spec(inv, house, False, None)["nccl"] == "wheel"
    assert torch_spec(_inventory("{cuda: true}"), house, True, nccl)["nccl"] == "wheel"


def test_an_older_stack_nccl_or_a_cpu_pytorch_is_refused_with_the_reason(house):
    inv = _inventory("{cuda: true, nccl: stack}")
    older = next(s for s in sources.needed(inv) if s.component == "nccl")
    older = type(older)(**{**older.__dict__, "version": "2.28.9-1"})
    with pytest.raises(MpiclusterError) as exc:
        torch_spec(inv, house, True, older)
    assert "built against NCCL 2.29.7, newer than the stack's 2.28.9-1" in str(exc.value)
    with pytest.raises(MpiclusterError, match="CPU build without NCCL"):
        torch_spec(_inventory("{nccl: stack}"), house, True, older)
    with pytest.raises(MpiclusterError, match=r"no PyTorch wheel for torch==2\.14\.1"):
        torch_spec(_inventory("{version: 2.14.1}"), house, True, older)


def test_pytorch_options_are_validated_and_enter_the_fingerprint():
    with pytest.raises(MpiclusterError) as exc:
        _inventory("{enabled: false}")
    assert "Horovod is built for PyTorch" in str(exc.value)
    with pytest.raises(MpiclusterError) as exc:
        _inventory("{cuda: false, nccl: stack}")
    assert "needs a CUDA build" in str(exc.value)
    with pytest.raises(MpiclusterError):
        _inventory("{nccl: system}")
    alone = plan_of(
        "cluster: t\nnodes: [{name: a}]\n"
        "stack: {horovod: {enabled: false}, pytorch: {enabled: false}}\n"
    )
    assert sources.torch_requirement(alone) is None
    assert wheels.requirements(False, None) == [*wheels.BUILD_REQUIREMENTS, "py-spy"]
    facts = CUDA_FACTS | {"gpus": H100}
    wheel, stack = _inventory("{cuda: true}"), _inventory("{cuda: true, nccl: stack}")
    platform = platform_of(facts, wheel, 8)
    assert (
        fingerprint(platform, sources.needed(wheel), wheel, "w", "r")[0]
        != fingerprint(platform, sources.needed(stack), stack, "w", "r")[0]
    )
    assert recipe.release("2.29.7-1") == (2, 29, 7) < recipe.release("2.30.7")


def test_doctors_probe_reads_which_nccl_pytorch_loads_from_the_files(tmp_path, monkeypatch):
    # the probe runs on nodes beside nodeinfo.py, which it imports as a top-level module
    remote = Path(__file__).parents[2] / "mpicluster" / "remote"
    monkeypatch.syspath_prepend(str(remote / "module_utils"))  # nodeinfo's own import
    monkeypatch.syspath_prepend(str(remote))
    import probe

    stack = tmp_path / "stacks" / "f1"
    (stack / "lib").mkdir(parents=True)
    (stack / "lib" / "libnccl.so.2.29.7").write_bytes(b"")
    (stack / "lib" / "libnccl.so.2").symlink_to("libnccl.so.2.29.7")
    (tmp_path / "current").symlink_to("stacks/f1")
    site = stack / "venv" / "lib" / "python3.11" / "site-packages"
    (site / "nvidia" / "nccl" / "lib").mkdir(parents=True)
    (site / "nvidia_nccl_cu13-2.29.7.dist-info").mkdir()
    layout = {
        "install": "source",
        "python": f"{tmp_path}/current/venv/bin/python",
        "mpi_lib": f"{tmp_path}/current/lib",
    }
    record = {"pytorch": {"nccl": "stack"}}
    assert probe.torch_nccl(layout, record) is None  # no NCCL in the venv: a CPU PyTorch
    wheel_lib = site / "nvidia" / "nccl" / "lib" / "libnccl.so.2"
    wheel_lib.write_bytes(b"")
    seen = probe.torch_nccl(layout, record)
    assert (seen["loads"], seen["version"], seen["expected"]) == ("wheel", "2.29.7", "stack")
    wheel_lib.unlink()
    wheel_lib.symlink_to(stack / "lib" / "libnccl.so.2")
    assert probe.torch_nccl(layout, record)["loads"] == "stack"
    assert probe.torch_nccl(layout, record)["version"] == "2.29.7"
