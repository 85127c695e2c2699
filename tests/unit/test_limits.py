"""doctor's limits check: the probe's reader (remote/loginlimits.py) run for real, in a
process whose limits a shell lowered as limits.conf or a ulimit line would, then judged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from mpicluster import remote
from mpicluster.doctor.checks import limits as check
from mpicluster.doctor.model import Status


def shipped() -> dict:
    """loginlimits as the probe ships it (with the helpers it imports)."""
    namespace: dict = {"__name__": "loginlimits"}
    exec(compile(remote.script("loginlimits"), "loginlimits.py", "exec"), namespace)  # noqa: S102
    return namespace


READ = (
    'import json, sys; sys.path[:0] = sys.argv[1].split(":"); import loginlimits; '
    "print(json.dumps(loginlimits.limits()))"
)


def limits_under(shell: str) -> dict:
    """The probe's reading, in a process started after `shell` (ulimit lines)."""
    helpers = [str(remote.HERE), str(remote.MODULE_UTILS)]
    done = subprocess.run(
        ["bash", "-c", f'{shell}; exec "$0" -c "$1" "$2"', sys.executable, READ, ":".join(helpers)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def test_a_low_open_files_limit_warns_with_the_need_of_this_cluster():
    facts = {"limits": limits_under("ulimit -Sn 300"), "env": {"USER": "mpi"}}
    assert facts["limits"]["nofile"][0] == 300
    (result,) = check._limits("node2", facts, facts["limits"], slots=4, ranks=100)
    assert result.status == Status.WARN
    assert result.evidence.startswith("a login's open files limit is 300 (")
    assert "a rank of this cluster's 100 may hold a socket to every other rank" in result.evidence
    assert "356 or more" in result.evidence
    assert "`mpi soft nofile 65536`" in result.fix
    assert check._limits("node2", facts, facts["limits"], slots=4, ranks=8) == []


def test_locked_memory_matters_only_beside_rdma_and_names_its_line(tmp_path):
    conf = tmp_path / "limits.conf"
    conf.write_text("# defaults\n*   soft   memlock   65536\n@mpi hard nofile 4096 # x\n")
    found = shipped()["setters"]([str(conf)])
    assert found["memlock"] == [f"{conf}:2: * soft memlock 65536"]
    assert found["nofile"] == [f"{conf}:3: @mpi hard nofile 4096"]
    reading = limits_under("ulimit -Sl 64") | {"setters": found}
    assert reading["memlock"][0] == 64 * 1024
    facts = {"limits": reading, "rdma": ["mlx5_0"]}
    (result,) = check._limits("node1", facts, reading, slots=1, ranks=2)
    assert "locked memory limit is 64 KiB (set at " in result.evidence
    assert f"{conf}:2 (`* soft memlock 65536`)" in result.evidence
    assert "mlx5_0" in result.evidence and "memlock unlimited" in result.fix
    assert check._limits("node1", {"limits": reading, "rdma": []}, reading, 1, 2) == []


def test_a_dev_shm_too_small_for_the_nodes_ranks_names_stale_segments(tmp_path):
    shm = tmp_path / "shm"
    shm.mkdir()
    (shm / "vader_segment.node2.1f2e.0").write_bytes(b"x" * 4096)
    (shm / "unrelated").write_bytes(b"y")
    files = shipped()["shm_files"](str(shm))
    assert (files["files"], files["mpi_files"], files["mpi_names"]) == (
        2,
        1,
        ["vader_segment.node2.1f2e.0"],
    )
    disk = {
        "shm": {"path": "/dev/shm", "measured": "/dev/shm", "free": 40 << 20, "total": 64 << 20}
    }
    facts = {"disk": disk, "shm_files": files}
    (result,) = check._shm("node2", facts, slots=4)
    assert result.evidence.startswith(
        "/dev/shm has 40.0 MiB free of 64.0 MiB: 4 rank(s) here ask Open MPI's "
        "shared-memory transport for 64.0 MiB (16.0 MiB each)"
    )
    assert "vader_segment.node2.1f2e.0" in result.evidence
    assert check._shm("node2", facts, slots=2) == []


def test_the_pass_line_shows_a_logins_limits():
    reading = limits_under("ulimit -Sn 4096")
    facts = {"limits": reading, "disk": {}}
    (result,) = check.judge("node1", facts, slots=2, ranks=6)
    assert result.status == Status.PASS and "open files 4,096" in result.evidence
    assert Path(remote.HERE / "loginlimits.py").exists()
