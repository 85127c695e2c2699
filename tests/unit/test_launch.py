"""`mpicluster run`'s command line on the head node (pure logic)."""

from __future__ import annotations

import subprocess

import pytest

from mpicluster.run import job
from mpicluster.run.job_command import (
    PYTHON_RANK,
    TORCH_WRAPPER,
    HeadFacts,
    RunOptions,
    build,
    parse_env_file,
    program_argv,
)
from mpicluster.util.errors import MpiclusterError, UsageError
from tests.unit.plans import plan_of

INVENTORY = plan_of(
    "cluster: t\nnetwork: {interface: eth1}\n"
    "nodes:\n  - {name: node1, slots: 2}\n  - {name: node2, slots: 2}\n"
    "  - {name: node3, slots: 2}\n"
)
HEAD = HeadFacts({"node1": 2, "node2": 2, "node3": 2}, 5, 29500, "vagrant")


def plan(*program: str, **options):
    return build(INVENTORY, RunOptions(program=program, **options), HEAD, {})


def test_default_is_every_slot_placed_by_slot_with_tagged_output():
    launch = plan("hostname")
    assert launch.argv[:10] == [
        "/opt/mpicluster/current/bin/mpirun",
        "--host",
        "node1:2,node2:2,node3:2",
        "-np",
        "6",
        "--map-by",
        "slot",
        # every node's daemons from its own build (a mixed-release cluster has two)
        "--prefix",
        "/opt/mpicluster/current",
        "--output",
    ]
    assert launch.argv[-1] == "hostname"
    assert [launch.node_of(r) for r in range(6)] == ["node1"] * 2 + ["node2"] * 2 + ["node3"] * 2
    assert launch.env == {"PYTHONUNBUFFERED": "1", "NCCL_SOCKET_IFNAME": "eth1"}
    assert "--allow-run-as-root" not in launch.argv
    four = build(INVENTORY, RunOptions(program=("a",)), HeadFacts(HEAD.slots, 4, 1, "root"), {})
    assert "--tag-output" in four.argv and "--allow-run-as-root" in four.argv
    # the distribution's Open MPI: its own default prefix (/usr), the same on every node
    packages = plan_of(
        "cluster: t\nstack: {install: packages}\nnodes:\n  - {name: node1, slots: 2}\n"
    )
    apt = build(packages, RunOptions(program=("a",)), HeadFacts({"node1": 2}, 4, 1, "u"), {})
    assert "--prefix" not in apt.argv


def test_np_per_node_and_hosts_place_ranks_in_order():
    assert plan("a", np=3).placement == {"node1": 2, "node2": 1}
    assert plan("a", per_node=1).placement == {"node1": 1, "node2": 1, "node3": 1}
    assert plan("a", hosts=("node3", "node1"), per_node=4, np=5).placement == {
        "node3": 4,
        "node1": 1,
    }
    assert plan("a", map_by="ppr:1:core").argv[6] == "ppr:1:core"


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"np": 7}, "more than the 6 slot(s)"),
        ({"np": 0}, "at least 1"),
        ({"hosts": ("node9",)}, "--nodes 'node9': no such node"),
        ({"hosts": ("node1", "node1")}, "twice"),
        ({"env": ("1BAD=x",)}, "not NAME or NAME=VALUE"),
        ({"env": ("UNSET_HERE",)}, "not set here"),
        ({"launcher": "torchrun", "np": 2}, "torchrun takes --per-node"),
    ],
)
def test_bad_options_are_usage_errors(options, words):
    with pytest.raises(UsageError) as exc:
        plan("a", **options)
    assert words in exc.value.message
    with pytest.raises(UsageError, match="no program"):
        plan()


def test_environment_passes_nccl_and_python_variables_and_explicit_ones():
    control = {"NCCL_IB_DISABLE": "1", "PYTHONPATH": "/x", "PYTHONHOME": "/bad", "HOME": "/h"}
    launch = build(
        INVENTORY,
        RunOptions(program=("a",), env=("HOME", "A=1=2"), env_file={"B": "2"}, debug=True),
        HEAD,
        control,
    )
    assert launch.env == {
        "NCCL_IB_DISABLE": "1",
        "PYTHONPATH": "/x",
        "PYTHONUNBUFFERED": "1",
        "NCCL_SOCKET_IFNAME": "eth1",
        "B": "2",
        "HOME": "/h",
        "A": "1=2",
        "NCCL_DEBUG": "INFO",
    }
    exported = [launch.argv[i + 1] for i, a in enumerate(launch.argv) if a == "-x"]
    assert exported == list(launch.env)
    assert "PYTHONHOME" not in launch.command()
    assert parse_env_file("# c\n\nexport X='a b'\nY=1\n", "f") == {"X": "a b", "Y": "1"}
    with pytest.raises(UsageError, match="f:2: not NAME=VALUE"):
        parse_env_file("X=1\nnonsense\n", "f")


