"""scheduler: slurm on a real 3-node local cluster (install: packages: Debian's Open MPI
4.1.4 on its external PMIx 4.2, the one Slurm's plugin serves): `up` ends with the
Slurm smoke test green (munge across nodes, scontrol ping, every node idle, srun on
every node, an `srun --mpi=pmix` allreduce as one world, an sbatch job COMPLETED), a
second `up` changes nothing, a stopped slurmd is named by doctor with its fix and
started again by `up`, and `down` leaves every node's filesystem, packages, users and
processes as they were before `up`.

The nodes get Debian's Open MPI and the base packages before the first snapshot: `down`
keeps what base and mpi_packages install (as it always has), so with them in place the
whole filesystem must come back as it was.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
import time

import pytest

from mpicluster.cluster.layout import SLURM_DRAIN
from mpicluster.cluster.state import cluster_dir
from mpicluster.slurm import MARKER, munge_key_path
from tests.cluster.nodes import podman_exec
from tests.conftest import inventory_with, mpicluster, start_local_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.on_demand, pytest.mark.slurm]

NAME, SUBNET = "pytest-slurm", "192.168.72.0/24"
NODES = ["node1", "node2", "node3"]
#: What base and mpi_packages install (and python3-apt, which Ansible's apt module
#: installs for itself), there before up (see the module's docstring).
PRESENT = (
    "openssh-client rsync procps iproute2 python3 python3-apt openmpi-bin libopenmpi-dev "
    "python3-mpi4py iperf3"
)
STEPS = ["munge", "ping", "nodes", "srun", "pmix", "sbatch"]
#: The node health check's interval here (seconds): short, so that the loop is seen.
INTERVAL = 10
#: Every path of the node's own filesystem with its mode, owner, size (and sha256 under
#: /etc and /run): what must be as before after down. Left out: what apt, dpkg and the
#: logins change on their own, and the tools' working folders.
SNAPSHOT = r"""
import hashlib, os, stat
SKIP = ("/proc", "/sys", "/dev", "/tmp", "/var/cache", "/var/lib/apt", "/var/lib/dpkg",
        "/var/log/apt", "/var/log/dpkg.log", "/var/log/alternatives.log",
        "/var/log/lastlog", "/var/log/wtmp", "/var/log/btmp", "/run/utmp", "/run/sshd",
        "/root/.ansible", "/home/vagrant/.ansible", "/home/vagrant/.ssh",
        "/etc/ld.so.cache", "/root/.cache", "/home/vagrant/.cache",
        "/home/vagrant/.local")  # detached jobs' folders: the user's, down leaves them
lines = []
for root, dirs, files in os.walk("/"):
    dirs[:] = sorted(d for d in dirs if os.path.join(root, d) not in SKIP
                     and not os.path.ismount(os.path.join(root, d)))
    for name in sorted(dirs + files):
        path = os.path.join(root, name)
        if path in SKIP or path.startswith("/root/snap"):
            continue
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            continue
        facts = [path, oct(info.st_mode), str(info.st_uid), str(info.st_gid)]
        if stat.S_ISREG(info.st_mode):
            facts.append(str(info.st_size))
            if path.startswith(("/etc/", "/run/")):
                with open(path, "rb") as handle:
                    facts.append(hashlib.sha256(handle.read()).hexdigest())
        elif stat.S_ISLNK(info.st_mode):
            facts.append(os.readlink(path))
        lines.append(" ".join(facts))
