"""The cluster's users under Slurm, on their own 3-node local cluster (Debian's Open MPI
and Slurm): each user's srun and sbatch run as herself on every node (the uids agree),
her job's output is hers alone, and neither can cancel the other's job nor signal the
other's processes (each refusal beside the owner's success)."""

from __future__ import annotations

import subprocess
import time

import pytest

from mpicluster.cluster.inventory import load_inventory
from tests.conftest import inventory_with, mpicluster, start_local_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.on_demand, pytest.mark.slurm]

NAME, SUBNET = "pytest-users-slurm", "192.168.73.0/24"
NODES = ["node1", "node2", "node3"]


@pytest.fixture(scope="module")
def people(tmp_path_factory):
    folder = tmp_path_factory.mktemp("users-slurm")
    mpicluster("local", "down", "--name", NAME, check=False)
    cluster = start_local_cluster(NAME, len(NODES), SUBNET, folder / "generated.yaml")
    keys = {}
    for name in ("alice", "bob"):
        keys[name] = folder / name
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys[name])], check=True
        )
    inventory = inventory_with(
        cluster.inventory,
        folder / "users.yaml",
        stack={"install": "packages"},
        scheduler={"type": "slurm", "default_time": "10:00"},
        users=[{"name": n, "keys": [f"{keys[n]}.pub"]} for n in ("alice", "bob")],
    )
    done = mpicluster("up", str(inventory), check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    yield {"inventory": inventory, "keys": keys, "cluster": cluster}
    mpicluster("local", "down", "--name", NAME, check=False)


def login(people, user: str, command: str, node: str = "node1"):
    inv = load_inventory(people["inventory"])
    ssh = inv.node_ssh(next(n for n in inv.nodes if n.name == node))
    argv = [
        "ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
        "-o", f"UserKnownHostsFile={ssh.known_hosts}", "-o", "IdentitiesOnly=yes",
        "-i", str(people["keys"][user]), "-p", str(ssh.port), f"{user}@{ssh.host}", command,
    ]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)


def test_each_users_srun_runs_as_herself_on_every_node(people):
    for user in ("alice", "bob"):
        mine = login(people, user, "id -u").stdout.strip()
        done = login(people, user, "srun -N3 --ntasks-per-node=1 sh -c 'echo $(hostname) $(id -u)'")
        assert done.returncode == 0, (user, done.stderr[-2000:])
        lines = sorted(done.stdout.split("\n")[:-1])
        assert lines == [f"{node} {mine}" for node in NODES], (user, done.stdout)


def wait_done(people, user: str, job: str, seconds: float = 120) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        state = login(people, user, f"scontrol show job -o {job}").stdout
        if "JobState=COMPLETED" in state or "JobState=FAILED" in state:
            return state
        time.sleep(2)
    raise AssertionError(f"job {job} did not end: {state}")


def test_her_batch_output_lands_in_her_home_hers_alone(people):
    job = login(people, "alice", "cd ~ && sbatch --parsable -N2 --wrap 'srun hostname'")
    assert job.returncode == 0, job.stderr
    number = job.stdout.strip()
    assert "JobState=COMPLETED" in wait_done(people, "alice", number)
    out = f"/home/alice/slurm-{number}.out"
    mine = login(people, "alice", f"stat -c '%U' {out}; sort {out}")
    assert mine.stdout.split() == ["alice", "node1", "node2"], mine.stdout
    theirs = login(people, "bob", f"cat {out}")
    assert theirs.returncode != 0 and "Permission denied" in theirs.stderr


def test_no_user_reads_the_munge_key(people):
    key = "/etc/munge/munge.key"
    for user in ("alice", "bob"):
        for node in NODES:
            refused = login(people, user, f"cat {key}", node=node)
            assert refused.returncode != 0 and "Permission denied" in refused.stderr, refused
    # its owner does: the refusal is not a missing file
    assert people["cluster"].ssh("node1", f"sudo -u munge test -r {key}").returncode == 0


def test_nobody_cancels_or_signals_anothers_job(people):
    job = login(people, "alice", "cd ~ && sbatch --parsable -N1 -w node2 --wrap 'sleep 300'")
    number = job.stdout.strip()
    try:
        deadline = time.monotonic() + 60
        while (
            "JobState=RUNNING"
            not in login(people, "alice", f"scontrol show job -o {number}").stdout
        ):
            assert time.monotonic() < deadline, "alice's job did not start"
            time.sleep(2)
        refused = login(people, "bob", f"scancel {number}; squeue -h -j {number} -o %T")
        assert "RUNNING" in refused.stdout, refused
        assert "denied" in refused.stderr.lower() or "not permitted" in refused.stderr.lower()
        pid = login(people, "alice", "pgrep -u alice -x sleep", node="node2").stdout.split()[0]
        signal = login(people, "bob", f"kill {pid}", node="node2")
        assert signal.returncode != 0 and "not permitted" in signal.stderr.lower(), signal
        assert login(people, "alice", f"kill -0 {pid}", node="node2").returncode == 0
    finally:
        cancelled = login(people, "alice", f"scancel {number}")
    assert cancelled.returncode == 0, cancelled.stderr
