"""The peers' own suites on the from-source stack, through `mpicluster run` as a user runs
them: Horovod's parallel suite for PyTorch at 1 and 2 ranks per node (tests/peer_suites.py
is its runner), and mpi4py's test/main.py across the nodes (tests/mpi4py_suite.py).

On demand (`pytest -m peer_suites`): it needs the suite's pinned files in the source
cache (`mpicluster fetch` brings them where GitHub is reachable; here, copy them in by
the lockfile's file names), and it builds the stack first as test_stack_run.py does.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from mpicluster.cluster.inventory import load_inventory
from mpicluster.cluster.lockfile import default_version
from mpicluster.cluster.state import cluster_dir
from mpicluster.stack.cache import SourceCache
from tests import mpi4py_suite, peer_suites
from tests.cluster.conftest import Variant
from tests.conftest import mpicluster

pytestmark = [pytest.mark.cluster, pytest.mark.on_demand, pytest.mark.peer_suites]

#: Where the suite's pinned files are found when the build's own cache lacks them.
SUITE_CACHE = Path(os.environ.get("MPICLUSTER_SUITE_CACHE", "~/.cache/mpicluster/sources"))


def stack_fingerprint(ready) -> str:
    current = "basename $(readlink -f /opt/mpicluster/current)"
    return ready["cluster"].ssh("node1", current).stdout.strip()


def run_suite(
    inventory: Path, staged: Path, placement: list[str], command: list[str]
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """A suite's job through `mpicluster run` as a user runs it: the staged folder synced,
    its requirements made, a hang watch, each rank's results collected; the run and the
    folder they were collected into."""
    done = mpicluster(
        "run",
        str(inventory),
        "--json",
        "--sync",
        str(staged),
        "--requirements",
        str(staged / "requirements.txt"),
        *placement,
        "--hang-timeout",
        "300",
        "--env",  # the ranks' progress reaches the hang watch as it is printed
        "PYTHONUNBUFFERED=1",
        "--collect",
        "results",
        "--",
        *command,
        check=False,
        timeout=3600,
    )
    return done, Path(json.loads(done.stdout)["collect"]["into"])


@pytest.mark.parametrize(
    "build", [Variant("5.0.7", cuda=False, ucx=False)], indirect=True, ids=["5.0.7"]
)
@pytest.mark.parametrize("per_node", [1, 2])
def test_horovods_parallel_suite_passes_with_every_left_out_test_named(ready, per_node, tmp_path):
    inventory = ready["inventory"]
    nodes = len(ready["nodes"])
    size = nodes * per_node
    staged = peer_suites.stage(SourceCache(SUITE_CACHE), "0.28.1", tmp_path / "horovod")
    done, collected = run_suite(
        inventory, staged, ["--per-node", str(per_node)], peer_suites.pytest_command(size)
    )
    suites = cluster_dir(load_inventory(inventory).cluster) / "suites"
    store = suites / stack_fingerprint(ready) / f"horovod-{nodes}x{per_node}"
    outcomes = peer_suites.keep(collected, store)
    assert done.returncode == 0 and len(outcomes) == size, done.stderr[-4000:]
    assert all(not o.failed for o in outcomes.values()), peer_suites.summary(outcomes)
    assert peer_suites.earlier_regressions(store) == {}
    # every skip is the suite's own, with its reason (GPU-only tests on CPU nodes)
    unexplained = {
        name
        for o in outcomes.values()
        for name, why in peer_suites.skip_reasons(o).items()
        if not why
    }
    assert not unexplained, unexplained


@pytest.mark.parametrize(
    "build", [Variant("5.0.7", cuda=False, ucx=False)], indirect=True, ids=["5.0.7"]
)
def test_mpi4pys_own_suite_passes_across_the_nodes_and_its_file_tests_on_one(ready, tmp_path):
    """mpi4py's test/main.py from the stack's own pinned sdist: every module across the 3
    nodes but the three that need one filesystem, which run with every rank on one node."""
    inventory = ready["inventory"]
    # the sdist `up` built the stack's mpi4py from, in the build's own source cache
    version = default_version("mpi4py")
    staged = mpi4py_suite.stage(SourceCache(ready["work"] / "sources"), version, tmp_path / "m")
    suites = cluster_dir(load_inventory(inventory).cluster) / "suites" / stack_fingerprint(ready)
    for one_node in (False, True):
        where = ["--nodes", ready["nodes"][0], *mpi4py_suite.ONE_NODE_RUN] if one_node else []
        done, collected = run_suite(inventory, staged, where, mpi4py_suite.command(one_node))
        shape = "one-node" if one_node else f"{len(ready['nodes'])}x1"
        outcomes = mpi4py_suite.keep(collected, suites / f"mpi4py-{shape}")
        assert done.returncode == 0 and len(outcomes) == 3, done.stderr[-4000:]
        assert all(not o.failed for o in outcomes.values()), peer_suites.summary(outcomes)
        assert peer_suites.earlier_regressions(suites / f"mpi4py-{shape}") == {}
        ran = {name.split(".")[0] for o in outcomes.values() for name in o.passed}
        assert ran == set(mpi4py_suite.ONE_NODE_MODULES) if one_node else len(ran) > 50
        # mpi4py's skips name their reason: "mpi-world-size>1", "cupy", "openmpi", ...
        assert all(why for o in outcomes.values() for why in o.skipped.values())