print("\n".join(lines))
"""
STATE = (
    "dpkg-query -W -f '${Package} ${Version} ${db:Status-Abbrev}\\n' | sort; echo ---; "
    "getent passwd; echo ---; getent group; echo ---; "
    "ps -eo user=,comm= | grep -E 'munge|slurm' | sort || true"
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    generated = tmp_path_factory.mktemp("slurm") / "generated.yaml"
    mpicluster("local", "down", "--name", NAME, check=False)  # leftovers of a killed run
    started = start_local_cluster(NAME, len(NODES), SUBNET, generated)
    for node in NODES:
        podman_exec(
            started,
            node,
            "export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && "
            f"apt-get install -y -qq --no-install-recommends {PRESENT} >/dev/null && "
            f"dpkg-query -W {PRESENT}",
        )
    yield started
    mpicluster("local", "down", "--name", NAME, check=False)


@pytest.fixture(scope="module")
def inventory(cluster):
    return inventory_with(
        cluster.inventory,
        cluster.inventory.parent / "slurm.yaml",
        stack={"install": "packages"},
        scheduler={"type": "slurm", "default_time": "30:00"},
        health={"interval": INTERVAL},
    )


def snapshot(cluster, node: str) -> dict[str, str]:
    files = podman_exec(cluster, node, f"python3 -c '{SNAPSHOT}'").stdout
    state = podman_exec(cluster, node, STATE).stdout
    return {"files": files, "state": state}


@pytest.fixture(scope="module")
def before(cluster, inventory) -> dict[str, dict]:
    return {node: snapshot(cluster, node) for node in NODES}


def up(inventory, *args: str) -> dict:
    done = mpicluster("up", str(inventory), "--json", *args, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    result = json.loads(done.stdout)
    assert done.returncode == 0, (result.get("hosts"), (result.get("smoke") or {}).get("slurm"))
    return result


def test_up_installs_slurm_and_its_smoke_test_is_green(cluster, inventory, before):
    result = up(inventory)
    slurm = result["smoke"]["slurm"]
    assert slurm["ok"] and slurm["controller"] == "node1"
    assert [step["name"] for step in slurm["steps"]] == STEPS
    steps = {step["name"]: step for step in slurm["steps"]}
    assert steps["pmix"]["detail"] == "one world of 3 ranks, exact"
    assert "COMPLETED" in steps["sbatch"]["detail"]


def test_every_node_has_one_slurm_conf_and_the_clusters_munge_key(cluster, inventory):
    secret = munge_key_path(NAME).read_bytes()
    key = hashlib.sha256(secret)
    confs = set()
    for node in NODES:
        text = podman_exec(cluster, node, "cat /etc/slurm/slurm.conf").stdout
        assert text.splitlines()[0] == MARKER
        assert "MpiDefault=pmix" in text and "ProctrackType=proctrack/linuxproc" in text
        assert "PartitionName=main Nodes=node1,node2,node3 Default=YES" in text
        assert "DefaultTime=30:00" in text
        confs.add(text)
        mpi = podman_exec(cluster, node, "cat /etc/slurm/mpi.conf").stdout
        assert "PMIxEnv=PMIX_MCA_psec=native" in mpi
        stat = podman_exec(cluster, node, "stat -c '%a %U %G' /etc/munge/munge.key").stdout
        assert stat.split() == ["400", "munge", "munge"]
        theirs = podman_exec(cluster, node, "sha256sum < /etc/munge/munge.key").stdout.split()[0]
        assert theirs == key.hexdigest()
        running = podman_exec(cluster, node, "ps -eo comm=").stdout.split()
        wanted = {"munged", "slurmd"} | ({"slurmctld"} if node == "node1" else set())
        assert wanted <= set(running), (node, running)
    assert len(confs) == 1
    # the key stays 0600 on the control machine and reaches no log, in no encoding
    assert munge_key_path(NAME).stat().st_mode & 0o777 == 0o600
    forms = [secret[:24].hex(), base64.b64encode(secret[:24]).decode()]
    for log in (cluster_dir(NAME) / "runs").rglob("*"):
        if log.is_file() and log.name != "munge.key":
            text = log.read_text(errors="replace")
            assert not any(form in text for form in forms), log


def test_a_second_up_changes_nothing(inventory):
    result = up(inventory, "--full")
    assert sum(host["changed"] for host in result["hosts"].values()) == 0, result["hosts"]
    assert result["smoke"]["slurm"]["ok"]
    fast = up(inventory)
    assert fast["path"] == "unchanged"


def doctor_slurm(inventory) -> tuple[int, list[dict]]:
    done = mpicluster("doctor", str(inventory), "--check", "slurm", "--json", check=False)
    assert "Traceback" not in done.stderr, done.stderr
    report = json.loads(done.stdout)
    check = next(c for c in report["checks"] if c["name"] == "slurm")
    return done.returncode, check["results"]


def test_doctor_names_a_stopped_slurmd_and_up_starts_it_again(cluster, inventory):
    code, results = doctor_slurm(inventory)
    assert code == 0, [r for r in results if r["status"] != "pass"]
    assert any("srun --mpi=pmix started one world of 3 ranks" in r["evidence"] for r in results)
    podman_exec(cluster, "node2", "pkill -x slurmd")
    code, results = doctor_slurm(inventory)
    assert code == 5  # a check failed
    named = [r for r in results if r["status"] == "fail" and r["node"] == "node2"]
    assert any(r["evidence"] == "slurmd is not running on node2" for r in named), results
    fix = next(r["fix"] for r in named if r["evidence"] == "slurmd is not running on node2")
    assert "mpicluster up" in fix and "/usr/sbin/slurmd" in fix
    result = up(inventory)
    assert result["path"] == "full"  # the fast path's smoke test found slurmd gone
    assert result["smoke"]["slurm"]["ok"]
    code, results = doctor_slurm(inventory)
    assert code == 0, [r for r in results if r["status"] != "pass"]


#: One line per rank: its rank, the world's size, its node as Slurm names it, and
#: PyTorch's variables as `run --torch` maps them.
PROGRAM = (
    "import os; from mpi4py import MPI; c = MPI.COMM_WORLD; "
    "print('rank', c.Get_rank(), 'of', c.Get_size(), os.environ['SLURMD_NODENAME'], "
    "os.environ.get('RANK'), os.environ.get('WORLD_SIZE'), os.environ.get('NODE_RANK'))"
)


def test_run_goes_through_slurm_when_the_inventory_has_a_scheduler(inventory):
    done = mpicluster(
        "run",
        str(inventory),
        "--per-node",
        "1",
        "--torch",
        "--tag",
        "--json",
        "--",
        "python3",
        "-c",
        PROGRAM,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["command"].startswith("env ") and " srun --mpi=pmix " in result["command"]
    lines = sorted(line for line in done.stderr.splitlines() if " rank " in line)
    assert lines == [f"[{r} node{r + 1}] rank {r} of 3 node{r + 1} {r} 3 {r}" for r in range(3)], (
        done.stderr[-2000:]
    )


def test_a_failing_rank_ends_the_slurm_job_and_is_named(inventory):
    program = (
        "from mpi4py import MPI; c = MPI.COMM_WORLD; "
        "assert c.Get_rank() != 1, 'rank 1 gives up'; c.Barrier()"
    )
    done = mpicluster(
        "run",
        str(inventory),
        "--per-node",
        "1",
        "--json",
        "--",
        "python3",
        "-c",
        program,
        check=False,
        timeout=180,
    )
    assert done.returncode not in (0, 124), done.stderr[-2000:]
    assert done.stderr.splitlines()[-1] == f"job exited with {done.returncode}"  # srun's
    result = json.loads(done.stdout)
    assert (result["failed_rank"], result["failed_node"]) == (1, "node2"), result
    assert any("rank 1 gives up" in line for line in result["tail"]), result
    assert result["seconds"] < 120


#: Every rank says where it runs, waits for the others, then rank 1 raises.
FAILS_LATER = (
    "import os, time; from mpi4py import MPI; c = MPI.COMM_WORLD; "
    "print('rank', c.Get_rank(), 'on', os.environ['SLURMD_NODENAME'], flush=True); "
    "time.sleep(3); c.Barrier(); assert c.Get_rank() != 1, 'rank 1 gives up'; c.Barrier()"
)
WAITS = "import time; print('waiting', flush=True); time.sleep(600)"


def cli_json(command: str, inventory, *args: str, timeout: float = 240):
    """The command's JSON (with `logs`, the job's own output, its ranks' tracebacks
    included, is on stderr)."""
    done = mpicluster(command, str(inventory), "--json", *args, check=False, timeout=timeout)
    assert done.stdout.strip(), done.stderr[-3000:]
    return done.returncode, json.loads(done.stdout), done.stderr


def job_processes(cluster, node: str, job_id: str) -> int:
    """The job's processes on the node (its id is in their environment)."""
    command = f"grep -l MPICLUSTER_JOB={job_id} /proc/[0-9]*/environ 2>/dev/null; true"
    return len(podman_exec(cluster, node, command).stdout.split())


