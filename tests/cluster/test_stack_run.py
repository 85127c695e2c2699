"""`mpicluster run` on the cluster test_stack_build.py built (the session's `build`):
examples across every node, PyTorch under both launchers with the same program, a
failing rank, Ctrl-C, --sync, --setup and --collect, and bad options. Run alone, its
fixture runs `up` first.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.cluster.conftest import PREFIX, SUBNET
from tests.cluster.fabric_runs import ucx_and_ob1_rates
from tests.cluster.nodes import Started
from tests.cluster.test_doctor import doctor
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
    """With UCX in the stack (on demand: with CUDA), pml ucx forced over UCX's TCP
    transport carries the allreduce as ob1 does, both exact (rates in the test's output).
    Without (CI's: no RDMA device, ucx: auto), Open MPI was built without it: no pml
    ucx to pick, no UCX library in the stack."""
    if ready["variant"].ucx:
        ucx_and_ob1_rates(ready["cluster"], ready["inventory"], SUBNET)
        return
    for node in ready["nodes"]:
        info = ready["cluster"].ssh(node, f"{PREFIX}/current/bin/ompi_info --parsable").stdout
        assert "mca:pml:ob1:version:" in info and "mca:pml:ucx:" not in info, node
        found = ready["cluster"].ssh(node, f"ls {PREFIX}/current/lib | grep -c '^libucp' || true")
        assert found.stdout.strip() == "0", node


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
    # 124 is mpicluster's (--hang-timeout), not the job's: the last line is not
    # "job exited with"
    assert done.stderr.splitlines()[-1].startswith("error: the job hung: stopped by")
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
    # the code is the job's own, and the last line says so
    assert done.stderr.splitlines()[-1] == f"job exited with {done.returncode}"


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
    said = proc.stderr.read()
    assert "stopped" in said
    assert not said.splitlines()[-1].startswith("job exited with"), said[-2000:]
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
        (["--nodes", "node9", "--", "hostname"], "--nodes 'node9': no such node"),
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
    assert " /opt/mpicluster/current/bin/mpirun --host node1:1," in line
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
    assert "Traceback" not in done.stderr and done.stdout.strip(), done.stderr[-3000:]
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
        'test "$(hostname)" != node2 || { echo "no dataset here" >&2; exit 7; }',
        "--",
        "touch",
        "job-ran",
    )
    # mpicluster's 3 (a host failed a task), not node2's own 7: no job ran
    assert done.returncode == 3, done.stderr[-3000:]
    assert (result["ok"], result["setup"]["failed"]) == (False, ["node2"]), result
    assert result["setup"]["exits"] == {n: 7 if n == "node2" else 0 for n in nodes}
    assert "[node2] no dataset here" in done.stderr
    assert done.stderr.splitlines()[-1] == (
        "error: no rank started: the setup failed on node2 (exit 3)"
    )
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


#: Every rank writes its file and a line, waits, then rank 1 raises (the job fails).
DETACHED = (
    "import os, socket, time\n"
    "from mpi4py import MPI\n"
    "rank = MPI.COMM_WORLD.rank\n"
    "os.makedirs('out', exist_ok=True)\n"
    "open('out/rank-%d.txt' % rank, 'w').write(socket.gethostname())\n"
    "print('rank', rank, 'started', flush=True)\n"
    "time.sleep(8)\n"
    "MPI.COMM_WORLD.Barrier()\n"
    "if rank == 1:\n"
    "    raise ValueError('rank one is broken')\n"
    "MPI.COMM_WORLD.Barrier()\n"
)


def detach(ready, *args: str) -> dict:
    """`run --detach --json ARGS`, SIGKILLed once it has said the job's id (the job must
    not care); its JSON."""
    started = Started("run", str(ready["inventory"]), "--detach", "--json", *args)
    started.wait_for("Starting job", timeout=120)
    deadline = time.monotonic() + 60
    while not started.stdout and time.monotonic() < deadline:
        time.sleep(0.1)
    if started.proc.poll() is None:
        started.proc.kill()
    started.proc.wait(30)
    assert started.stdout, started.stderr[-3000:]
    return json.loads(started.stdout)


def detach_plain(ready, *args: str) -> str:
    """`run --detach ARGS` as a script runs it: the job's id alone on stdout."""
    done = run(ready, "--detach", *args, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    job_id = done.stdout.strip()
    assert done.stdout == f"{job_id}\n" and re.fullmatch(r"[0-9a-f]{12}", job_id), done.stdout
    assert f"job {job_id} runs detached" in done.stderr  # its sentences: on stderr
    return job_id


def jobs_json(ready, command: str, *args: str, timeout: float = 300) -> tuple[int, dict, str]:
    """The command's JSON (a job's own output, a traceback of its ranks included, is on
    stderr)."""
    inventory = str(ready["inventory"])
    done = mpicluster(command, inventory, *args, "--json", check=False, timeout=timeout)
    assert done.stdout.strip(), done.stderr[-3000:]
    return done.returncode, json.loads(done.stdout), done.stderr


def job_processes(cluster, node: str, job_id: str) -> int:
    """The processes of the job on the node (its id in their environment; grep says 2
    for the files it may not read, other users' processes)."""
    command = f"grep -l MPICLUSTER_JOB={job_id} /proc/[0-9]*/environ 2>/dev/null; true"
    return len(cluster.ssh(node, command).stdout.split())


def test_a_detached_job_outlives_its_run_and_logs_follow_shows_its_end(ready):
    cluster, nodes = ready["cluster"], ready["nodes"]
    for node in nodes:
        cluster.ssh(node, "rm -rf out")
    started = detach(ready, "--collect", "out", "--", "python", "-c", DETACHED)
    job_id = started["id"]
    assert (started["state"], started["node"]) == ("running", nodes[0])
    assert started["ranks"] == len(nodes)
    # the run that started it is gone; the job is not
    code, listed, _ = jobs_json(ready, "jobs")
    assert code == 0, listed
    (found,) = [j for j in listed["jobs"] if j["id"] == job_id]
    assert found["state"] == "running" and found["program"] == ["python", "-c", DETACHED]
    # the table, in 80 columns: the id whole (the command gives way)
    table = mpicluster("jobs", str(ready["inventory"]), env={"COLUMNS": "80"}).stderr
    assert re.search(rf"[│|] {job_id} [│|]", table), table
    code, end, err = jobs_json(ready, "logs", job_id, "--follow")
    result = end["result"]
    assert code == result["exit_code"] != 0, err[-3000:]
    assert err.splitlines()[-1] == f"job exited with {code}"  # the job's own code
    assert end["state"] == "failed" and result["failed_rank"] == 1, end
    assert result["failed_node"] == "node2" and "ValueError: rank one is broken" in err
    for rank in range(len(nodes)):
        assert f"rank {rank} started" in err
    # --collect at the end of logs --follow: every node's out/ brought back
    into = Path(end["collect"]["into"])
    try:
        assert into.name == job_id
        for rank, node in enumerate(nodes):
            assert (into / node / "out" / f"rank-{rank}.txt").read_text() == node
    finally:
        shutil.rmtree(into, ignore_errors=True)
    code, listed, _ = jobs_json(ready, "jobs")
    (found,) = [j for j in listed["jobs"] if j["id"] == job_id]
    assert (found["state"], found["exit_code"]) == ("failed", result["exit_code"])


def test_stop_ends_a_detached_job_on_every_node(ready):
    cluster, nodes = ready["cluster"], ready["nodes"]
    job_id = detach_plain(ready, "--", "python", "-c", WAITS)
    try:
        deadline = time.monotonic() + 60
        while sum(job_processes(cluster, n, job_id) > 0 for n in nodes) < len(nodes):
            assert time.monotonic() < deadline, "the job's ranks did not start on every node"
            time.sleep(1)
    finally:
        code, stopped, err = jobs_json(ready, "stop", job_id)
    assert code == 0 and stopped["state"] == "stopped", err[-3000:]
    assert {n: job_processes(cluster, n, job_id) for n in nodes} == dict.fromkeys(nodes, 0)
    code, end, err = jobs_json(ready, "logs", job_id)
    assert code == 130 and end["result"]["stopped"], end
    assert "rank 0 waiting" in err  # its output so far
    done = mpicluster("stop", str(ready["inventory"]), job_id, check=False)
    assert done.returncode == 1 and f"job {job_id} was not running (stopped" in done.stderr


def test_a_detached_job_that_hangs_is_read_and_stopped_by_its_head(ready):
    others = len(ready["nodes"]) - 1
    job_id = detach(ready, "--hang-timeout", "10", "--", "python", "-c", HANGS)["id"]
    code, end, err = jobs_json(ready, "logs", job_id, "--follow", timeout=240)
    assert code == 124 and end["state"] == "hung", err[-3000:]
    assert end["hang"]["odd"] == [1], end["hang"]
    # as text: the report the head's launcher took, as `run --hang-timeout` shows it
    done = mpicluster("logs", str(ready["inventory"]), job_id, check=False)
    assert done.returncode == 124, done.stderr[-3000:]
    assert f"rank 1 not where the other {others} wait" in done.stderr
    assert "1 on node2 at <string>:6 in <module>" in done.stderr
    assert "stopped: the job hung" in done.stderr


#: Counts what a node sends to web ports off the cluster's network (package registries).
REGISTRY_RULE = (
    f"OUTPUT ! -o lo ! -d {SUBNET} -p tcp -m multiport --dports 80,443 "
    "-m comment --comment mpicluster-registry"
)
#: Each package's version, from the stack's Python (python -c, on every rank).
IMPORTS = (
    "import socket, dateutil, docopt, msgpack, numpy\n"
    "print('imports', socket.gethostname(), dateutil.__version__, docopt.__version__,\n"
    "      msgpack.version, flush=True)\n"
)


def registry_bytes(cluster, nodes: list[str]) -> dict[str, int]:
    found = {}
    for node in nodes:
        listed = cluster.ssh(node, "sudo iptables -L OUTPUT -v -x -n").stdout
        found[node] = sum(
            int(line.split()[1]) for line in listed.splitlines() if "mpicluster-registry" in line
        )
    return found


def with_python(ready, path: Path, python: dict | None) -> Path:
    data = yaml.safe_load(Path(ready["inventory"]).read_text())
    data.pop("python", None)
    if python is not None:
        data["python"] = python
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_jobs_own_packages_are_made_once_per_node_and_reused(ready, tmp_path):
    """run --requirements: the first job makes the environment on every node (the wheels
    resolved here, sent as --sync sends a tree, installed offline); the next with the
    same file finds it everywhere and makes nothing; the job imports its package and the
    stack's; a pin against the stack's numpy is refused before any node is asked."""
    nodes = ready["nodes"]
    wanted = tmp_path / "requirements.txt"
    wanted.write_text("toolz==1.0.0  # the job's own\n")
    program = "import socket, numpy, toolz; print('job', socket.gethostname(), toolz.__version__)"
    timings = {}
    for attempt in ("first", "again"):
        started = time.monotonic()
        done, result = run_json(ready, "--requirements", str(wanted), "--", "python", "-c", program)
        timings[attempt] = time.monotonic() - started
        assert done.returncode == 0, done.stderr[-3000:]
        made = result["requirements"]
        assert made["install"] == {"toolz": "1.0.0"}, made
        assert made["built_on"] == (nodes if attempt == "first" else []), made
        for node in nodes:
            assert f"job {node} 1.0.0" in done.stderr, done.stderr[-2000:]
    started = time.monotonic()
    done, _ = run_json(ready, "--", "python", "-c", "print('plain')")
    timings["without"] = time.monotonic() - started
    sys.stdout.write(f"run --requirements, seconds: {json.dumps(timings)}\n")
    wanted.write_text("numpy==1.26.4\n")
    done = run(ready, "--requirements", str(wanted), "--", "true")
    assert done.returncode == 2, done.stderr[-3000:]
    assert "'numpy==1.26.4' conflicts with the stack's numpy==" in done.stderr


def test_the_clusters_packages_install_offline_beside_the_stack(ready, tmp_path):
    """python.requirements: a pure-Python package, one with a compiled wheel and one
    that comes only as source (docopt: built here, once), resolved here with the stack's
    packages pinned, installed on every node with no byte to a registry (an iptables
    counter on each node), imported by every rank; a second up is a no-op; a pin against
    the stack's numpy is refused before anything changes; a changed list installs the
    difference; an emptied one takes them back."""
    cluster, nodes = ready["cluster"], ready["nodes"]
    wanted = ["python-dateutil==2.9.0.post0", "msgpack==1.1.0", "docopt==0.6.2"]
    inventory = with_python(ready, tmp_path / "packages.yaml", {"requirements": wanted})
    for node in nodes:
        cluster.ssh(node, f"sudo iptables -I {REGISTRY_RULE}")
    try:
        done = mpicluster("up", str(inventory), "--json", check=False, timeout=1800)
        counted = registry_bytes(cluster, nodes)
    finally:
        for node in nodes:
            cluster.ssh(node, f"sudo iptables -D {REGISTRY_RULE}", check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    (plan,) = [line for line in done.stderr.splitlines() if "The cluster's packages " in line]
    assert "docopt 0.6.2, msgpack 1.1.0, python-dateutil 2.9.0.post0, six " in plan, plan
    assert plan.endswith(f"to install on {', '.join(nodes)}"), plan
    assert counted == dict.fromkeys(nodes, 0), counted
    ran = mpicluster("run", str(inventory), "--", "python", "-c", IMPORTS, check=False)
    assert ran.returncode == 0, ran.stderr[-3000:]
    for node in nodes:
        assert f"imports {node} 2.9.0.post0 0.6.2 (1, 1, 0)" in ran.stdout, ran.stdout
    again = json.loads(mpicluster("up", str(inventory), "--json").stdout)
    assert again["path"] == "unchanged", again["why"]
    # another numpy than the stack's: refused before any change, both pins named
    asked = {"requirements": [*wanted, "numpy==1.26.4"]}
    clash = with_python(ready, tmp_path / "clash.yaml", asked)
    done = mpicluster("up", str(clash), check=False)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "'numpy==1.26.4' conflicts with the stack's numpy==" in done.stderr
    assert "Running playbooks/site.yml" not in done.stderr
    # msgpack goes, idna comes: only idna is installed
    before = cluster.ssh(nodes[1], f"readlink {PREFIX}/python/current").stdout.strip()
    asked = {"requirements": [wanted[0], "idna==3.10"]}
    changed = with_python(ready, tmp_path / "changed.yaml", asked)
    done = mpicluster("up", str(changed), "--json", check=False, timeout=1800)
    assert done.returncode == 0, done.stderr[-4000:]
    for node in nodes:
        left = cluster.ssh(node, f"ls {PREFIX}/python/current").stdout.split()
        assert not [n for n in left if n.startswith("msgpack")], (node, left)
        assert "idna-3.10.dist-info" in left, (node, left)
        assert cluster.ssh(node, f"readlink {PREFIX}/python/current").stdout.strip() != before
    # none asked: taken back (the .pth too), and the stack's manifest never saw them
    done = mpicluster("up", str(ready["inventory"]), "--json", check=False, timeout=1800)
    assert done.returncode == 0, done.stderr[-4000:]
    for node in nodes:
        assert cluster.ssh(node, f"test -e {PREFIX}/python", check=False).returncode == 1
    code, report = doctor(ready["inventory"], "--check", "stack")
    assert code == 0, report


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
