"""`run --setup` and `--collect`: their pure parts (the cluster test runs them)."""

from __future__ import annotations

import pytest


def test_setup_result_names_the_failed_nodes_and_exits_by_the_table():
    """A node that ran the setup and failed: 3 (a host failed a task), whatever its own
    code; only nodes it could not run on: 4 (unreachable)."""
    from mpicluster.run.setup_step import SetupResult

    result = SetupResult("pip install -r r.txt")
    result.exits = {"n1": 0, "n2": 7, "n3": None}
    result.errors = {"n3": "connection refused"}
    result.last = {"n2": "ERROR: No matching distribution found for nope"}
    assert (result.ok, result.failed, result.exit_code) == (False, ["n2", "n3"], 3)
    assert result.why("n2") == "exit 7: ERROR: No matching distribution found for nope"
    assert result.why("n3") == "could not run it: connection refused"
    only_unreached = SetupResult("x", exits={"n1": None}, errors={"n1": "timed out"})
    assert only_unreached.exit_code == 4
    assert SetupResult("x", exits={"n1": 0}).exit_code == 0


def test_collect_paths_stay_inside_the_jobs_folder():
    from mpicluster.run.collect import checked_path, remote_source
    from mpicluster.util.errors import UsageError

    assert checked_path("results/") == "results"
    assert checked_path("./logs/*.txt") == "logs/*.txt"
    assert checked_path("a/../b") == "b"
    for bad in ("/etc/passwd", "..", "../x", "a/../../x", "", " ", "a\nb"):
        with pytest.raises(UsageError):
            checked_path(bad)
    assert remote_source("out", None) == "out"
    assert remote_source("out", "mpicluster-run/proj") == "mpicluster-run/proj/out"
    assert remote_source("out", "/scratch/j") == "/scratch/j/out"