def test_a_detached_job_is_a_slurm_batch_job_that_logs_follows_to_its_end(cluster, inventory):
    code, started, err = cli_json(
        "run", inventory, "--detach", "--per-node", "1", "--", "python3", "-c", FAILS_LATER
    )
    assert code == 0, err[-3000:]
    job_id, slurm_id = started["id"], started["slurm"]
    assert slurm_id > 0 and started["node"] == "node1", started
    code, listed, _ = cli_json("jobs", inventory)
    (found,) = [j for j in listed["jobs"] if j["id"] == job_id]
    assert found["slurm"] == slurm_id and found["state"] in ("queued", "running", "failed")
    code, end, err = cli_json("logs", inventory, job_id, "--follow")
    result = end["result"]
    assert end["state"] == "failed" and code == result["exit_code"] != 0, err[-3000:]
    assert (result["failed_rank"], result["failed_node"]) == (1, "node2"), result
    for rank in range(3):
        assert f"rank {rank} on node{rank + 1}" in err, err[-3000:]
    # Slurm's own record says the same, and the job's folder is on the batch host
    shown = podman_exec(cluster, "node1", f"scontrol show job -o {slurm_id}").stdout
    assert "JobState=FAILED" in shown and "BatchHost=node1" in shown, shown


def test_stop_cancels_a_detached_slurm_job_and_leaves_no_process(cluster, inventory):
    code, started, err = cli_json(
        "run", inventory, "--detach", "--per-node", "1", "--", "python3", "-c", WAITS
    )
    assert code == 0, err[-3000:]
    job_id, slurm_id = started["id"], started["slurm"]
    try:
        deadline = time.monotonic() + 120
        while sum(job_processes(cluster, n, job_id) > 0 for n in NODES) < len(NODES):
            assert time.monotonic() < deadline, "the job's ranks did not start on every node"
            time.sleep(1)
        code, listed, _ = cli_json("jobs", inventory)
        (found,) = [j for j in listed["jobs"] if j["id"] == job_id]
        assert (found["state"], found["slurm_state"]) == ("running", "RUNNING"), found
    finally:
        code, stopped, err = cli_json("stop", inventory, job_id)
    assert code == 0 and (stopped["state"], stopped["was_running"]) == ("stopped", True), err
    assert {n: job_processes(cluster, n, job_id) for n in NODES} == dict.fromkeys(NODES, 0)
    queued = podman_exec(cluster, "node1", f"squeue -h -j {slurm_id} -o %T; true").stdout
    assert queued.strip() in ("", "CANCELLED"), queued
    code, end, err = cli_json("logs", inventory, job_id)
    assert code == 130 and end["result"]["stopped"] and "waiting" in err, err[-3000:]


