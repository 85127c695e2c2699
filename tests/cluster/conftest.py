"""The cluster with the from-source stack that several modules test: built by
test_stack_build.py (in CI the default stack of CPU nodes: Open MPI 5.0.7, mpi4py,
PyTorch and Horovod; on demand on `local up --cuda` nodes with UCX, NCCL and
nccl-tests: `pytest -m cuda_build`), then used by test_stack_run.py.
Session-scoped, one per variant, so the stack is built once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.conftest import inventory_with, mpicluster, start_local_cluster
from tests.seed import seed_cache, seed_gpu_sources

NAME, SUBNET = "pytest-build", "192.168.67.0/24"
PREFIX = "/opt/mpicluster"


@dataclass(frozen=True)
class Variant:
    openmpi: str
    cuda: bool = True
    full_nccl: bool = False
    #: UCX in the stack (the lockfile's default, from ../shared/sources' tag archive; with
    #: CUDA beside a CUDA-aware Open MPI)
    ucx: bool = True

    @property
    def local_options(self) -> tuple[str, ...]:
        return ("--cuda",) if self.cuda else ()


VARIANTS = [
    # CI's: the stack `make demo` builds (CPU nodes: no CUDA, no RDMA, so no UCX)
    pytest.param(Variant("5.0.7", cuda=False, ucx=False), id="5.0.7"),
    # the GPU path without a GPU: CUDA-aware Open MPI with UCX, NCCL for sm_90,
    # nccl-tests (about 17 minutes more than CI's on 2 cores; a GPU's proof is
    # tests/gpu/prove_on_one_gpu.sh)
    pytest.param(
        Variant("5.0.7"),
        id="5.0.7-cuda",
        marks=[pytest.mark.on_demand, pytest.mark.cuda_build],
    ),
    pytest.param(
        Variant("4.1.4", cuda=False, ucx=False),
        id="4.1.4",
        marks=[pytest.mark.on_demand, pytest.mark.openmpi4],
    ),
    pytest.param(
        Variant("5.0.7", full_nccl=True),
        id="5.0.7-cuda-full-nccl",
        marks=[pytest.mark.on_demand, pytest.mark.nccl_full],
    ),
]


def with_stack(
    generated: Path, target: Path, variant: Variant, openmpi: dict, cache: Path, artifacts: Path
) -> Path:
    """The generated inventory's stack (with `--cuda`: gpus_present, cuda_archs, only_funcs)
    with Open MPI from the seeded cache, and UCX where the variant has it."""
    stack = yaml.safe_load(generated.read_text())["stack"]
    stack["openmpi"] = openmpi
    if variant.ucx:
        stack["ucx"] = {"enabled": True}
    if variant.full_nccl:
        stack["nccl"].pop("only_funcs")
    return inventory_with(
        generated,
        target,
        stack=stack,
        sources={"cache": str(cache), "artifacts": str(artifacts)},
    )


@pytest.fixture(scope="session", params=VARIANTS)
def build(request, tmp_path_factory):
    variant: Variant = request.param
    work = tmp_path_factory.mktemp("build")
    cache, artifacts = work / "sources", work / "artifacts"
    openmpi = seed_cache(cache, variant.openmpi)
    if variant.cuda or variant.ucx:
        seed_gpu_sources(cache)
    generated = work / "generated.yaml"
    mpicluster("local", "down", "--name", NAME, check=False)
    cluster = start_local_cluster(NAME, 3, SUBNET, generated, *variant.local_options)
    inventory = work / "source.yaml"

    def write_inventory() -> Path:
        return with_stack(generated, inventory, variant, openmpi, cache, artifacts)

    write_inventory()
    yield {
        "cluster": cluster,
        "inventory": inventory,
        "openmpi": openmpi,
        "variant": variant,
        "work": work,
        "artifacts": artifacts,
        "rewrite": write_inventory,
        "generated": generated,
    }
    mpicluster("local", "down", "--name", NAME, check=False)


@pytest.fixture(scope="module")
def ready(build):
    """The built cluster after `up` with its stack (test_stack_run, test_peer_suites)."""
    done = mpicluster("up", str(build["inventory"]), check=False, timeout=3600)
    assert done.returncode == 0, done.stderr[-4000:]
    from mpicluster.cluster.inventory import load_inventory

    build["nodes"] = [n.name for n in load_inventory(build["inventory"]).nodes]
    return build
