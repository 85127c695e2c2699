"""Horovod's own parallel suite for PyTorch on the from-source stack, at 1 and 2 ranks per
node, through `mpicluster run` as a user runs it (tests/peer_suites.py is the runner).

On demand (`pytest -m peer_suites`): it needs the suite's pinned files in the source
cache (`mpicluster fetch` brings them where GitHub is reachable; here, copy them in by
the lockfile's file names), and it builds the stack first as test_stack_run.py does.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mpicluster.cluster.inventory import load_inventory
from mpicluster.cluster.state import cluster_dir
from mpicluster.stack.cache import SourceCache
from tests import peer_suites
from tests.cluster.conftest import Variant
from tests.conftest import mpicluster

pytestmark = [pytest.mark.cluster, pytest.mark.on_demand, pytest.mark.peer_suites]

#: Where the suite's pinned files are found when the build's own cache lacks them.
SUITE_CACHE = Path(os.environ.get("MPICLUSTER_SUITE_CACHE", "~/.cache/mpicluster/sources"))


def stack_fingerprint(ready) -> str:
    current = "basename $(readlink -f /opt/mpicluster/current)"
    return ready["cluster"].ssh("node1", current).stdout.strip()


@pytest.mark.parametrize(
    "build", [Variant("5.0.7", cuda=False, ucx=False)], indirect=True, ids=["5.0.7"]
)
@pytest.mark.parametrize("per_node", [1, 2])
def test_horovods_parallel_suite_passes_with_every_left_out_test_named(ready, per_node, tmp_path):
    inventory = ready["inventory"]
    nodes = len(ready["nodes"])
    size = nodes * per_node
    staged = peer_suites.stage(SourceCache(SUITE_CACHE), "0.28.1", tmp_path / "horovod")
    done = mpicluster(
        "run",
        str(inventory),
        "--json",
        "--sync",
        str(staged),
        "--requirements",
        str(staged / "requirements.txt"),
        "--per-node",
        str(per_node),
        "--hang-timeout",
        "300",
        "--env",  # pytest's dots reach the hang watch as they are printed
        "PYTHONUNBUFFERED=1",
        "--collect",
        "results",
        "--",
        *peer_suites.pytest_command(size),
        check=False,
        timeout=3600,
    )
    result = json.loads(done.stdout)
    suites = cluster_dir(load_inventory(inventory).cluster) / "suites"
    store = suites / stack_fingerprint(ready) / f"horovod-{nodes}x{per_node}"
    outcomes = peer_suites.keep(Path(result["collect"]["into"]), store)
    assert done.returncode == 0 and len(outcomes) == size, done.stderr[-4000:]
    assert all(not o.failed for o in outcomes.values()), peer_suites.summary(outcomes)
    # every skip is the suite's own, with its reason (GPU-only tests on CPU nodes)
    assert all(all(why for why in o.skipped.values()) for o in outcomes.values())