def slurm_node(cluster, node: str) -> tuple[set[str], str]:
    """The node's state words and its drain reason, as slurmctld has them."""
    shown = podman_exec(cluster, "node1", f"sinfo -h -N -n {node} -o '%T|%E' | head -1").stdout
    state, _, reason = shown.strip().partition("|")
    return {state.rstrip("*~#!%$@^-")}, reason


def wait_for(what, predicate, seconds: float) -> float:
    """Seconds until predicate() holds (fails the test past `seconds`)."""
    started = time.monotonic()
    while not predicate():
        assert time.monotonic() - started < seconds, f"not within {seconds:.0f} s: {what}"
        time.sleep(1)
    return time.monotonic() - started


def job_state(cluster, slurm_id: str) -> dict[str, str]:
    shown = podman_exec(cluster, "node1", f"scontrol show job -o {slurm_id}").stdout
    return dict(word.partition("=")[::2] for word in shown.split() if "=" in word)


def sbatch(cluster, *options: str) -> str:
    command = "cd /tmp && sbatch --parsable " + " ".join(options) + " --wrap 'srun hostname'"
    return podman_exec(cluster, "node1", command).stdout.strip()


def test_a_node_gone_bad_is_drained_and_returns_by_itself(cluster, inventory):
    """The health check every INTERVAL s: /tmp not writable on node2 drains it with
    mpicluster's reason, a job submitted meanwhile runs on the other nodes, the repair
    returns it after two passes; node3 drained by hand with another reason stays so."""
    limit = 6 * INTERVAL + 30
    podman_exec(cluster, "node2", "chmod 0755 /tmp")
    try:
        drained = wait_for(
            "node2 drained by its check",
            lambda: slurm_node(cluster, "node2")[1].startswith("mpicluster: disk: /tmp"),
            limit,
        )
        assert slurm_node(cluster, "node2")[0] == {"drained"}
        submitted = sbatch(cluster, "-N2")
        wait_for(
            "the job on the other nodes completed",
            lambda: job_state(cluster, submitted).get("JobState") == "COMPLETED",
            90,
        )
        assert job_state(cluster, submitted)["NodeList"] == "node[1,3]"
        recorded = podman_exec(cluster, "node2", f"cat {SLURM_DRAIN}").stdout
        assert json.loads(recorded)["reason"] == slurm_node(cluster, "node2")[1]
    finally:
        podman_exec(cluster, "node2", "chmod 1777 /tmp")
    returned = wait_for(
        "node2 returned by its check", lambda: slurm_node(cluster, "node2")[0] == {"idle"}, limit
    )
    assert podman_exec(cluster, "node2", f"test -e {SLURM_DRAIN}", check=False).returncode == 1
    # an operator's drain outlives passing checks
    podman_exec(cluster, "node1", "scontrol update NodeName=node3 State=DRAIN Reason='disk swap'")
    time.sleep(3 * INTERVAL)
    assert slurm_node(cluster, "node3") == ({"drained"}, "disk swap")
    podman_exec(cluster, "node1", "scontrol update NodeName=node3 State=RESUME")
    sys.stderr.write(  # the figures for docs/slurm.md, shown with pytest -s
        f"interval {INTERVAL} s: break to drained {drained:.0f} s, "
        f"repair to back in service {returned:.0f} s\n"
    )


