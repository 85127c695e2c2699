"""`mpicluster run` on the cluster test_stack_build.py built (the session's `build`):
examples across every node, PyTorch under both launchers with the same program, a
failing rank, Ctrl-C, --sync, --setup and --collect, and bad options. Run alone, its
fixture runs `up` first.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.cluster.conftest import SUBNET
from tests.cluster.fabric_runs import ucx_and_ob1_rates
from tests.cluster.nodes import Started
from tests.conftest import REPO, mpicluster

pytestmark = pytest.mark.cluster

EXAMPLES = str(REPO / "examples")
MPICLUSTER_RUN = (sys.executable, "-m", "mpicluster", "run")
KEEP_HUNG = ("--hang-timeout", "8", "--keep-hung")
RAISES = (
    "import time\n"
    "from mpi4py import MPI\n"
    "comm = MPI.COMM_WORLD\n"
    "print('rank', comm.rank, 'started')\n"
    "comm.Barrier()\n"
    "if comm.rank == 1:\n"
    "    raise ValueError('rank one is broken')\n"
    "comm.Barrier()\n"
)

#: Rank 1 never reaches the barrier the others wait in.
HANGS = (
    "import time\n"
    "from mpi4py import MPI\n"
    "comm = MPI.COMM_WORLD\n"
    "print('rank', comm.rank, 'ready', flush=True)\n"
    "if comm.rank == 1:\n"
    "    time.sleep(900)\n"
    "comm.Barrier()\n"
)


#: Horovod as a user's plain program starts it: hvd.init() initializes MPI itself, from
#: Horovod's background thread. Every rank prints one line.
HOROVOD_PLAIN = (
    "import socket\n"
    "import horovod.torch as hvd\n"
    "import torch\n"
    "hvd.init()\n"
    "total = hvd.allreduce(torch.ones(4) * (hvd.rank() + 1), op=hvd.Sum, name='a')\n"
    "root = hvd.broadcast(torch.tensor([float(hvd.rank())]), root_rank=0, name='b')\n"
    "ranks = hvd.allgather(torch.tensor([hvd.rank()]), name='g')\n"
    "print('hvd', socket.gethostname(), hvd.rank(), hvd.size(), hvd.local_size(),\n"
    "      int(total[0]), int(root[0]), ranks.tolist(), flush=True)\n"
)
MPI4PY_PLAIN = (
    "import socket\n"
    "from mpi4py import MPI\n"
    "world = MPI.COMM_WORLD\n"
    "local = world.Split_type(MPI.COMM_TYPE_SHARED)\n"
    "cross = world.Split(local.rank, world.rank)\n"
    "print('mpi4py', socket.gethostname(), world.rank, world.size, local.size,\n"
    "      world.allreduce(1), cross.allreduce(1), len(world.allgather(world.rank)), flush=True)\n"
)


@pytest.fixture(scope="module")
def ready(build):
    done = mpicluster("up", str(build["inventory"]), check=False, timeout=3600)
    assert done.returncode == 0, done.stderr[-4000:]
    from mpicluster.cluster.inventory import load_inventory

    build["nodes"] = [n.name for n in load_inventory(build["inventory"]).nodes]
    return build


def run(ready, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return mpicluster("run", str(ready["inventory"]), *args, check=False, timeout=timeout)


def test_the_mpi_example_runs_on_every_node(ready):
    done = run(ready, "--sync", EXAMPLES, "--", "python", "mpi_demo.py")
    assert done.returncode == 0, done.stderr[-3000:]
    nodes = ready["nodes"]
    assert f"{len(nodes)} rank(s) on {len(nodes)} node(s): {', '.join(nodes)}" in done.stdout
    assert "ring ok: True" in done.stdout


@pytest.mark.parametrize(
    "launch",
    [["--torch", "--", "python", "ddp_train.py"], ["--launcher", "torchrun", "--", "ddp_train.py"]],
    ids=["torch", "torchrun"],
)
def test_the_ddp_example_runs_unchanged_under_both_launchers(ready, launch):
    done = run(ready, "--sync", EXAMPLES, *launch)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert f"{len(ready['nodes'])} rank(s), gloo: loss" in done.stdout
    assert "replicas equal: True" in done.stdout


def test_the_horovod_example_trains_across_every_node(ready):
    done = run(ready, "--sync", EXAMPLES, "--", "python", "horovod_train.py")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert f"{len(ready['nodes'])} rank(s), Horovod: loss" in done.stdout
    assert "replicas equal: True" in done.stdout


def test_the_allreduce_runs_over_ucx_and_over_ob1(ready):
    """The stack's Open MPI has UCX (with CUDA): pml ucx forced over UCX's TCP transport
    carries the allreduce as ob1 does, both exact (rates in the test's output)."""
    if not ready["variant"].ucx:
        pytest.skip("this variant's stack has no UCX")
    ucx_and_ob1_rates(ready["cluster"], ready["inventory"], SUBNET)


def plain_mpirun(ready, per_node: int, program: str, timeout: int = 240) -> list[list[str]]:
    """`mpirun --host ... python3 -c PROGRAM` from the first node as the MPI user, with
    mpirun's own mapping and binding (no --map-by), as a user types it; every rank's line."""
    nodes = ready["nodes"]
    hosts = ",".join(f"{n}:{per_node}" for n in nodes)
    ranks = per_node * len(nodes)
    line = f"mpirun --host {hosts} -np {ranks} python3 -c {shlex.quote(program)}"
    done = ready["cluster"].ssh(nodes[0], f"timeout -k 10 {timeout} {line}", check=False)
    assert done.returncode == 0, (done.returncode, done.stdout[-2000:], done.stderr[-3000:])
    lines = [x.split() for x in done.stdout.splitlines() if x.split()[:1] in (["hvd"], ["mpi4py"])]
    assert len(lines) == ranks, done.stdout[-3000:]
    return lines


def test_two_ranks_on_every_node_mpi4py_horovod_and_torch(ready):
    """Several ranks on each of several nodes, each library as users start it: a plain
    mpirun of mpi4py, a plain mpirun of Horovod that initializes MPI itself (hung in
    hvd.init() on Open MPI 5.0.7's default binding), and torch.distributed under run."""
    nodes, ranks = ready["nodes"], 2 * len(ready["nodes"])
    for line in plain_mpirun(ready, 2, MPI4PY_PLAIN):
        assert line[3:] == [str(ranks), "2", str(ranks), str(len(nodes)), str(ranks)], line
    lines = plain_mpirun(ready, 2, HOROVOD_PLAIN)
    assert sorted({line[1] for line in lines}) == sorted(nodes)
    expected = [str(ranks), "2", str(ranks * (ranks + 1) // 2), "0"]
    assert all(line[3:7] == expected for line in lines), lines
    ddp = ("--torch", "--", "python", "ddp_train.py")
    done = run(ready, "--sync", EXAMPLES, "--per-node", "2", *ddp)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert f"{ranks} rank(s), gloo: loss" in done.stdout
    assert "replicas equal: True" in done.stdout


def test_a_job_hung_in_mpi_init_is_stopped_and_leaves_no_rank_anywhere(ready):
    """Rank 1 never reaches MPI_Init; the others wait inside it (PMIx's fence). The stop
    must end every rank on every node, not only mpirun (a job hung in init outlived
    SIGTERM and SIGKILL to mpirun)."""
    marker = f"init-hang-{os.getpid()}"
    program = (
        'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then exec sleep 900; fi; '
        "exec python3 -c 'from mpi4py import MPI; MPI.COMM_WORLD.Barrier()'"
    )
    started = time.monotonic()
    done = run(ready, "--hang-timeout", "10", "--", "sh", "-c", program, marker, timeout=240)
    assert done.returncode == 124, done.stderr[-3000:]
    assert time.monotonic() - started < 120
    assert "stopped: the job hung" in done.stderr
    cluster = ready["cluster"]
    for node in ready["nodes"]:
        left = cluster.ssh(
            node, "pgrep -f '[s]leep 900'; pgrep -f '[C]OMM_WORLD.Barrier'; pgrep -x prted; true"
        ).stdout.split()
        assert left == [], f"{node}: processes left: {left}"


def test_a_rank_that_raises_ends_the_job_within_seconds_and_is_named(ready):
    started = time.monotonic()
    done = run(ready, "--", "python", "-c", RAISES)
    elapsed = time.monotonic() - started
    assert done.returncode != 0
    assert elapsed < 30, elapsed
    assert "rank 1 on node2 failed" in done.stderr, done.stderr[-3000:]
    assert "ValueError: rank one is broken" in done.stderr


def test_ctrl_c_stops_every_rank_on_every_node(ready):
    marker = f"run-marker-{os.getpid()}"
    program = "import time; print('up', flush=True); time.sleep(900)"
    proc = subprocess.Popen(
        [*MPICLUSTER_RUN, str(ready["inventory"]), "--", "python", "-c", program, marker],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    ups = threading.Semaphore(0)

    def watch() -> None:
        for line in proc.stdout:
            if line.strip() == "up":
                ups.release()

    threading.Thread(target=watch, daemon=True).start()
    for _ in ready["nodes"]:
        assert ups.acquire(timeout=120), proc.stderr.read() if proc.poll() is not None else ""
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C does to the whole command
    assert proc.wait(60) == 130
    assert "stopped" in proc.stderr.read()
    cluster = ready["cluster"]
    pattern = f"[{marker[0]}]{marker[1:]}"  # does not match pgrep's own command line
    for node in ready["nodes"]:
        left = cluster.ssh(
            node, f"pgrep -f '{pattern}'; pgrep -x prted; pgrep -x orted; true"
        ).stdout.split()
        assert left == [], f"{node}: processes left: {left}"


def test_a_hung_job_is_stopped_and_the_rank_missing_from_the_collective_named(ready):
    others = len(ready["nodes"]) - 1
    started = time.monotonic()
    done = run(ready, "--hang-timeout", "10", "--", "python", "-c", HANGS, timeout=240)
    assert done.returncode == 124, done.stderr[-3000:]
    assert time.monotonic() - started < 90
    report = done.stderr
    assert f"no output for 10 s: where the job's {others + 1} rank(s) are (py-spy)" in report
    assert f"rank 1 not where the other {others} wait (<module> (<string>:7)" in report, report
    assert "1 on node2 at <string>:6 in <module>" in report
    assert "stopped: the job hung" in report


def test_a_hung_job_kept_can_be_inspected_then_stopped(ready):
    proc = subprocess.Popen(
        [*MPICLUSTER_RUN, str(ready["inventory"]), *KEEP_HUNG, "--", "python", "-c", HANGS],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    reported = threading.Event()
    lines: list[str] = []

    def watch() -> None:
        for line in proc.stderr:
            lines.append(line)
            if "not where the other" in line:
                reported.set()

    threading.Thread(target=watch, daemon=True).start()
    try:
        assert reported.wait(120), "".join(lines[-40:])
        assert proc.poll() is None  # kept
        seen = run(ready, "--inspect", "--json")
        assert seen.returncode == 0, seen.stderr[-2000:]
        report = json.loads(seen.stdout)
        assert [r["rank"] for r in report["ranks"]] == list(range(len(ready["nodes"])))
        assert report["odd"] == [1]
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(60) == 130


def test_sync_copies_a_tree_and_a_second_run_copies_nothing(ready, tmp_path):
    tree = tmp_path / "job"
    (tree / "data").mkdir(parents=True)
    (tree / "data" / "input.txt").write_text("42\n")
    (tree / "cache").mkdir()
    (tree / "cache" / "big.bin").write_bytes(b"\0" * 4096)
    (tree / ".mpiclusterignore").write_text("cache/\n")
    args = ["--sync", str(tree), "--json", "--", "sh", "-c", "cat data/input.txt; ls"]
    first = run(ready, *args)
    assert first.returncode == 0, first.stderr[-3000:]
    report = json.loads(first.stdout)
    assert report["sync"]["destination"] == "mpicluster-run/job"
    assert set(report["sync"]["files"]) == set(ready["nodes"])
    assert all(count == 2 for count in report["sync"]["files"].values()), report["sync"]
    assert first.stderr.count("42") == len(ready["nodes"])  # --json: the job's output on stderr
    assert "big.bin" not in first.stderr and "cache" not in first.stderr
    second = run(ready, *args)
    assert second.returncode == 0, second.stderr[-3000:]
    again = json.loads(second.stdout)["sync"]["files"]
    assert again == dict.fromkeys(ready["nodes"], 0)
    last = ready["nodes"][-1]
    listed = ready["cluster"].ssh(last, "ls -A mpicluster-run/job").stdout.split()
    assert sorted(listed) == [".mpiclusterignore", "data"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["-np", "0", "--", "hostname"], "-np must be at least 1"),
        (["--hosts", "node9", "--", "hostname"], "no node 'node9'"),
        (["--launcher", "srun", "--", "hostname"], "one of mpirun, torchrun"),
        ([], "no program to run"),
        (["--sync", "/nonexistent/folder", "--", "hostname"], "no such folder"),
        (["--env", "1X=2", "--", "hostname"], "not NAME or NAME=VALUE"),
        (["-np", "99", "--", "hostname"], "more than the"),
    ],
)
def test_bad_options_are_one_line_errors(ready, args, words):
    done = run(ready, *args)
    assert done.returncode == 2, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and words in lines[0], lines


def test_the_env_file_and_deepspeed_hostfile_serve_users_own_scripts(ready):
    """A script started with an empty environment gets the stack from /etc/mpicluster/env."""
    cluster, last = ready["cluster"], ready["nodes"][-1]
    found = cluster.ssh(last, "env -i /bin/sh -c '. /etc/mpicluster/env; command -v mpirun'")
    assert found.stdout.strip() == "/opt/mpicluster/current/bin/mpirun"
    deepspeed = cluster.ssh(last, "cat /etc/mpicluster/hostfile.deepspeed").stdout
    assert deepspeed == "".join(f"{n} slots=1\n" for n in ready["nodes"])


def test_dry_run_prints_the_command_line_for_the_head(ready):
    done = run(ready, "--dry-run", "--torch", "--", "python", "train.py")
    assert done.returncode == 0, done.stderr
    line = done.stdout.strip()
    assert " mpirun --host node1:1," in line
    assert "--output tag" in line or "--tag-output" in line  # Open MPI 5.x / 4.x
    assert "MASTER_ADDR=node1" in line and " python -c " in line and " train.py" in line


WAITS = (
    "import sys, time\n"
    "from mpi4py import MPI\n"
    "print('rank', MPI.COMM_WORLD.rank, 'waiting', file=sys.stderr, flush=True)\n"
    "time.sleep(300)\n"
)


def run_json(ready, *args: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    done = run(ready, "--json", *args)
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done, json.loads(done.stdout)


def test_setup_runs_on_every_node_before_the_job(ready):
    cluster, nodes = ready["cluster"], ready["nodes"]
    for node in nodes:
        cluster.ssh(node, "rm -f setup-was-here")
    done, result = run_json(
        ready,
        "--setup",
        "hostname > setup-was-here && echo ready on $(hostname)",
        "--",
        "cat",
        "setup-was-here",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for node in nodes:
        assert f"[{node}] ready on {node}" in done.stderr
    assert result["ok"] and result["ranks"] >= len(nodes)
    # every rank read what the setup wrote on its own node, before it started (with
    # --json the job's lines go to stderr)
    read = {line for line in done.stderr.splitlines() if line in nodes}
    assert read == set(nodes), done.stderr[-2000:]


def test_a_setup_failing_on_one_node_stops_the_job_before_any_rank(ready):
    cluster, nodes = ready["cluster"], ready["nodes"]
    for node in nodes:
        cluster.ssh(node, "rm -f job-ran")
    done, result = run_json(
        ready,
        "--setup",
        'test "$(hostname)" != node2 || { echo "no dataset here" >&2; exit 3; }',
        "--",
        "touch",
        "job-ran",
    )
    assert done.returncode == 3, done.stderr[-3000:]
    assert (result["ok"], result["setup"]["failed"]) == (False, ["node2"]), result
    assert result["setup"]["exits"] == {n: 3 if n == "node2" else 0 for n in nodes}
    assert "[node2] no dataset here" in done.stderr
    for node in nodes:  # no rank started anywhere
        assert cluster.ssh(node, "test -e job-ran", check=False).returncode == 1, node


def test_collect_brings_back_every_nodes_files_after_a_failing_job(ready):
    cluster, nodes = ready["cluster"], ready["nodes"]
    for node in nodes:
        cluster.ssh(node, "rm -rf out")
    # every rank writes its node's log; node2's fails after the others have written
    program = (
        'mkdir -p out && echo "log of $(hostname)" > out/log.txt && '
        'if [ "$(hostname)" = node2 ]; then sleep 2; exit 7; fi'
    )
    done, result = run_json(ready, "--collect", "out", "--", "sh", "-c", program)
    try:
        assert done.returncode != 0 and not result["ok"], done.stderr[-3000:]
        collected = result["collect"]
        into = Path(collected["into"])
        assert into.name == result["job_id"] and into.parent.name == "jobs"
        for node in nodes:
            assert collected["nodes"][node]["ok"], collected
            assert (into / node / "out" / "log.txt").read_text() == f"log of {node}\n"
        # rank 0's node only; a path that is not there is said, not an error
        done, head = run_json(ready, "--collect", "out", "--collect-from", "head", "--", "true")
        assert done.returncode == 0, done.stderr[-3000:]
        assert list(head["collect"]["nodes"]) == [nodes[0]]
        assert (Path(head["collect"]["into"]) / nodes[0] / "out" / "log.txt").is_file()
        done, gone = run_json(ready, "--collect", "nothing-here", "--", "true")
        missing = gone["collect"]["nodes"]
        assert done.returncode == 0 and all(n["missing"] for n in missing.values()), missing
    finally:
        shutil.rmtree(Path(result["collect"]["into"]).parent, ignore_errors=True)


def test_down_refuses_to_pull_the_stack_from_under_a_running_job(ready):
    inventory, cluster = str(ready["inventory"]), ready["cluster"]
    job = Started("run", inventory, "--", "python", "-c", WAITS)
    try:
        job.wait_for("waiting", timeout=120)
        done = mpicluster("down", inventory, check=False)
        assert done.returncode == 1, done.stderr[-3000:]
        assert "a job is running on the active stack (pid " in done.stderr
        assert "removing the stack would pull the stack from under it" in done.stderr
        assert "Running playbooks/down.yml" not in done.stderr
        for node in ready["nodes"]:
            cluster.ssh(node, "grep -q '^# BEGIN mpicluster' /etc/environment")
    finally:
        job.interrupt(signal.SIGINT)
        job.finish(120)


def test_down_takes_the_built_stack_off_every_node(ready):
    """Last in this module: `down` removes the stack with its linker entry and
    environment on every node. (`up` after `down` installing from the artifact cache is
    node4's in test_stack_build.py; `--keep-stack` is tested on real files in
    test_journal.py.)"""
    inventory, cluster, nodes = str(ready["inventory"]), ready["cluster"], ready["nodes"]
    done = mpicluster("down", inventory, "--json", check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout)
    assert result["state"] == "removed"
    actions = result["hosts"][nodes[-1]]["actions"]
    assert actions["/opt/mpicluster/stacks"] == "removed"
    assert actions["/etc/ld.so.conf.d/mpicluster.conf"] == "removed"
    for node in nodes:
        probe = (
            "test ! -e /opt/mpicluster && test ! -e /etc/mpicluster && "
            "! ldconfig -p | grep -q /opt/mpicluster && ! grep -q mpicluster /etc/environment"
        )
        cluster.ssh(node, probe)