def test_python_programs_run_the_mpi4py_way_line_buffered():
    def run(*program: str) -> list[str]:
        argv = program_argv(RunOptions(program=program))
        return ["RANK" if a == PYTHON_RANK else a for a in argv]

    assert run("python", "train.py", "--lr", "1") == [
        "python",
        "-c",
        "RANK",
        "train.py",
        "--lr",
        "1",
    ]
    assert run("train.py") == ["python", "-c", "RANK", "train.py"]
    assert run("python3", "-m", "pkg.main") == ["python3", "-c", "RANK", "-m", "pkg.main"]
    assert run("python", "-u", "x.py") == ["python", "-u", "x.py"]
    assert run("./a.out") == ["./a.out"]
    # whole lines, and an exception raised in the program aborts (mpi4py.run's behaviour)
    assert "line_buffering=True" in PYTHON_RANK and "mpi4py.run import main" in PYTHON_RANK
    assert "PYTHONUNBUFFERED" not in plan("python", "x.py").env
    assert plan("./a.out").env["PYTHONUNBUFFERED"] == "1"


def test_torch_variables_come_from_open_mpis_in_every_rank():
    """The wrapper, run by a real shell with the variables Open MPI would set."""
    launch = plan("python", "train.py", torch=True, hosts=("node2", "node3"), per_node=2, np=3)
    assert launch.env["MASTER_ADDR"] == "node2" and launch.env["MASTER_PORT"] == "29500"
    assert launch.env["MPICLUSTER_RANKS_PER_NODE"] == "2 1"
    at = launch.argv.index(TORCH_WRAPPER)
    assert launch.argv[at - 2 : at] == ["sh", "-c"]
    seen = []
    for rank, local, local_size in ((0, 0, 2), (1, 1, 2), (2, 0, 1)):
        env = {
            "OMPI_COMM_WORLD_RANK": str(rank),
            "OMPI_COMM_WORLD_SIZE": "3",
            "OMPI_COMM_WORLD_LOCAL_RANK": str(local),
            "OMPI_COMM_WORLD_LOCAL_SIZE": str(local_size),
            "MPICLUSTER_RANKS_PER_NODE": "2 1",
            "PATH": "/usr/bin:/bin",
        }
        printed = subprocess.run(
            [
                "sh",
                "-c",
                TORCH_WRAPPER,
                "sh",
                "sh",
                "-c",
                "echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $NODE_RANK $GROUP_RANK",
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        seen.append(printed)
    assert seen == [
        ["0", "3", "0", "2", "0", "0"],
        ["1", "3", "1", "2", "0", "0"],
        ["2", "3", "0", "1", "1", "1"],
    ]


def test_torchrun_starts_one_per_node_with_a_static_rendezvous():
    launch = plan("train.py", "--epochs", "2", launcher="torchrun")
    assert launch.placement == {"node1": 1, "node2": 1, "node3": 1}
    assert launch.argv[:7] == [
        "/opt/mpicluster/current/bin/mpirun",
        "--host",
        "node1:1,node2:1,node3:1",
        "-np",
        "3",
        "--map-by",
        "ppr:1:node",
    ]
    script = launch.argv[launch.argv.index("-c") + 1]
    assert script == (
        "exec torchrun --nnodes 3 --nproc-per-node 2 --master-addr node1 --master-port 29500"
        ' --node-rank "$OMPI_COMM_WORLD_RANK" "$@"'
    )
    assert launch.argv[-4:] == ["sh", "train.py", "--epochs", "2"]


def test_head_facts_and_failure_lines_are_parsed():
    said = "mpirun (Open MPI) 5.0.7\n\nReport bugs\n@@mpirun-exit 0\n@@slots\n"
    text = said + "node1 slots=2\nnode2 slots=4\n@@port\n40123\n@@user\nvagrant\n"
    facts = job.parse_head_facts("node1", text)
    assert facts == HeadFacts({"node1": 2, "node2": 4}, 5, 40123, "vagrant")
    with pytest.raises(MpiclusterError, match="no hostfile"):
        job.parse_head_facts("node1", said + "@@port\n1\n@@user\nroot\n")
    with pytest.raises(MpiclusterError, match="not Open MPI"):
        hydra = "HYDRA build details:\n@@mpirun-exit 0\n@@slots\na slots=1\n"
        job.parse_head_facts("node1", hydra + "@@port\n1\n@@user\nroot\n")
    with pytest.raises(MpiclusterError, match="cut short"):
        job.parse_head_facts("node1", said + "a slots=1\n@@port\n1\n")
    gone = "sh: 1: /opt/x/bin/mpirun: not found\n@@mpirun-exit 127\n@@slots\na slots=1\n"
    with pytest.raises(MpiclusterError, match=r"failed on the head \(node1\): sh: 1: /opt"):
        job.parse_head_facts("node1", gone + "@@port\n1\n@@user\nroot\n")
    assert job.failed_rank(["  Process name: [[47089,1],2]", "  Exit code:    1"]) == 2
    assert job.failed_rank(["   Process name: [prterun-node1-1234@1,1]"]) == 1
    assert job.failed_rank(["MPI_ABORT was invoked on rank 3 in communicator MPI_COMM_WORLD"]) == 3
    assert job.failed_rank(["all fine"]) is None
    wrapped = [  # PRRTE's message, as it printed it on the local cluster
        "prterun noticed that process rank 2 with PID 1182 on node node3 exited on",
        "signal 6 (Aborted).",
    ]
    assert job.failed_rank(wrapped) == 2


def test_output_lines_are_reassembled_from_tagged_chunks_and_each_ranks_tail_kept():
    seen = []
    nodes = {0: "node1", 1: "node2", 2: "node3"}
    streams = job.Streams(lambda *a: seen.append(a), nodes.get, " ")
    streams.feed("stdout", b"[1,0]<stdout>: hello\n[1,1]<stderr>: Traceback (most recent")
    streams.feed("stdout", b" call last)\nmpirun says\n[1,2]<stdout>: two\n")
    streams.flush()
    assert seen == [
        (0, "node1", "stdout", "hello"),
        (1, "node2", "stderr", "Traceback (most recent call last)"),
        (None, None, "stdout", "mpirun says"),
        (2, "node3", "stdout", "two"),
    ]
    assert streams.raised == [1] and list(streams.tails[0]) == ["hello"]
    # Open MPI 4.x: no space after the tag; an unbuffered print arrives in chunks that
    # interleave with other ranks' (seen on the local cluster)
    seen.clear()
    four = job.Streams(lambda *a: seen.append(a), nodes.get, "")
    four.feed("stdout", b"[1,0]<stdout>:rank 0[1,2]<stdout>:rank 2[1,0]<stdout>: starting\n")
    four.feed("stdout", b"[1,2]<stdout>: starting\n[1,1]<stdout>:no newline")
    four.flush()
    assert seen == [
        (0, "node1", "stdout", "rank 0 starting"),
        (2, "node3", "stdout", "rank 2 starting"),
        (1, "node2", "stdout", "no newline"),
    ]


SLURM = plan_of(
    "cluster: t\nnetwork: {interface: eth1}\nscheduler: {type: slurm}\n"
    "nodes:\n  - {name: node1, slots: 2}\n  - {name: node2, slots: 2}\n"
    "  - {name: node3, slots: 2}\n"
)


def srun(*program: str, **options):
    return build(SLURM, RunOptions(program=program, via="slurm", **options), HEAD, {})


def test_via_slurm_is_one_srun_step_with_pmix_and_the_same_environment():
    launch = srun("python", "train.py", per_node=1, hosts=("node3", "node1"))
    assert launch.via == "slurm"
    assert launch.argv[:9] == [
        "srun",
        "--mpi=pmix",
        "--nodes=2",
        "--nodelist=node1,node3",  # Slurm numbers ranks in its node order
        "--ntasks-per-node=1",
        "--ntasks=2",
        "--kill-on-bad-exit=1",
        "--label",
        "--job-name=mpicluster-run",
    ]
    assert launch.argv[9:] == program_argv(RunOptions(program=("python", "train.py"), via="slurm"))
    assert "time.sleep(0.5)" in launch.argv[11]
    assert [launch.node_of(r) for r in range(2)] == ["node1", "node3"]
    assert launch.env == {"NCCL_SOCKET_IFNAME": "eth1"}  # srun passes the launcher's on


def test_via_slurm_maps_slurms_variables_for_pytorch():
    launch = srun("python", "ddp.py", torch=True)
    assert launch.env["MASTER_ADDR"] == "node1" and launch.env["MASTER_PORT"] == "29500"
    assert launch.env["MPICLUSTER_PER_NODE"] == "2"
    wrapper = launch.argv[launch.argv.index("-c") + 1]
    done = subprocess.run(
        [
            "sh",
            "-c",
            wrapper,
            "sh",
            "sh",
            "-c",
            "echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $NODE_RANK",
        ],
        env={
            "SLURM_PROCID": "3",
            "SLURM_NTASKS": "6",
            "SLURM_LOCALID": "1",
            "SLURM_NODEID": "1",
            "MPICLUSTER_PER_NODE": "2",
            "PATH": "/usr/bin:/bin",
        },
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout.split() == ["3", "6", "1", "2", "1"]
    torchrun = srun("train.py", launcher="torchrun", per_node=2)
    assert "--ntasks-per-node=1" in torchrun.argv
    assert '--node-rank "$SLURM_NODEID"' in torchrun.argv[torchrun.argv.index("-c") + 1]


def test_via_slurm_refusals():
    with pytest.raises(UsageError, match="no scheduler"):
        plan("a", via="slurm")
    with pytest.raises(UsageError, match="--map-by is mpirun's"):
        srun("a", map_by="node")
    with pytest.raises(UsageError, match="as many ranks on each node"):
        srun("a", np=5)
    assert srun("a", np=3, per_node=1).ranks == 3


def test_srun_labels_and_its_failed_task():
    seen = []
    nodes = {0: "node1", 1: "node2", 12: "node3"}
    streams = job.Streams(lambda *a: seen.append(a), nodes.get, slurm=True)
    streams.feed("stdout", b"0: hello\n 12: twelve\nsrun: job 7 queued\n")
    streams.feed("stderr", b"1: Traceback (most recent call last)\n")
    streams.flush()
    assert seen == [
        (0, "node1", "stdout", "hello"),
        (12, "node3", "stdout", "twelve"),
        (None, None, "stdout", "srun: job 7 queued"),
        (1, "node2", "stderr", "Traceback (most recent call last)"),
    ]
    said = [
        "srun: error: node1: tasks 0,2: Killed",
        "srun: error: node2: task 1: Exited with exit code 3",
    ]
    assert job.failed_rank(said) == 1
    assert job.failed_rank(said[:1]) is None


def test_a_failed_ranks_tail_ends_with_its_exception_not_mpis_banner_after_it():
    streams = job.Streams(lambda *a: None, {1: "node2"}.get, slurm=True)
    lines = ["1: Traceback (most recent call last):", '1:   File "<string>", line 1']
    lines += ["1: AssertionError: rank 1 gives up", "1: " + "-" * 20]
    lines += [f"1: MPI_ABORT banner {n}" for n in range(12)]
    streams.feed("stderr", ("\n".join(lines) + "\n").encode())
    assert streams.at_traceback[1][-1] == "AssertionError: rank 1 gives up"
    assert streams.at_traceback[1][0] == "Traceback (most recent call last):"
    assert list(streams.tails[1])[-1] == "MPI_ABORT banner 11"


def test_a_cordoned_node_is_left_out_said_so_and_refused_by_name():
    from mpicluster.cluster.cordons import Cordon, CordonState

    state = CordonState(1, {"node2": Cordon("bad disk", 1.0, "doctor", "me@here")})
    head = HeadFacts({"node1": 2, "node3": 2}, 5, 29500, "vagrant", state)  # its hostfile
    launch = build(INVENTORY, RunOptions(program=("a",)), head, {})
    assert launch.placement == {"node1": 2, "node3": 2}
    assert launch.left_out == ("node2 is cordoned (bad disk; by doctor): left out",)
    with pytest.raises(UsageError, match=r"--nodes node2: node2 is cordoned \(bad disk"):
        build(INVENTORY, RunOptions(program=("a",), hosts=("node2",)), head, {})
    every = CordonState(3, dict.fromkeys(("node1", "node2", "node3"), Cordon("x", 1.0)))
    with pytest.raises(UsageError, match="every node is cordoned"):
        build(INVENTORY, RunOptions(program=("a",)), HeadFacts({}, 5, 1, "u", every), {})