def test_the_prolog_keeps_a_job_off_a_node_gone_bad_since_the_last_check(cluster, inventory):
    """A job that lands on node2 between two checks: its prolog finds /tmp not writable,
    drains node2 with mpicluster's reason and Slurm requeues the job, not held. (The
    periodic check may find it first: then the try is repeated.)"""
    for _ in range(3):
        podman_exec(cluster, "node2", "chmod 0755 /tmp")
        try:
            submitted = sbatch(cluster, "-w", "node2")
            wait_for(
                "node2 drained",
                lambda: slurm_node(cluster, "node2")[1].startswith("mpicluster: disk: /tmp"),
                6 * INTERVAL + 30,
            )
            time.sleep(2)
            job = job_state(cluster, submitted)
            podman_exec(cluster, "node1", f"scancel {submitted}")
        finally:
            podman_exec(cluster, "node2", "chmod 1777 /tmp")
        wait_for("node2 back", lambda: slurm_node(cluster, "node2")[0] == {"idle"}, 120)
        if job.get("Restarts", "0") != "0":
            break
    assert job.get("Restarts") == "1", job
    assert job["JobState"] == "PENDING" and job.get("Reason") != "JobHeldUser", job


def test_up_without_the_scheduler_takes_slurm_back(cluster, inventory, before):
    plain = inventory_with(
        cluster.inventory, cluster.inventory.parent / "plain.yaml", stack={"install": "packages"}
    )
    result = up(plain)
    assert result["smoke"]["slurm"] is None
    for node in NODES:
        was, now = (
            set(before[node]["state"].splitlines()),
            set(snapshot(cluster, node)["state"].splitlines()),
        )
        assert was == now, (node, sorted(was - now), sorted(now - was))
        left = podman_exec(cluster, node, "ls -d /etc/slurm /etc/munge /var/lib/slurm", check=False)
        assert left.stdout == "", (node, left.stdout)
    up(inventory)  # and back, for down


def test_down_leaves_the_nodes_as_before_up(cluster, inventory, before):
    done = mpicluster("down", str(inventory), "--json", check=False)
    assert done.returncode == 0, done.stdout[-3000:]
    for node in NODES:
        after = snapshot(cluster, node)
        for part in ("state", "files"):
            was, now = set(before[node][part].splitlines()), set(after[part].splitlines())
            assert was == now, (node, part, sorted(was - now)[:20], sorted(now - was)[:20])
