"""The node's own health check (remote/health.py) as `up` installs it: the composed
program run on this machine's /usr/bin/python3, isolated (-I: no mpicluster, no
site-packages), on a record and a stack made here; and its judgement, doctor's judges
shipped with it, on facts recorded on a real H200 and doctored ones."""

from __future__ import annotations

import getpass
import json
import pwd
import socket
import subprocess
from pathlib import Path

import pytest

from mpicluster import remote
from mpicluster.cluster.layout import BLOCK_BEGIN, BLOCK_END
from tests.shipped import load
from tests.unit.test_gpu_health import H200_XML, changed, health, probe  # noqa: F401
from tests.unit.test_stack_manifest import tree  # noqa: F401 (a fixture)

PYTHON = "/usr/bin/python3"
NODE = socket.gethostname()


def record(tmp_path: Path, prefix: Path, **node) -> Path:
    path = tmp_path / "health.json"
    entry = {"user": None, "gpus": 0, "slots": 2, **node}
    path.write_text(
        json.dumps(
            {
                "cluster": "t",
                "layout": {"prefix": str(prefix), "install": "source"},
                "gpus_present": True,
                "nodes": {NODE: entry, "other": {"user": None, "gpus": 0, "slots": 2}},
            }
        )
    )
    return path


def check(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    program = tmp_path / "mpicluster-health"
    program.write_text(f"#!{PYTHON}\n" + remote.script("health"))
    return subprocess.run(
        [PYTHON, "-I", str(program), *args], capture_output=True, text=True, timeout=60, check=False
    )


@pytest.fixture
def prefix(tmp_path, tree):  # noqa: F811 (the fixture)
    """An install prefix whose active stack is `tree`, as `up` leaves it."""
    root = tmp_path / "opt"
    root.mkdir()
    (root / "current").symlink_to(tree)
    return root


def test_a_healthy_node_passes_in_well_under_a_second_on_the_nodes_python(tmp_path, prefix):
    config = record(tmp_path, prefix)
    done = check(tmp_path, "--config", str(config))
    assert done.returncode == 0, done.stderr
    (line,) = done.stdout.splitlines()
    assert line.startswith(f"mpicluster-health: {NODE} healthy (disk, stack; ")
    found = json.loads(check(tmp_path, "--config", str(config), "--json").stdout)
    assert (found["schema"], found["node"], found["healthy"]) == (1, NODE, True)
    assert {f["check"]: f["status"] for f in found["findings"]} == {"stack": "pass", "disk": "pass"}
    assert found["seconds"] < 1.0


def test_a_damaged_stack_makes_the_node_unhealthy_in_nhc_lines(tmp_path, prefix, tree):  # noqa: F811
    (tree / "bin/prted").chmod(0o700)
    done = check(tmp_path, "--config", str(record(tmp_path, prefix)))
    assert done.returncode == 1
    error, fix, state = done.stdout.splitlines()
    assert error.startswith(f"ERROR: mpicluster-health: stack: {tree}: 1 changed of 10 files")
    assert "bin/prted changed (mode (0700, was 0755))" in error
    assert fix.startswith("  fix: run `mpicluster up`: it installs")
    assert state.startswith(f"mpicluster-health: {NODE} UNHEALTHY (disk, stack; ")


def test_what_it_cannot_judge_is_one_line_and_exit_2(tmp_path, prefix):
    config = record(tmp_path, prefix)
    missing = check(tmp_path, "--config", str(tmp_path / "none.json"))
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.startswith("mpicluster-health: no record of the cluster at ")
    assert len(missing.stderr.splitlines()) == 1
    other = check(tmp_path, "--config", str(config), "--node", "node9")
    assert (other.returncode, other.stderr) == (
        2,
        "mpicluster-health: --node node9: not a node of cluster t\n",
    )
    odd = check(tmp_path, "--config", str(config), "--fast")
    assert odd.returncode == 2 and "unknown argument '--fast'" in odd.stderr
    named = check(tmp_path, "--config", str(config), "--node", "other", "--json")
    assert json.loads(named.stdout)["node"] == "other"


def test_the_mpi_users_login_is_judged_on_the_nodes_python_too(tmp_path, prefix):
    """With a user in the record (this machine's own: its login, ssh files and sshd are
    whatever they are here), the shipped env, rank, limits and ssh judges run, isolated,
    each saying something, in well under a second."""
    user = getpass.getuser()
    try:
        pwd.getpwnam(user)
    except KeyError:
        pytest.skip(f"{user} has no passwd entry here (a container's arbitrary uid)")
    config = record(tmp_path, prefix, user=user)
    done = check(tmp_path, "--config", str(config), "--json")
    assert done.returncode in (0, 1), done.stderr
    found = json.loads(done.stdout)
    checks = {f["check"] for f in found["findings"]}
    assert {"stack", "disk", "env", "limits", "ssh"} <= checks, found
    assert all(f["evidence"] for f in found["findings"])
    assert found["seconds"] < 1.0


def test_up_records_what_the_login_judges_need():
    """The record `up` writes beside the program: the layout the env check builds its
    Layout from, the MPI settings of the block, each node's ssh port (peers log in there)."""
    from mpicluster.up.provision import health_record
    from tests.unit.plans import plan_of

    plan = plan_of(
        "cluster: t\nnetwork: {cidr: 10.9.0.0/24}\nssh: {user: mpi}\nnodes:\n"
        "  - {name: n1, address: 10.9.0.11, gpus: 1}\n"
        "  - {name: n2, address: 10.9.0.12, ssh: {port: 2222}}\n"
    )
    written = health_record(plan, {"n1": 1, "n2": 2})
    assert written["layout"] == {
        "prefix": plan.layout.prefix,
        "install": plan.layout.install,
        "cuda_home": plan.layout.cuda_home,
        "packages": False,
        "site_ucx": None,
    }
    assert written["mpi_env"] == dict(plan.mpi_env) and written["mpi_env"]
    assert written["nodes"]["n1"] == {"user": "mpi", "port": 22, "gpus": 1, "slots": 1}
    assert written["nodes"]["n2"]["port"] == 2222
    json.dumps(written)  # as up writes it


@pytest.fixture(scope="module")
def program():
    return load("health")


def gpu_facts(probe, xml: str = H200_XML, count: int = 1, **parts) -> dict:  # noqa: F811
    return {
        "env": {"USER": "mpi"},
        "disk": {},
        "gpus": {"ok": True, "count": count},
        "gpu_health": health(probe, xml, **parts),
    }


GPU_RECORD = {
    "cluster": "g",
    "layout": {"prefix": "/opt/mpicluster", "install": "packages"},
    "nodes": {"g1": {"user": "mpi", "gpus": 1, "slots": 1}},
}


def findings(program, facts: dict) -> list[tuple[str, str, str]]:
    found = program.judge(GPU_RECORD, "g1", facts)
    return [(check, str(r.status), r.evidence) for check, r in found if r.status != "pass"]


def test_the_recorded_h200_is_healthy_and_a_doctored_one_is_not(program, probe):  # noqa: F811
    assert findings(program, gpu_facts(probe)) == []
    xid = {"xid": 79, "bus": "0000:00:06", "age_s": 30, "text": "fallen off the bus"}
    ((check, status, evidence),) = findings(program, gpu_facts(probe, xids=[xid]))
    assert (check, status) == ("gpus", "fail")
    assert "Xid 79 30 s ago: the GPU has fallen off the bus" in evidence
    pending = changed(remapped_rows__remapped_row_pending="Yes")
    ((check, status, evidence),) = findings(program, gpu_facts(probe, pending))
    assert (check, status) == ("gpus", "fail") and "row remap" in evidence
    ((check, status, evidence),) = findings(program, gpu_facts(probe, count=0))
    assert (check, status) == ("gpus", "fail")
    assert evidence == "nvidia-smi shows 0 GPUs on g1, the inventory says 1"


def test_a_doctored_h200_is_drained_with_its_finding_as_the_reason(program, probe):  # noqa: F811
    """The node's result as Slurm's step reads it: an Xid 79, or a pending row remap, on
    the recorded H200 is a drain whose reason is that finding."""
    from mpicluster.health.drain_rules import SlurmNode, decide, reason_of

    xid = {"xid": 79, "bus": "0000:00:06", "age_s": 30, "text": "fallen off the bus"}
    pending = changed(remapped_rows__remapped_row_pending="Yes")
    for facts, said in (
        (gpu_facts(probe, xids=[xid]), "Xid 79 30 s ago: the GPU has fallen off the bus"),
        (gpu_facts(probe, pending), "a row remap or page retirement waits for a GPU reset"),
    ):
        result = program.report(GPU_RECORD, "g1", program.judge(GPU_RECORD, "g1", facts), 0.1)
        first = program.first_failure(result)
        reason = reason_of(first["check"], first["evidence"])
        step = decide(result["healthy"], reason, SlurmNode(frozenset({"IDLE"})), None, nodes=4)
        assert step.action == "drain"
        assert reason.startswith("mpicluster: gpus: g1 GPU 0 (00000000:00:06.0")
        assert said in reason
    healthy = program.report(GPU_RECORD, "g1", program.judge(GPU_RECORD, "g1", gpu_facts(probe)), 0)
    assert healthy["healthy"] and program.first_failure(healthy) is None


# --- the MPI user's login and ssh files: doctor's env, rank, limits and mesh judges ---

STACK = "/opt/mpicluster/current"
BUILD = "/opt/mpicluster/stacks/fp1"
MCA = {"OMPI_MCA_btl_tcp_if_include": "10.9.0.0/24"}
LOGIN_RECORD = {
    "cluster": "t",
    "layout": {"prefix": "/opt/mpicluster", "install": "source", "cuda_home": None},
    "mpi_env": MCA,
    "nodes": {"n1": {"user": "mpi", "port": 22, "gpus": 0, "slots": 2}},
}
BLOCK = (
    f"{BLOCK_BEGIN}\n"
    f'PATH="{STACK}/bin:{STACK}/venv/bin:/usr/local/bin:/usr/bin:/bin"\n'
    f'LD_LIBRARY_PATH="{STACK}/lib"\n'
    'OMPI_MCA_btl_tcp_if_include="10.9.0.0/24"\n'
    f"{BLOCK_END}\n"
)


def stat(path: str, mode: str, uid: int = 1001, owner: str = "mpi") -> dict:
    return {"path": path, "mode": mode, "uid": uid, "owner": owner}


def at(path: str) -> dict:
    """Where a login finds a program of the stack: `current`, and the build behind it."""
    return {"path": f"{STACK}/{path}", "real": f"{BUILD}/{path}"}


def login_facts() -> dict:
    """A healthy node's facts of its MPI user, as the check reads them (login_facts)."""
    env = {
        "PATH": f"{STACK}/bin:{STACK}/venv/bin:/usr/local/bin:/usr/bin:/bin",
        "LD_LIBRARY_PATH": f"{STACK}/lib",
        "TMPDIR": None,
        "HOME": "/home/mpi",
        "USER": "mpi",
        **MCA,
    }
    home = "/home/mpi"
    return {
        "env": env,
        "disk": {},
        "which": {p: at(f"bin/{p}") for p in ("mpirun", "mpicc")},
        "environment_file": BLOCK,
        "limits": {"nofile": [65536, 65536], "memlock": [None, None], "nproc": [4096, 4096]},
        "rdma": [],
        "rank_env": {
            "variables": {},
            "loading": [],
            "stack_root": BUILD,
            "resolved": {
                "python": at("venv/bin/python"),
                "prted": at("bin/prted"),
                "executable": f"{STACK}/venv/bin/python",
                "prefix": f"{BUILD}/venv",
                "mpi4py": f"{BUILD}/venv/lib/python3.11/site-packages/mpi4py/__init__.py",
                "libmpi": [f"{BUILD}/lib/libmpi.so.40.40.0"],
            },
        },
        "ssh": {"key": True, "authorized": True, "key_fp": "SHA256:k", "authorized_fp": "SHA256:k"},
        "access": {
            "login": {
                "user": "mpi",
                "uid": 1001,
                "groups": ["mpi"],
                "paths": [
                    stat(home, "0755"),
                    stat(f"{home}/.ssh", "0700"),
                    stat(f"{home}/.ssh/authorized_keys", "0600"),
                ],
                "key": stat(f"{home}/.ssh/mpicluster_t", "0600"),
                "sshd": {"settings": {}, "match": False, "unreadable": []},
            },
            "sshd_listens": {"port": 22, "listening": True},
            "setters": {},
        },
        "login": {"shell": "/bin/bash"},
    }


def judged(program, facts: dict) -> dict[str, list[tuple[str, str]]]:
    """{check: [(status, evidence), ...]} of the login's judges."""
    out: dict[str, list[tuple[str, str]]] = {}
    for check, result in program.judge(LOGIN_RECORD, "n1", facts):
        out.setdefault(check, []).append((str(result.status), result.evidence))
    return out


def test_a_healthy_login_passes_every_judge_of_it(program):
    found = judged(program, login_facts())
    assert set(found) == {"disk", "env", "rank", "limits", "ssh"}
    assert all(status == "pass" for check in found.values() for status, _ in check)
    ((_, ssh),) = found["ssh"]
    assert ssh.startswith("sshd listens on port 22; mpi's shell, home, ~/.ssh")
    ((_, env),) = found["env"]
    assert env == (
        f"PATH holds {STACK}/bin; mpirun -> {STACK}/bin/mpirun; "
        "/etc/environment block present and literal"
    )
    ((_, limits),) = found["limits"]
    assert limits.startswith("a login's soft limits: open files 65,536, locked memory unlimited")
    ((_, rank),) = found["rank"]
    assert rank.startswith(f"python -> {STACK}/venv/bin/python; mpi4py -> {BUILD}/venv/")


def broken(program, change) -> list[tuple[str, str, str]]:
    facts = login_facts()
    change(facts)
    return [
        (check, str(r.status), r.evidence)
        for check, r in program.judge(LOGIN_RECORD, "n1", facts)
        if r.status != "pass"
    ]


def test_ssh_files_sshd_refuses_or_ssh_will_not_use_fail_naming_them(program):
    def writable_ssh(facts):
        facts["access"]["login"]["paths"][1]["mode"] = "0777"

    ((check, status, evidence),) = broken(program, writable_ssh)
    assert (check, status) == ("ssh", "fail")
    assert evidence.startswith("/home/mpi/.ssh on n1 has mode 0777 (writable by group)")

    def open_keys(facts):
        facts["access"]["login"]["paths"][2]["mode"] = "0666"

    ((check, status, evidence),) = broken(program, open_keys)
    assert (check, status) == ("ssh", "fail")
    assert evidence.startswith("/home/mpi/.ssh/authorized_keys on n1 has mode 0666")
    assert "StrictModes ignores the keys behind it" in evidence

    def shared_key(facts):
        facts["access"]["login"]["key"]["mode"] = "0644"

    ((_, _, evidence),) = broken(program, shared_key)
    assert evidence.startswith("/home/mpi/.ssh/mpicluster_t on n1 has mode 0644: ssh refuses")

    def roots_key(facts):
        facts["access"]["login"]["key"].update(uid=0, owner="root")

    ((_, _, evidence),) = broken(program, roots_key)
    assert evidence.startswith("/home/mpi/.ssh/mpicluster_t on n1 belongs to root, not mpi")

    def no_line(facts):
        facts["ssh"]["authorized"] = False

    ((_, _, evidence),) = broken(program, no_line)
    assert evidence == "n1's ~/.ssh/authorized_keys has no line ending ` mpicluster:t`"


def test_sshd_not_running_and_a_shell_that_runs_nothing_fail(program):
    def down(facts):
        facts["access"]["sshd_listens"]["listening"] = False

    ((check, status, evidence),) = broken(program, down)
    assert (check, status) == ("ssh", "fail")
    assert evidence.startswith("nothing listens on n1's ssh port 22")

    def nologin(facts):
        facts["login"] = {"shell": "/usr/sbin/nologin"}
        for measured in ("env", "which", "environment_file", "limits", "rank_env"):
            del facts[measured]

    ((check, status, evidence),) = broken(program, nologin)
    assert (check, evidence) == ("ssh", "n1's login shell for mpi is /usr/sbin/nologin")


def test_a_login_that_lacks_the_stack_or_gets_a_low_limit_is_named(program):
    def lost_path(facts):
        facts["env"]["PATH"] = "/usr/local/bin:/usr/bin:/bin"
        facts["access"]["setters"]["PATH"] = ["/home/mpi/.bashrc:3: PATH=/usr/bin:/bin"]

    (env,) = broken(program, lost_path)
    assert env[:2] == ("env", "fail")
    assert f"lacks {STACK}/bin, {STACK}/venv/bin; /home/mpi/.bashrc:3 sets it" in env[2]

    def few_files(facts):
        facts["limits"]["nofile"] = [200, 4096]
        facts["limits"]["setters"] = {
            "nofile": ["/etc/security/limits.conf:9: mpi soft nofile 200"]
        }

    ((check, status, evidence),) = broken(program, few_files)
    assert (check, status) == ("limits", "warn")  # doctor's judgement: a warning
    assert evidence.startswith(
        "a login's open files limit is 200 (set at /etc/security/limits.conf:9"
    )

    def shadowed(facts):
        rank = facts["rank_env"]
        rank["variables"] = {"PYTHONPATH": "/home/mpi/lib"}
        rank["loading"] = ["PYTHONPATH"]
        rank["resolved"]["mpi4py"] = "/home/mpi/lib/mpi4py/__init__.py"

    ((check, status, evidence),) = broken(program, shadowed)
    assert (check, status) == ("rank", "fail")
    assert "imports mpi4py from /home/mpi/lib/mpi4py/__init__.py" in evidence


def test_a_login_that_cannot_be_measured_says_why(program):
    def failing(facts):
        facts["login"]["error"] = "/bin/bash -c exited 1: /home/mpi/.bashrc: line 2: oops"

    ((check, status, evidence),) = broken(program, failing)
    assert (check, status) == ("env", "fail")
    assert evidence.endswith(
        "does not run its command: /bin/bash -c exited 1: /home/mpi/.bashrc: line 2: oops"
    )

    def elsewhere(facts):
        facts["login"]["unmeasured"] = "run as alice, not as root or mpi"

    ((check, status, _),) = broken(program, elsewhere)
    assert (check, status) == ("env", "warn")
    found = program.judge(LOGIN_RECORD, "n1", {"login": {"no_user": True}})
    assert [(c, r.evidence) for c, r in found if c != "disk"] == [
        ("ssh", "mpi, the MPI user, has no account on n1")
    ]
