"""The GPU build path through `up`, on CUDA nodes without GPUs: `local up --cuda` shares
this machine's CUDA toolkit with every node, and `up` builds a CUDA-aware Open MPI 5.0.7,
NCCL (for sm_90, the collectives of the inventory's only_funcs) and nccl-tests with MPI,
once, installs them on both nodes, and proves the CPU path on that same build (the
smoke test's mpi4py allreduce across nodes).

On demand (`pytest -m cuda_build`; about 25 minutes on 2 cores, most of it Open MPI and
NCCL compiling). NCCL and nccl-tests come from ../shared/sources (no registry carries
them); Open MPI from Debian's copy of its tree, mpi4py from PyPI.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.cluster.test_nccl_build import ELF, PTX, fatbin_entries
from tests.conftest import inventory_with, mpicluster, start_local_cluster
from tests.seed import seed_cache, seed_gpu_sources

pytestmark = [pytest.mark.cluster, pytest.mark.on_demand, pytest.mark.cuda_build]

NAME, SUBNET = "pytest-cuda", "192.168.68.0/24"
NODES = ("node1", "node2")
CUDA_HOME = Path("/usr/local/cuda")
STACK = "/opt/mpicluster/current"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    if not (CUDA_HOME / "bin" / "nvcc").exists():
        pytest.fail(f"no CUDA toolkit at {CUDA_HOME}: this test needs CUDA's compiler")
    work = tmp_path_factory.mktemp("cuda")
    cache, artifacts = work / "sources", work / "artifacts"
    openmpi = seed_cache(cache, "5.0.7")
    seed_gpu_sources(cache)
    generated = work / "generated.yaml"
    mpicluster("local", "down", "--name", NAME, check=False)
    cluster = start_local_cluster(NAME, len(NODES), SUBNET, generated, "--cuda")
    stack = yaml.safe_load(generated.read_text())["stack"]
    stack["openmpi"] = {**stack["openmpi"], **openmpi}
    inventory = inventory_with(
        generated,
        work / "cuda.yaml",
        stack=stack,
        sources={"cache": str(cache), "artifacts": str(artifacts)},
    )
    done = mpicluster("up", str(inventory), "--json", check=False, timeout=4 * 3600)
    yield {"cluster": cluster, "inventory": inventory, "up": done, "work": work, "stack": stack}
    mpicluster("local", "down", "--name", NAME, check=False)


def test_local_cuda_inventory_asks_for_a_gpu_build_without_gpus(built):
    stack = built["stack"]
    assert stack["gpus_present"] is False
    assert stack["cuda_home"] == "/usr/local/cuda"
    assert stack["nccl"]["cuda_archs"] == ["9.0"]
    assert stack["nccl"]["only_funcs"]
    assert stack["horovod"] == {"enabled": False}
    data = yaml.safe_load(built["inventory"].read_text())
    assert all(node["gpus"] == 1 for node in data["nodes"])
    nvcc = built["cluster"].ssh("node2", "/usr/local/cuda/bin/nvcc --version").stdout
    assert "Cuda compilation tools" in nvcc


def test_up_builds_the_gpu_stack_once_and_the_cpu_smoke_passes_on_it(built):
    done = built["up"]
    assert done.returncode == 0, done.stderr[-6000:]
    assert "build on node1, then install on node1, node2" in done.stderr
    smoke = json.loads(done.stdout)["smoke"]
    assert smoke["ok"] and smoke["allreduce"]["ranks"] == len(NODES), smoke
    assert "Open MPI v5.0.7" in smoke["allreduce"]["library"]


def test_open_mpi_is_cuda_aware(built):
    for node in NODES:
        info = built["cluster"].ssh(node, f"{STACK}/bin/ompi_info --parsable --all").stdout
        assert "mpi_built_with_cuda_support:value:true" in info, node
        assert "ompi:version:full:5.0.7" in info


def test_nccl_is_built_for_sm_90(built, tmp_path):
    library = tmp_path / "libnccl.so"
    real = built["cluster"].ssh("node2", f"readlink -f {STACK}/lib/libnccl.so").stdout.strip()
    assert copy_out("node2", real, library), f"could not copy {real} out of node2"
    assert {(ELF, 90), (PTX, 90)} <= fatbin_entries(library)
    header = built["cluster"].ssh("node2", f"grep -E '^#define NCCL_MINOR' {STACK}/include/nccl.h")
    assert "29" in header.stdout


def test_nccl_tests_link_the_stacks_nccl_and_mpi(built):
    for node in NODES:
        # a login's environment: /etc/environment's PATH and LD_LIBRARY_PATH
        ldd = built["cluster"].ssh(node, "ldd $(command -v all_reduce_perf)").stdout
        libraries = {
            line.split("=>")[0].strip(): line.split("=>")[1].split("(")[0].strip()
            for line in ldd.splitlines()
            if "=>" in line
        }
        assert libraries["libnccl.so.2"].startswith("/opt/mpicluster/stacks/"), ldd
        mpi = next(v for k, v in libraries.items() if k.startswith("libmpi.so"))
        assert mpi.startswith("/opt/mpicluster/stacks/"), ldd
        assert "not found" not in ldd.replace("libcuda.so.1 => not found", ""), ldd


def test_second_up_changes_nothing(built):
    done = mpicluster("up", str(built["inventory"]), "--json", check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "already active on node1, node2" in done.stderr
    hosts = json.loads(done.stdout)["hosts"]
    assert {n: h["changed"] for n, h in hosts.items()} == dict.fromkeys(NODES, 0)


def copy_out(node: str, source: str, target: Path) -> bool:
    """Copy a (binary) file out of a node's container with podman cp."""
    import subprocess

    from mpicluster.local.host import podman_env

    listed = subprocess.run(
        [
            "podman",
            "ps",
            "--filter",
            f"label=io.mpicluster.network=mpicluster-{NAME}",
            "--format",
            "{{.Names}}",
        ],
        capture_output=True,
        text=True,
        env=podman_env(),
        check=False,
    ).stdout.split()
    name = next((n for n in listed if f"_{node}_" in n), None)
    if name is None:
        return False
    done = subprocess.run(
        ["podman", "cp", f"{name}:{source}", str(target)],
        capture_output=True,
        env=podman_env(),
        check=False,
    )
    return done.returncode == 0 and target.exists()
