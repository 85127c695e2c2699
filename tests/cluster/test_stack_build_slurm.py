"""scheduler: slurm on the from-source stack test_stack_build.py built (the session's
`build`: Open MPI 5.0.7, with CUDA and UCX in CI's variant): Open MPI configured with its
bundled PMIx, PRRTE, hwloc and libevent spelled out, although `up` installed
libpmix-dev for Slurm; `srun --mpi=pmix` starts one world of the built Open MPI 5 (the
smoke test's Slurm part), `mpirun` inside an allocation works too, `run` goes through
srun; then `up` with the scheduler left out of the inventory takes Slurm back, and the
modules after it find the cluster as test_stack_build left it.

Marked slurm (and on_demand: CI's budget). With the stack module first, on CI's variant:
`pytest -m "(not on_demand and not faults) or (slurm and not openmpi4 and not nccl_full)"
tests/cluster/test_stack_build.py tests/cluster/test_stack_build_slurm.py` (~27 min here:
the build 20, these 3).
"""

from __future__ import annotations

import json

import pytest

from mpicluster.cluster.inventory import load_inventory
from mpicluster.slurm.smoke_steps import judge_world
from tests.conftest import inventory_with, mpicluster

pytestmark = [pytest.mark.cluster, pytest.mark.on_demand, pytest.mark.slurm]

ALLREDUCE = "/opt/mpicluster/current/venv/bin/python /etc/mpicluster/smoke/allreduce.py 1 1024"


@pytest.fixture(scope="module")
def slurm(build):
    path = inventory_with(
        build["inventory"], build["work"] / "slurm.yaml", scheduler={"type": "slurm"}
    )
    done = mpicluster("up", str(path), "--json", check=False, timeout=3600)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    result = json.loads(done.stdout)
    nodes = [n.name for n in load_inventory(path).nodes]
    return {
        **build,
        "slurm_inventory": path,
        "up": result,
        "up_code": done.returncode,
        "nodes": nodes,
    }


def test_up_adds_slurm_to_the_built_cluster_and_srun_starts_one_world(slurm):
    result = slurm["up"]
    assert slurm["up_code"] == 0, (result["hosts"], (result.get("smoke") or {}).get("slurm"))
    steps = {s["name"]: s for s in result["smoke"]["slurm"]["steps"]}
    assert steps["pmix"]["ok"] and steps["sbatch"]["ok"]
    assert steps["pmix"]["detail"] == f"one world of {len(slurm['nodes'])} ranks, exact"


def test_open_mpi_keeps_its_bundled_runtime_beside_libpmix_dev(slurm):
    cluster = slurm["cluster"]
    info = cluster.ssh("node1", "/opt/mpicluster/current/bin/ompi_info --all --parsable")
    line = next(
        x for x in info.stdout.splitlines() if "config:cli" in x or "Configure command" in x
    )
    five = slurm["variant"].openmpi.startswith("5")
    for part in ("pmix", "prrte", "hwloc", "libevent") if five else ("pmix", "hwloc", "libevent"):
        assert f"--with-{part}=internal" in line, line
    assert "ii  libpmix-dev" in cluster.ssh("node1", "dpkg -l libpmix-dev").stdout
    # the ranks' libmpi loads no PMIx from the distribution
    ldd = cluster.ssh("node1", "ldd /opt/mpicluster/current/lib/libmpi.so").stdout
    assert "/usr/lib/x86_64-linux-gnu/libpmix" not in ldd, ldd


def test_mpirun_inside_an_allocation_uses_it(slurm):
    count = len(slurm["nodes"])
    done = slurm["cluster"].ssh(
        "node1",
        f"timeout 100 salloc -N{count} --ntasks-per-node=1 -t 5 "
        f"/opt/mpicluster/current/bin/mpirun --map-by node {ALLREDUCE}",
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert judge_world(done.stdout, count) == ("", ""), done.stdout[-2000:]


def test_run_goes_through_srun_with_the_built_stack(slurm):
    program = "from mpi4py import MPI; print('size', MPI.COMM_WORLD.Get_size())"
    done = mpicluster(
        "run",
        str(slurm["slurm_inventory"]),
        "--per-node",
        "1",
        "--",
        "python",
        "-c",
        program,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    count = len(slurm["nodes"])
    assert done.stdout.split("\n").count(f"size {count}") == count, done.stdout


def test_up_without_the_scheduler_takes_slurm_back(slurm):
    done = mpicluster("up", str(slurm["inventory"]), "--json", check=False, timeout=3600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["smoke"]["slurm"] is None
    for node in slurm["nodes"]:
        left = (
            slurm["cluster"]
            .ssh(
                node,
                "ls /etc/slurm /etc/munge /var/lib/mpicluster/slurm.json 2>/dev/null; "
                "getent passwd slurm munge; dpkg -l slurmd munge 2>/dev/null | grep ^ii; "
                "pgrep -l 'slurm|munge'",
                check=False,
            )
            .stdout
        )
        assert left.strip() == "", (node, left)
