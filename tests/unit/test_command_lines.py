"""Every place that builds a command line for a shell, and hostile values through each.

`test_every_command_builder_is_registered` scans the source (mpicluster/ and the
Ansible modules in mpicluster/remote/plugins/modules/) for what builds shell text: shlex.quote/join,
`shell=True`, `sh -c`/`-c` with a built string, and a built string handed to a
function that runs it on a node (run_on, exec_command, ...). Each function that does
is listed in REGISTRY with the test below that feeds it hostile values; new code that
builds a command line fails the scan until it has such a test.

A hostile value must come back from the shell as exactly one intact word (shlex.split,
or a real /bin/sh run on this machine against harmless stand-ins for the remote
programs), or be refused earlier by the inventory's validation. No test here reaches
another machine: remote programs are replaced by local recorders.
"""

from __future__ import annotations

import ast
import base64
import getpass
import itertools
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mpicluster import remote
from mpicluster.cluster.inventory import InventoryError, parse_inventory
from mpicluster.cluster.plan import ClusterPlan
from tests.shipped import load

REPO = Path(__file__).resolve().parents[2]

#: module:function -> the test in this file that feeds it hostile values.
REGISTRY = {
    "mpicluster.bench.gpu:command": "test_bench_gpu_commands_split_back",
    "mpicluster.bench.gpu:run": "test_bench_gpu_commands_split_back",
    "mpicluster.bench.network:client_command": "test_bench_iperf_client_keeps_a_hostile_peer_whole",
    "mpicluster.bench.rdma:client_command": "test_bench_ib_write_bw_keeps_hostile_words_whole",
    "mpicluster.bench.rdma:server_command": "test_bench_ib_write_bw_keeps_hostile_words_whole",
    "mpicluster.health.states:command": "test_the_nodes_commands_split_back",
    "mpicluster.health.cordons:write": "test_the_cordon_writer_keeps_every_file_whole",
    "mpicluster.health.cordons:read_command": "test_the_cordon_writer_keeps_every_file_whole",
    "mpicluster.remote.plugins.module_utils.mpicluster_sitecommand:run_site_command": (
        "test_the_sites_on_change_gets_each_word_whole"
    ),
    "mpicluster.nodes.ansible_run:prepare_run": "test_prepare_run_command_runs_as_written",
    "mpicluster.nodes.ansible_run:run_playbook": "test_run_playbook_cmdline_keeps_the_vars_path",
    "mpicluster.nodes.ansible_run:ssh_args": "test_ansible_ssh_args_keep_the_known_hosts_path",
    "mpicluster.doctor.session:NodeSession.start_probe": "test_doctor_probe_command",
    "mpicluster.doctor.launch_proof:Launch.command": "test_doctor_launch_command_splits_back",
    "mpicluster.doctor.launch_proof:as_user": "test_a_users_launch_reaches_her_shell_whole",
    "mpicluster.run.hang_report:collect": "test_hang_collect_command",
    "mpicluster.run.job:<module>": "test_head_facts_command_runs_under_sh",
    "mpicluster.nodes.head_mpi:command": "test_head_facts_command_runs_under_sh",
    "mpicluster.run.job:remote_command": "test_launcher_runs_program_and_env_intact",
    "mpicluster.run.detached:jobs_command": "test_jobs_command_keeps_hostile_words_whole",
    "mpicluster.remote.job_runner:batch_script": "test_batch_script_keeps_hostile_words_whole",
    "mpicluster.run.job_env:install_command": "test_job_env_install_runs_paths_and_pins_intact",
    "mpicluster.run.job_env:_look": "test_job_env_install_runs_paths_and_pins_intact",
    "mpicluster.run.job_command:Launch.command": "test_dry_run_command_splits_back",
    "mpicluster.run.job_command:build": "test_torch_wrappers_pass_program_intact",
    "mpicluster.run.job_command:_srun": "test_torch_wrappers_pass_program_intact",
    "mpicluster.run.job_command:torchrun_per_node": "test_torch_wrappers_pass_program_intact",
    "mpicluster.local.podman:Podman.read_file": "test_local_host_key_reads_are_constant",
    "mpicluster.local.cluster:_known_hosts": "test_local_host_key_reads_are_constant",
    "mpicluster.nodes.facts:gather": "test_node_facts_command",
    "mpicluster.up.preview:file_states": "test_dry_run_file_probe_keeps_hostile_paths_whole",
    "mpicluster.util.proc:run": "test_the_command_log_shows_a_local_command_as_it_splits_back",
    "mpicluster.remote.relay:remote_command": "test_relay_command_runs_intact_under_sh",
    "mpicluster.remote.sshlogin:measure": "test_the_node_checks_login_keeps_hostile_values_whole",
    "mpicluster.smoke.steps:env_matrix.command": "test_smoke_env_matrix_command",
    "mpicluster.smoke.steps:mpirun_command": "test_smoke_commands_split_back",
    "mpicluster.smoke.steps:run_allreduce": "test_smoke_commands_split_back",
    "mpicluster.smoke.steps:mixed_mpi": "test_smoke_commands_split_back",
    "mpicluster.smoke.ucx_info:command": "test_ucx_info_command_runs_under_sh",
    "mpicluster.slurm.smoke_steps:_ctl": "test_slurm_commands_split_back",
    "mpicluster.slurm.smoke_steps:pmix_command": "test_slurm_commands_split_back",
    "mpicluster.slurm.smoke_steps:sbatch_step": "test_slurm_commands_split_back",
    "mpicluster.slurm.facts:gather": "test_slurm_commands_split_back",
    "mpicluster.run.sync:fan_out_script": "test_sync_fan_out_script_under_sh",
    "mpicluster.run.sync:sync_tree": "test_sync_tree_through_rsync_and_ssh",
    "mpicluster.run.setup_step:node_command": "test_setup_runs_the_command_and_folder_intact",
    "mpicluster.run.collect:_one": "test_collect_brings_back_a_hostile_path_through_rsync",
    "mpicluster.bench.measure:command": "test_bench_commands_split_back",
    "mpicluster.bench.measure:run": "test_bench_commands_split_back",
}

#: The argument that carries the command text, by the name of the function called.
RUNNERS = {"exec_command": 0, "run_command": 1, "run_on": 2, "run_everywhere": 1, "system": 0}
SHELLS = {"sh", "bash", "/bin/sh", "/bin/bash", "dash", "zsh", "ssh"}

HOSTILE = [
    "a b",
    "$(touch {marker})",
    "`touch {marker}`",
    ";touch {marker}",
    "&& touch {marker}",
    "| touch {marker}",
    "'",
    '"',
    'it\'s "quoted"',
    "x\ny",
    "*",
    "$HOME ${IFS}",
    "\\",
    "-rf",
    "ünï€ødé ✓",
    "",
]


#: For file names (no "/"): relative to the working folder, which `marker` makes tmp_path.
ODD = "x $(touch pwned) `touch pwned` 'q\";y* ü"


@pytest.fixture
def marker(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "pwned"
    yield path
    assert not path.exists(), "a hostile value ran as a command"


def hostile(marker: Path) -> list[str]:
    return [h.replace("{marker}", str(marker)) for h in HOSTILE]


# --- the scan -------------------------------------------------------------------------


def _builds_string(node: ast.AST) -> bool:
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mod):
        return True
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("join", "format")
    )


def _shell_c(items: list[ast.expr]) -> bool:
    """`sh -c`, or `-c` followed by built text (vagrant ssh NODE -c "...")."""
    for first, second in itertools.pairwise(items):
        if not isinstance(first, ast.Constant):
            continue
        shell_flag = isinstance(second, ast.Constant) and second.value in ("-c", "-lc")
        if first.value in SHELLS and shell_flag:
            return True
        if first.value in ("-c", "--command") and _builds_string(second):
            return True
    return False


class _Scan(ast.NodeVisitor):
    def __init__(self, module: str):
        self.module = module
        self.scope: list[str] = []
        self.found: dict[str, set[str]] = {}

    def _add(self, why: str) -> None:
        where = f"{self.module}:{'.'.join(self.scope) or '<module>'}"
        self.found.setdefault(where, set()).add(why)

    def _scoped(self, node) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        owner = (
            func.value.id
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
            else ""
        )
        if owner == "shlex" or (name in ("quote", "join") and owner == "shlex"):
            self._add(f"shlex.{name}")
        for keyword in node.keywords:
            if keyword.arg == "shell" and not (
                isinstance(keyword.value, ast.Constant) and keyword.value.value is False
            ):
                self._add("shell=True")
        if _shell_c(node.args):
            self._add("sh -c")
        where = RUNNERS.get(name)
        if where is not None and len(node.args) > where and _builds_string(node.args[where]):
            self._add(f"{name}(built text)")
        self.generic_visit(node)

    def visit_List(self, node) -> None:
        if _shell_c(node.elts):
            self._add("sh -c")
        self.generic_visit(node)

    visit_Tuple = visit_List


def command_builders() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    files = list(REPO.glob("mpicluster/**/*.py"))  # the Ansible modules among them
    for path in sorted(files):
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        scan = _Scan(module)
        scan.visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        found.update(scan.found)
    return found


def test_every_command_builder_is_registered():
    found = command_builders()
    missing = {where: sorted(why) for where, why in found.items() if where not in REGISTRY}
    assert not missing, (
        "new code builds a command line: add it to REGISTRY with a test that feeds it "
        f"hostile values: {missing}"
    )


def test_registry_has_no_stale_entries():
    found = command_builders()
    assert not sorted(set(REGISTRY) - set(found)), "REGISTRY names code that is gone"
    assert all(name in globals() for name in REGISTRY.values())


def test_scan_finds_what_it_should(tmp_path):
    code = (
        "import shlex, subprocess\n"
        "def a(x):\n    return shlex.quote(x)\n"
        "def b(x):\n    subprocess.run(x, shell=True)\n"
        "def c(x):\n    return ['sh', '-c', x]\n"
        "def d(c, x):\n    c.exec_command(f'ls {x}')\n"
        "def e(v, x):\n    v.run('ssh', 'n', '-c', f'cat {x}')\n"
        "def f(x):\n    return ['ls', x]\n"
    )
    scan = _Scan("m")
    scan.visit(ast.parse(code))
    assert sorted(scan.found) == ["m:a", "m:b", "m:c", "m:d", "m:e"]


# --- helpers --------------------------------------------------------------------------

GOOD = "cluster: test\nssh: {user: alice}\nnodes:\n  - {name: n1, address: 10.0.0.1}\n"


def inventory(tmp_path: Path, text: str = GOOD) -> ClusterPlan:
    """The plan of `text` written to a file, as a command builds it."""
    path = tmp_path / "inventory.yaml"
    path.write_text(text)
    return ClusterPlan.load(path)


def recorder(bin_dir: Path, name: str, exit_code: int = 0) -> Path:
    """A stand-in program that appends its argv (JSON, one line per call) to NAME.calls."""
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    calls = bin_dir / f"{name}.calls"
    path.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"with open({str(calls)!r}, 'a') as f:\n"
        "    f.write(json.dumps(sys.argv[1:]) + '\\n')\n"
        f"sys.exit({exit_code})\n"
    )
    path.chmod(0o755)
    return calls


def calls_of(calls: Path) -> list[list[str]]:
    if not calls.exists():
        return []
    return [json.loads(line) for line in calls.read_text().splitlines()]


def sh(command: str, bin_dir: Path, **kwargs) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return subprocess.run(
        ["/bin/sh", "-c", command],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        **kwargs,
    )


# --- values the inventory refuses never reach a command line ---------------------------


@pytest.mark.parametrize(
    "template",
    [
        "cluster: '{v}'\nnodes: [{{name: n1}}]\n",
        "cluster: a\nnodes: [{{name: '{v}'}}]\n",
        "cluster: a\nnodes: [{{name: n1, address: '{v}'}}]\n",
        "cluster: a\nssh: {{user: '{v}'}}\nnodes: [{{name: n1}}]\n",
        "cluster: a\nnodes: [{{name: n1, ssh: {{user: '{v}'}}}}]\n",
        "cluster: a\nnetwork: {{interface: '{v}'}}\nnodes: [{{name: n1}}]\n",
        "cluster: a\nstack: {{prefix: '/opt/{v}'}}\nnodes: [{{name: n1}}]\n",
        "cluster: a\nstack: {{cuda_home: '/usr/{v}'}}\nnodes: [{{name: n1}}]\n",
    ],
    ids=["cluster", "name", "address", "user", "node-user", "interface", "prefix", "cuda_home"],
)
def test_inventory_refuses_hostile_names(template, marker):
    for value in hostile(marker):
        if value in ("-rf", ""):  # not metacharacters; refused for other reasons or allowed
            continue
        text = template.format(v=value.replace("'", "''"))
        with pytest.raises(InventoryError):
            parse_inventory(text)


# --- the builders ---------------------------------------------------------------------


def test_prepare_run_command_runs_as_written(tmp_path, marker, monkeypatch):
    from mpicluster.nodes import ansible_run

    inv = inventory(tmp_path)
    runs = tmp_path / f"runs {ODD}"
    run_dir, command = ansible_run.prepare_run(runs, "up", inv, {"a": 1}, {}, "site.yml")
    words = shlex.split(command)
    assert words[0] == f"ANSIBLE_CONFIG={run_dir / 'ansible.cfg'}"
    assert words[1:] == [
        "ansible-playbook",
        "-i",
        str(run_dir / "hosts.yml"),
        "-e",
        f"@{run_dir / 'vars.yml'}",
        str(ansible_run.data_path("playbooks") / "site.yml"),
    ]
    bin_dir = tmp_path / "bin"
    calls = recorder(bin_dir, "ansible-playbook")
    done = sh(shlex.quote(str(run_dir / "command.sh")) + " --check 'extra arg'", bin_dir)
    assert done.returncode == 0, done.stderr
    assert calls_of(calls) == [[*words[2:], "--check", "extra arg"]]


def test_run_playbook_cmdline_keeps_the_vars_path(tmp_path, monkeypatch, marker):
    import ansible_runner

    from mpicluster.nodes import ansible_run

    seen = {}

    class Stop(Exception):
        pass

    def fake_run(**kwargs):
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(ansible_runner, "run_async", fake_run)
    runs = tmp_path / ODD
    with pytest.raises(Stop):
        ansible_run.run_playbook(
            inventory(tmp_path), "site.yml", runs_dir=runs, label="up", extravars={}
        )
    words = shlex.split(seen["cmdline"])
    assert words[0] == "-e"
    assert words[1].startswith(f"@{runs}/") and words[1].endswith("/vars.yml")
    assert len(words) == 2


def test_ansible_ssh_args_keep_the_known_hosts_path(tmp_path, marker):
    from mpicluster.nodes import ansible_run

    known = tmp_path / f"kh {ODD}"
    known.write_text("")
    text = GOOD + f"ssh: {{known_hosts: {json.dumps(str(known))}}}\n"
    text = text.replace("ssh: {user: alice}\n", "")
    inv = inventory(tmp_path, text)
    words = shlex.split(ansible_run.ssh_args(inv))
    assert f"UserKnownHostsFile={known}" in words
    assert all(words[i] == "-o" for i in range(0, len(words), 2))


def test_doctor_probe_command():
    from mpicluster.doctor.session import BOOTSTRAP, NodeSession, probe_script

    class Channel:
        def exec_command(self, command):
            self.command = command

        def sendall(self, data):
            pass

    class Link:
        def is_active(self):
            return True

        def open_session(self, timeout):
            self.channel = Channel()
            return self.channel

    class Client:
        transport = Link()

    session = NodeSession.__new__(NodeSession)
    session.client = Client()
    session.start_probe({"hostile": "$(x) ' \""}, 1.0)
    words = shlex.split(session.channel.command)
    assert words == [remote.PYTHON, "-c", BOOTSTRAP, str(len(probe_script()))]


def test_hang_collect_command(tmp_path, monkeypatch, marker):
    from mpicluster.nodes import transport
    from mpicluster.run import hang_report as hang

    commands = []
    monkeypatch.setattr(
        transport, "run_everywhere", lambda inv, command, **kw: commands.append(command) or {}
    )
    inv = inventory(tmp_path)
    lay = inv.layout
    for job in [*hostile(marker), "*"]:
        hang.collect(inv, inv.nodes, job, lay)
        assert shlex.split(commands[-1]) == [remote.PYTHON, "-", job, lay.pyspy]


def test_jobs_command_keeps_hostile_words_whole(marker):
    """remote/jobs.py's command line (its job ids are checked before, and again there)."""
    from mpicluster.run import detached

    for value in hostile(marker):
        words = shlex.split(detached.jobs_command("follow", value, "1"))
        assert words == [remote.PYTHON, "-c", remote.source("jobs"), "follow", value, "1"]
        with pytest.raises(Exception, match="not a job id"):
            detached.checked_id(value)
        done = subprocess.run(
            [
                "/bin/sh",
                "-c",
                detached.jobs_command("stop", value).replace(remote.PYTHON, sys.executable, 1),
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert done.returncode == 2 and "usage" in done.stderr, done.stderr


def test_job_env_install_runs_paths_and_pins_intact(tmp_path, marker, monkeypatch):
    """run --requirements' install on a node, run here by /bin/sh with a stand-in for
    the stack's Python that records its words: every path and pin arrives whole, the
    environment is renamed into place with its mark, the wheels go; and the look for
    an environment keeps a hostile key one word."""
    from mpicluster.nodes import transport
    from mpicluster.run import job_env

    log = tmp_path / "argv.json"
    python = tmp_path / "python"
    python.write_text(
        f"#!{sys.executable}\nimport json, os, sys\nargs = sys.argv[1:]\n"
        f"open({str(log)!r}, 'w').write(json.dumps(args))\n"
        "os.makedirs(args[args.index('--target') + 1], exist_ok=True)\n"
    )
    python.chmod(0o755)
    for i, value in enumerate(v for v in hostile(marker) if "\x00" not in v):
        env, wheels = str(tmp_path / f"env{i} {value}"), str(tmp_path / f"wheels{i} {value}")
        Path(wheels).mkdir(parents=True)
        command = job_env.install_command(str(python), env, wheels, {value or "x": "1.0"})
        done = subprocess.run(
            ["/bin/sh", "-c", command], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stderr
        words = json.loads(log.read_text())
        assert words[words.index("--target") + 1] == f"{env}.part"
        assert words[words.index("--find-links") + 1] == wheels
        assert words[-1] == f"{value or 'x'}==1.0"
        assert Path(env, ".complete").is_file() and not Path(wheels).exists()
    seen = []
    monkeypatch.setattr(
        transport, "run_everywhere", lambda plan, command, **kw: seen.append(command) or {}
    )
    with pytest.raises(KeyError):
        job_env._look(None, [type("N", (), {"name": "n1"})()], "k;touch x")
    assert ".cache/mpicluster/envs/k;touch x/.complete" in shlex.split(seen[0])


def test_head_facts_command_runs_under_sh(tmp_path, marker):
    """The head's facts (nodes/head_mpi.py, and run's port, user and cordons after them), run here
    by /bin/sh: a real mpirun (Debian's, which `make test` installs) read as Open MPI
    with its series; a hostile prefix stays one word (no marker made) and is named."""
    from mpicluster.nodes import head_mpi
    from mpicluster.run import job

    done = subprocess.run(
        ["sh", "-c", job.facts_command("/usr/bin")], capture_output=True, text=True, check=False
    )
    facts_text = done.stdout
    with pytest.raises(head_mpi.MpiclusterError, match="no hostfile"):  # none here
        job.parse_head_facts("here", facts_text)
    mpi = head_mpi.parse("here", facts_text)
    assert mpi.version.is_open_mpi and mpi.major in (4, 5) and mpi.slots == {}
    user, _, cordoned = facts_text.rpartition("@@user\n")[2].partition("@@cordons\n")
    assert (user.strip(), cordoned) == (getpass.getuser(), "")  # no cordons here
    for value in hostile(marker):
        done = subprocess.run(
            ["sh", "-c", head_mpi.command(value)], capture_output=True, text=True, check=False
        )
        assert not marker.exists(), value
        with pytest.raises(head_mpi.HeadMpiError, match="failed on the head"):
            head_mpi.parse("here", done.stdout)


def test_launcher_runs_program_and_env_intact(tmp_path, monkeypatch, marker):
    """The command `run` sends to the head, run here by /bin/sh: the launcher starts the
    program with every argument and variable exactly as given."""
    from mpicluster.run import job
    from mpicluster.run.job_command import Launch

    monkeypatch.setattr(remote, "PYTHON", sys.executable)
    values = [v for v in hostile(marker) if "\x00" not in v]
    show = "import json, os, sys; print(json.dumps([sys.argv[1:], os.environ['HOSTILE_0']]))"
    plan = Launch(
        argv=[sys.executable, "-c", show, *values],
        env={f"HOSTILE_{i}": v for i, v in enumerate(values)},
        placement={"n1": 1},
        ranks=1,
    )
    cwd = tmp_path / f"cwd {ODD}"
    cwd.mkdir()
    command = job.remote_command(plan, str(cwd))
    words = shlex.split(command)
    assert words[:3] == [sys.executable, "-c", remote.source("job_runner")]
    spec = json.loads(base64.b64decode(words[3]))
    assert spec == {"argv": plan.argv, "env": plan.env, "cwd": str(cwd)}
    with subprocess.Popen(
        ["/bin/sh", "-c", command],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:  # stdin stays open: its end would stop the job
        out, err = proc.stdout.read(), proc.stderr.read()
        proc.wait(timeout=60)
        proc.stdin.close()
    assert proc.returncode == 0, err
    assert json.loads(out) == [values, values[0]]


def test_dry_run_command_splits_back(marker):
    from mpicluster.run.job_command import Launch

    values = hostile(marker)
    env = {f"V{i}": v for i, v in enumerate(values)}
    plan = Launch(argv=["mpirun", "-x", "V0", "prog", *values], env=env, placement={}, ranks=1)
    words = shlex.split(plan.command())
    assert words == ["env", *[f"{k}={v}" for k, v in env.items()], *plan.argv]


def _head(user: str = "alice"):
    from mpicluster.run.job_command import HeadFacts

    return HeadFacts(slots={"n1": 2}, mpi_major=5, free_port=29500, user=user)


def test_torch_wrappers_pass_program_intact(tmp_path, marker):
    """--torch and --launcher torchrun put `sh -c SCRIPT sh PROGRAM...` after mpirun's
    options: run that part here, as a rank would."""
    from mpicluster.run.job_command import RunOptions, build

    values = hostile(marker)
    show = "import json, os, sys; print(json.dumps([sys.argv[1:], os.environ.get('RANK')]))"
    program = (sys.executable, "-c", show, *values)
    inv = inventory(tmp_path)
    env = {"NCCL_X": f"$(touch {marker})"}
    rank_env = {
        **os.environ,
        "OMPI_COMM_WORLD_RANK": "1",
        "OMPI_COMM_WORLD_SIZE": "2",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
    }

    plan = build(inv, RunOptions(program=program, torch=True, mpi4py=False), _head(), env)
    tail = plan.argv[plan.argv.index("sh") :]
    assert tail[:2] == ["sh", "-c"] and tail[3:] == ["sh", *program]
    assert plan.env["NCCL_X"] == env["NCCL_X"]
    rank_env["MPICLUSTER_RANKS_PER_NODE"] = plan.env["MPICLUSTER_RANKS_PER_NODE"]
    done = subprocess.run(tail, env=rank_env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [values, "1"]

    plan = build(inv, RunOptions(program=program, launcher="torchrun"), _head(), env)
    tail = plan.argv[plan.argv.index("sh") :]
    assert tail[3:] == ["sh", *program]
    bin_dir = tmp_path / "bin"
    calls = recorder(bin_dir, "torchrun")
    rank_env["PATH"] = f"{bin_dir}:{os.environ['PATH']}"
    done = subprocess.run(tail, env=rank_env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    (argv,) = calls_of(calls)
    assert argv[argv.index("--master-addr") + 1] == "n1"
    assert argv[argv.index("--node-rank") + 1] == "1"
    assert argv[-len(program) :] == list(program)

    # --via slurm: the same from Slurm's variables
    slurm = inventory(tmp_path, GOOD + "scheduler: {type: slurm}\n")
    slurm_env = {**os.environ, "SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "1"}
    slurm_env["SLURM_NODEID"] = "0"
    via = RunOptions(program=program, torch=True, mpi4py=False, via="slurm")
    plan = build(slurm, via, _head(), env)
    tail = plan.argv[plan.argv.index("sh") :]
    assert tail[:2] == ["sh", "-c"] and tail[3:] == ["sh", *program]
    slurm_env["MPICLUSTER_PER_NODE"] = plan.env["MPICLUSTER_PER_NODE"]
    done = subprocess.run(tail, env=slurm_env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [values, "1"]
    via = RunOptions(program=program, launcher="torchrun", via="slurm")
    plan = build(slurm, via, _head(), env)
    tail = plan.argv[plan.argv.index("sh") :]
    assert tail[3:] == ["sh", *program]
    slurm_env["PATH"] = rank_env["PATH"]
    done = subprocess.run(tail, env=slurm_env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    argv = calls_of(calls)[-1]
    assert argv[argv.index("--node-rank") + 1] == "0"
    assert argv[-len(program) :] == list(program)


def test_shell_exports_source_back_intact(tmp_path, marker):
    """/etc/mpicluster/env quotes with the `quote` filter of templates/env.sh.j2 (no
    Python quoting left for the registry's scan to find): sourced back, intact."""
    from mpicluster.cluster.layout import Layout

    values = hostile(marker)
    variables = {f"V{i}": v for i, v in enumerate(values)}
    lay = Layout("/opt/odd-prefix.x_y+z@w", "source", "/usr/local/cuda-12.4")
    script = tmp_path / "env"
    script.write_text(lay.shell_exports(variables))
    show = (
        f"{shlex.quote(sys.executable)} -c 'import json, os; print(json.dumps(dict(os.environ)))'"
    )
    done = sh(f". {shlex.quote(str(script))}; {show}", tmp_path)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert {k: seen[k] for k in variables} == variables
    assert seen["PATH"].startswith("/opt/odd-prefix.x_y+z@w/current/bin:")
    assert seen["LD_LIBRARY_PATH"].startswith("/opt/odd-prefix.x_y+z@w/current/lib:")


def test_local_host_key_reads_are_constant():
    """`cat GLOB` in the local cluster's nodes reads a constant: no value of the user's
    reaches that shell (the glob is the point)."""
    from mpicluster.local import cluster, podman

    assert set(cluster._HOST_KEYS) <= set("/abcdefghijklmnopqrstuvwxyz_.*")
    tree = ast.parse(Path(cluster.__file__).read_text())
    reads = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and (
            node.func.attr == "read_file"
            or any(isinstance(a, ast.Constant) and a.value == "-c" for a in node.args)
        )
    ]
    assert len(reads) == 2
    for node in reads:
        text = node.args[-1]
        used = {n.id for n in ast.walk(text) if isinstance(n, ast.Name)}
        assert used == {"_HOST_KEYS"}, ast.unparse(node)
    seen = []

    class Fake(podman.Podman):
        def _run(self, *args, check=True):
            seen.append(args)

            class Result:
                output = ""

            return Result()

    Fake({}).read_file("c1", cluster._HOST_KEYS)
    assert seen == [("exec", "c1", "sh", "-c", f"cat {cluster._HOST_KEYS}")]


def test_node_facts_command(tmp_path, monkeypatch):
    from mpicluster.nodes import facts as node_facts
    from mpicluster.nodes import transport

    commands = []
    monkeypatch.setattr(
        transport, "run_everywhere", lambda inv, command, **kw: commands.append(command) or {}
    )
    text = GOOD + "stack: {prefix: /opt/odd-prefix.x_y+z@w, cuda_home: /usr/cuda-1.2}\n"
    inv = inventory(tmp_path, text)
    node_facts.gather(inv)
    assert shlex.split(commands[0]) == [
        remote.PYTHON,
        "-",
        "/opt/odd-prefix.x_y+z@w",
        "/usr/cuda-1.2",
    ]


def test_dry_run_file_probe_keeps_hostile_paths_whole(tmp_path, monkeypatch):
    from mpicluster.nodes import transport
    from mpicluster.up import preview

    commands = []
    monkeypatch.setattr(
        transport, "run_everywhere", lambda inv, command, **kw: commands.append(command) or {}
    )
    hostile = ["/etc/a b", "/x;rm -rf /", "$(id)", "'quoted'", "-n"]
    preview.file_states(inventory(tmp_path), hostile)
    assert shlex.split(commands[0]) == [remote.PYTHON, "-", "/etc/environment", *hostile]


def test_the_command_log_shows_a_local_command_as_it_splits_back(caplog):
    from mpicluster.util import commandlog, proc

    argv = ["printf", "%s\\n", "a b;$(id)", "'x'", "--"]
    with caplog.at_level("INFO", logger=commandlog.LOG.name):
        done = proc.run(argv)
    assert done.output.splitlines()[0] == "a b;$(id)"
    (record,) = [r for r in caplog.records if r.name == commandlog.LOG.name]
    where, _, shown = record.getMessage().partition(": ")
    assert where == "local" and shlex.split(shown) == argv


def test_smoke_env_matrix_command(tmp_path, monkeypatch):
    from mpicluster.nodes import transport
    from mpicluster.smoke import steps as smoke

    commands = []

    def fake(inv, command, **kw):
        commands.append(command)
        return {n.name: transport.RemoteResult(n.name, error="x") for n in inv.nodes}

    monkeypatch.setattr(transport, "run_everywhere", fake)
    inv = inventory(tmp_path)
    smoke.env_matrix(inv, smoke.peer_order([n.name for n in inv.nodes]))
    (node,) = inv.nodes
    words = shlex.split(commands[0](node))
    assert words[:2] == [remote.PYTHON, "-"] and len(words) == 3
    assert json.loads(words[2])["peers"] == ["n1"]


def test_smoke_commands_split_back(tmp_path, monkeypatch):
    from mpicluster.nodes import transport
    from mpicluster.smoke import steps as smoke

    text = (
        "cluster: test\nnetwork: {interface: 'eth0.1@x_y-z'}\nstack: {prefix: /opt/a-b.c}\n"
        "nodes:\n  - {name: n1, address: 10.0.0.1, gpus: 2, slots: 1}\n"
        "  - {name: n2.example-x, gpus: 1}\n"
    )
    inv = inventory(tmp_path, text)
    for kind in ("mpi4py", "horovod", "torch", "nccl-tests", "cuda"):
        command = smoke.mpirun_command(inv, 5, "root", kind)
        words = shlex.split(command)
        assert words[0] == "/opt/a-b.c/current/bin/mpirun"
        assert "--allow-run-as-root" in words
        assert " ".join(shlex.quote(w) for w in words) == command

    commands = []

    def fake_run_on(inv, node, command, **kw):
        commands.append(command)
        said = "mpirun (Open MPI) 5.0.7\n@@mpirun-exit 0\n@@slots\n"
        return transport.RemoteResult(node.name, said, "", 0)

    monkeypatch.setattr(transport, "run_on", fake_run_on)
    smoke.run_allreduce(inv, 12.7, "mpi4py")
    assert shlex.split(commands[0])[:2] == ["/opt/a-b.c/current/bin/mpirun", "--version"]
    # mpirun and, beside it (in either order), ucx_info
    words = next(shlex.split(c) for c in commands[1:] if "ucx_info" not in c)
    assert words[:4] == ["timeout", "-k", "10", "12"]
    ucx = next(shlex.split(c) for c in commands[1:] if "ucx_info" in c)
    assert ucx[-1] == "/opt/a-b.c/current/bin/ucx_info"
    user = inv.node_ssh(inv.nodes[0]).user
    assert words[4:] == shlex.split(smoke.mpirun_command(inv, 5, user))

    # a failed allreduce asks every node's mpirun: two builds are named with their nodes
    said = {"n1": "mpirun (Open MPI) 4.1.4", "n2.example-x": "mpirun (Open MPI) 5.0.7"}

    def fake_everywhere(plan, command, **kw):
        commands.append(command)
        return {n: transport.RemoteResult(n, said[n], "", 0) for n in said}

    monkeypatch.setattr(transport, "run_everywhere", fake_everywhere)
    mixed = smoke.mixed_mpi(inv)
    assert shlex.split(commands[-1]) == ["/opt/a-b.c/current/bin/mpirun", "--version"]
    assert "(n1: Open MPI 4.1.4; n2.example-x: Open MPI 5.0.7)" in mixed


def test_ucx_info_command_runs_under_sh(tmp_path, marker):
    """The smoke test's ucx_info line, run here by /bin/sh against a stand-in ucx_info at a
    hostile path that prints real captures (data/ucx/): both listings come back and are
    read; where the stack has no ucx_info, nothing is printed and nothing fails."""
    from mpicluster.smoke import ucx_info

    data = Path(__file__).parent / "data" / "ucx"
    said = {flag: data / f"ucx_info{flag}-1.22.0.txt" for flag in ("-v", "-d")}
    expected = ucx_info.parse(said["-v"].read_text() + said["-d"].read_text())
    stand_in = (
        f'#!/bin/sh\ncase "$1" in -v) cat {shlex.quote(str(said["-v"]))};;'
        f" -d) cat {shlex.quote(str(said['-d']))};; *) exit 9;; esac\n"
    )
    for number, value in enumerate(hostile(marker)):
        path = tmp_path / f"bin{number}" / value.lstrip("/") / "ucx_info"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(stand_in)
        path.chmod(0o755)
        done = sh(ucx_info.command(str(path)), tmp_path)
        assert done.returncode == 0, (value, done.stderr)
        assert ucx_info.parse(done.stdout) == expected, value
        absent = sh(ucx_info.command(str(path.parent / "none")), tmp_path)
        assert (absent.returncode, absent.stdout, absent.stderr) == (0, "", ""), value


def test_bench_commands_split_back(tmp_path, monkeypatch):
    """bench's mpirun line: the spec (JSON with quotes and spaces) comes back as one word,
    the prefix and interface intact."""
    from mpicluster.bench import measure
    from mpicluster.nodes import transport

    text = (
        "cluster: test\nnetwork: {interface: 'eth0.1@x_y-z'}\nstack: {prefix: /opt/a-b.c}\n"
        "nodes:\n  - {name: n1, address: 10.0.0.1}\n  - {name: n2.example-x}\n"
    )
    plan = inventory(tmp_path, text)
    spec = {"mode": "pairs", "rounds": [[[0, 1]]], "note": 'it\'s "quoted" $(x) `y`'}
    commands = []

    def fake_run_on(plan, node, command, **kw):
        commands.append(command)
        said = "mpirun (Open MPI) 5.0.7\n@@mpirun-exit 0\n@@slots\n"
        out = said if "--version" in command else '{"pairs": []}'
        return transport.RemoteResult(node.name, out, "", 0)

    monkeypatch.setattr(transport, "run_on", fake_run_on)
    major = measure.mpi_major(plan)
    assert major == 5
    assert shlex.split(commands[0])[:2] == ["/opt/a-b.c/current/bin/mpirun", "--version"]
    assert measure.run(plan, ["n1", "n2.example-x"], spec, 30.9, major) == {
        "pairs": [],
        "pmls": [],
    }
    words = shlex.split(commands[1])
    assert words[:5] == ["timeout", "-k", "10", "30", "/opt/a-b.c/current/bin/mpirun"]
    assert words[5:9] == ["--host", "n1:1,n2.example-x:1", "-np", "2"]
    assert "eth0.1@x_y-z" in words
    assert json.loads(words[-1]) == spec
    assert words[-2] == "/etc/mpicluster/smoke/bench_mpi.py"
    assert "pml_base_verbose" not in words  # the pairs' runs: only the allreduce says its PML
    sweep = shlex.split(measure.command(plan, ["n1", "n2.example-x"], {"mode": "allreduce"}, 5))
    assert " ".join(sweep).count("--mca pml_base_verbose 10") == 1


def test_smoke_cpu_runs_place_up_to_two_ranks_on_every_node(tmp_path):
    """Several ranks on each of several nodes (where the hostfile has the slots): the
    case one rank per node missed (Horovod's hang in hvd.init()); no --map-by, so the
    ranks get mpirun's own mapping and binding, as a user's plain mpirun does."""
    from mpicluster.smoke import steps as smoke

    text = (
        "cluster: test\nnodes:\n  - {name: a, address: 10.0.0.1, slots: 64}\n"
        "  - {name: b, address: 10.0.0.2, slots: 1}\n  - {name: c, address: 10.0.0.3}\n"
    )
    inv = inventory(tmp_path, text)
    assert smoke.cpu_placement(inv, {"a": 64, "b": 1, "c": 8}) == [
        "--host",
        "a:2,b:1,c:2",
        "-np",
        "5",
    ]
    # the hostfile unread: the inventory's slots, else one rank
    assert smoke.cpu_placement(inv) == ["--host", "a:2,b:1,c:1", "-np", "4"]
    assert "--map-by" not in smoke.cpu_placement(inv)


def test_slurm_commands_split_back(tmp_path, monkeypatch):
    """The Slurm smoke test's and doctor's commands: the stack's Python and the smoke
    program come back as single words, sbatch's --wrap is the srun line intact, and the
    timeout prefix leaves the command as it was."""
    from mpicluster.nodes import transport
    from mpicluster.slurm import facts as slurm_facts
    from mpicluster.slurm import smoke_steps as slurm_smoke

    monkeypatch.setenv("MPICLUSTER_HOME", str(tmp_path / "home"))
    text = (
        "cluster: test\nstack: {prefix: /opt/a-b.c}\nscheduler: {type: slurm}\n"
        "nodes:\n  - {name: n1, address: 10.0.0.1}\n  - {name: n2.example-x}\n"
    )
    inv = inventory(tmp_path, text)
    srun = shlex.split(slurm_smoke.pmix_command(inv))
    assert srun[:5] == ["srun", "-N2", "--ntasks-per-node=1", "-t", "5"]
    assert srun[6:8] == ["/opt/a-b.c/current/venv/bin/python", "/etc/mpicluster/smoke/allreduce.py"]
    commands = []
    said = {"munge -n": "MUNGE:abc:", "scontrol ping": "Slurmctld(primary) at n1 is UP"}

    def fake_run_on(inv, node, command, **kw):
        commands.append(command)
        if command == slurm_facts.CONTROLLER_COMMAND:
            answer = "MUNGE:abc:\n@@\nSlurmctld(primary) at n1 is UP\n@@\n@@\n"
            answer += "n1|idle\nn2.example-x|idle\n@@\n"
            return transport.RemoteResult(node.name, answer, "", 0)
        out = next((v for k, v in said.items() if k in command), "")
        if "sinfo" in command:
            out = "n1|idle\nn2.example-x|idle\n---\n"
        if "srun" in command or command.startswith("cat /tmp"):
            out = json.dumps({"ranks": 2, "results": [{"elements": 1, "exact": True}]})
        if "sbatch" in command:
            out = "7\n"
        if "show job" in command:
            out = "JobId=7 JobState=COMPLETED BatchHost=n1"
        return transport.RemoteResult(node.name, out, "", 0)

    def fake_everywhere(inv, command, **kw):
        commands.append(command)
        out = "daemon.munged=up\ndaemon.slurmd=up\n"
        return {n.name: transport.RemoteResult(n.name, out, "", 0) for n in inv.nodes}

    monkeypatch.setattr(transport, "run_on", fake_run_on)
    monkeypatch.setattr(transport, "run_everywhere", fake_everywhere)
    step = slurm_smoke.sbatch_step(inv, inv.nodes[0])
    assert step.ok, step
    words = shlex.split(commands[0])
    assert words[:3] == ["timeout", "-k", "5"]
    assert words[words.index("--wrap") + 1] == slurm_smoke.pmix_command(inv)
    commands.clear()
    facts = slurm_facts.gather(inv)
    assert facts.launch_ok, facts
    launch = next(c for c in commands if "srun" in c)
    assert shlex.split(launch)[4:] == shlex.split(slurm_smoke.pmix_now(inv))
    assert slurm_facts.NODE_COMMAND in commands


def test_sync_fan_out_script_under_sh(tmp_path, marker):
    """The script the head runs to send --sync on to the other nodes, run here by /bin/sh
    with stand-ins for rsync (and mkdir, for its --rsync-path)."""
    from mpicluster.run import sync

    bin_dir = tmp_path / "bin"
    rsync_calls = recorder(bin_dir, "rsync")
    for value in hostile(marker):
        if "\n" in value:  # refused by destination_for
            with pytest.raises(Exception, match="--sync-to"):
                sync.destination_for(tmp_path, value)
            continue
        if not value:  # the default folder
            continue
        destination = sync.destination_for(tmp_path, value)
        rsync_calls.unlink(missing_ok=True)
        done = sh(sync.fan_out_script(destination, ["n2", "n3"]), bin_dir)
        assert done.returncode == 0, done.stderr
        calls = calls_of(rsync_calls)
        assert len(calls) == 2, (value, done.stdout, done.stderr)
        for argv in calls:
            assert argv[:4] == sync.RSYNC_OPTIONS
            assert argv[4] == f"--rsync-path=mkdir -p {shlex.quote(destination)} && rsync"
            assert argv[5] == f"{destination}/"
            assert argv[6] in (f"n2:{destination}/", f"n3:{destination}/")
        # what the far rsync runs (its --rsync-path) keeps the folder one word too
        mkdir_calls = recorder(bin_dir, "mkdir")
        rsync_calls.unlink()
        path_command = calls[0][4].removeprefix("--rsync-path=")
        assert sh(path_command + " --server . x", bin_dir).returncode == 0
        assert calls_of(mkdir_calls) == [["-p", destination]]
        (bin_dir / "mkdir").unlink()
        mkdir_calls.unlink()


def test_sync_tree_through_rsync_and_ssh(tmp_path, monkeypatch, marker):
    """`run --sync` end to end here: the real rsync, a stand-in ssh that records its argv
    and runs the remote command with /bin/sh against stand-in mkdir and rsync."""

    from mpicluster.run import sync

    if shutil.which("rsync") is None:
        pytest.fail("rsync is not installed (make test installs it: python -m tests.host_packages)")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    remote_bin = tmp_path / "remote-bin"
    mkdir_calls = recorder(remote_bin, "mkdir")
    rsync_calls = recorder(remote_bin, "rsync", exit_code=12)
    ssh_calls = bin_dir / "ssh.calls"
    (bin_dir / "ssh").write_text(
        f"#!{sys.executable}\nimport json, os, subprocess, sys\n"
        f"with open({str(ssh_calls)!r}, 'a') as f:\n"
        "    f.write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "at = sys.argv.index('127.0.0.1')\n"
        f"env = dict(os.environ, PATH={str(remote_bin)!r} + ':' + os.environ['PATH'])\n"
        "sys.exit(subprocess.call(['/bin/sh', '-c', ' '.join(sys.argv[at + 1:])], env=env,"
        " stdin=subprocess.DEVNULL))\n"
    )
    (bin_dir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")

    odd = f"k {ODD}"
    key = tmp_path / odd
    key.write_text("not a key")
    key.chmod(stat.S_IRUSR | stat.S_IWUSR)
    known = tmp_path / f"known {odd}"
    known.write_text("")
    text = (
        "cluster: test\n"
        f"ssh: {{user: alice, port: 2222, identity: {json.dumps(str(key))}, "
        f"known_hosts: {json.dumps(str(known))}}}\n"
        "nodes:\n  - {name: n1, address: 127.0.0.1}\n"
    )
    inv = inventory(tmp_path, text)
    source = tmp_path / f"src {odd}"
    source.mkdir()
    (source / "f.txt").write_text("x")
    for value in ["mpicluster-run/a b", f"$(touch {marker})", 'it\'s "q" `x` *']:
        destination = sync.destination_for(source, value)
        with pytest.raises(Exception, match="--sync to n1 failed"):
            sync.sync_tree(inv, source, destination, inv.nodes[0], [], lambda m: None)
        argv = calls_of(ssh_calls)[-1]
        assert argv[argv.index("-i") + 1] == str(key)
        assert f"UserKnownHostsFile={known}" in argv
        assert argv[argv.index("-p") + 1] == "2222"
        assert calls_of(mkdir_calls)[-1] == ["-p", destination]
        assert calls_of(rsync_calls)[-1][-1] == f"{destination}/"


def test_doctor_launch_command_splits_back():
    """doctor's launches run as argv lists (no shell); the line it shows splits back to
    that argv, the ranks' program named by its file."""
    from mpicluster.doctor.launch_proof import PROGRAM, Launch, build_argv

    for value in HOSTILE:
        word = value.replace("{marker}", "/tmp/never") or "x"
        argv = build_argv(
            f"/opt/{word}/bin/mpirun",
            hosts=[word, "n2"],
            ranks=2,
            timeout=20,
            python=f"/opt/{word}/venv/bin/python",
            root=True,
            network_args=["--mca", "btl_tcp_if_include", word],
        )
        assert argv[-4:-2] == ["-c", PROGRAM]
        launch = Launch("pair", "n1", [word, "n2"], 2, argv, 20)
        assert shlex.split(launch.command) == [*argv[:-4], "launch_rank.py", *argv[-2:]]
        assert f"{word}:1,n2:1" in argv


def test_a_users_launch_reaches_her_shell_whole(marker):
    """doctor's launch as a user: sudo and ssh take argv words (no shell); the command her
    login's shell runs on the head is one word, which a real /bin/sh splits back into
    the launch's argv, hostile values intact and nothing run besides."""
    from mpicluster.doctor.launch_proof import as_user

    values = hostile(marker)
    echo = [sys.executable, "-c", "import json, sys; print(json.dumps(sys.argv[1:]))"]
    started = as_user("alice", "node1", [*echo, *values])
    assert started[:4] == ["sudo", "-n", "-u", "alice"] and started[-2] == "node1"
    done = subprocess.run(["/bin/sh", "-c", started[-1]], capture_output=True, text=True)
    assert json.loads(done.stdout) == values, done.stderr
    assert not marker.exists()


def test_the_node_checks_login_keeps_hostile_values_whole(tmp_path, marker):
    """The login the node's health check reproduces (remote/sshlogin.py): the user's
    shell runs its constant command; the environment it was given comes back whole,
    hostile values and a home with an odd name included, under sh and bash."""
    import pwd

    login = load("sshlogin")
    home = tmp_path / ODD
    home.mkdir()
    me = pwd.getpwuid(os.getuid())
    values = {f"HOSTILE_{i}": v for i, v in enumerate(hostile(marker))}
    for shell in ("/bin/sh", "/bin/bash"):
        entry = pwd.struct_passwd((me.pw_name, "x", me.pw_uid, me.pw_gid, "", str(home), shell))
        environ = login.environment(entry, 22, pam={}) | values
        found = login.measure(entry, environ)
        assert "error" not in found, found
        assert {k: found["env"].get(k) for k in values} == values
        assert found["env"]["HOME"] == str(home)
        assert set(found["limits"]) == {"nofile", "memlock", "nproc"}


def test_relay_command_runs_intact_under_sh(tmp_path, marker):
    """The command a relay sends a child over ssh, run here by /bin/sh as sshd would: the
    child relay gets its code, destination, sha256 and part of the tree intact, writes
    the file it is fed and reports under the node's name."""
    import hashlib

    from mpicluster.remote import relay

    code = remote.source("relay")
    folder = tmp_path / f"in {ODD}"
    folder.mkdir(mode=0o700)
    data = b"pack" * 1000
    expected = hashlib.sha256(data).hexdigest()
    for index, value in enumerate(v for v in hostile(marker) if "\x00" not in v):
        dest = str(folder / f"{index}.tar.gz")
        tree = {"node": value, "children": []}
        command = relay.remote_command(code, dest, expected, tree)
        words = shlex.split(command)
        assert words == [
            "/usr/bin/python3",
            "-c",
            relay.BOOT,
            code,
            dest,
            expected,
            json.dumps(tree),
        ]
        done = subprocess.run(
            ["/bin/sh", "-c", command], input=data, capture_output=True, check=False, timeout=60
        )
        assert done.returncode == 0, done.stderr
        (line,) = done.stdout.decode().splitlines()
        report = json.loads(line)
        assert (report["node"], report["ok"], report["error"]) == (value, True, "")
        assert Path(dest).read_bytes() == data
    assert not marker.exists()


def test_bench_gpu_commands_split_back(tmp_path, monkeypatch):
    """nccl-tests' mpirun line under `timeout`: the prefix, interface and program whole."""
    from mpicluster.bench import gpu
    from mpicluster.nodes import transport

    text = (
        "cluster: test\nnetwork: {interface: 'eth0.1@x_y-z'}\n"
        "stack: {prefix: /opt/a-b.c, install: source}\n"
        "nodes:\n  - {name: n1, address: 10.0.0.1, gpus: 2}\n  - {name: n2.example-x, gpus: 1}\n"
    )
    plan = inventory(tmp_path, text)
    commands = []

    def fake_run_on(plan, node, command, **kw):
        commands.append(command)
        return transport.RemoteResult(node.name, "", "", 0)

    monkeypatch.setattr(transport, "run_on", fake_run_on)
    figures = gpu.run(plan, 5, None)
    assert [f.test for f in figures] == list(gpu.TESTS)
    assert all(f.problem.endswith("printed no result summary") for f in figures)
    for test, command in zip(gpu.TESTS, commands, strict=True):
        words = shlex.split(command)
        assert words[:5] == [
            "timeout",
            "-k",
            "10",
            str(gpu.SECONDS),
            "/opt/a-b.c/current/bin/mpirun",
        ]
        assert "eth0.1@x_y-z" in words
        assert words[-11:] == [f"/opt/a-b.c/current/bin/{test}", *gpu.ARGS]


def test_bench_iperf_client_keeps_a_hostile_peer_whole(tmp_path):
    """iperf3's client loop, run by a real /bin/sh against a stand-in iperf3 that prints
    its arguments: the peer comes back as one word and nothing else runs."""
    from mpicluster.bench import network

    fake = tmp_path / "iperf3"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "[%s]" "$a"; done\n')
    fake.chmod(0o755)
    peer = "a b;$(touch x)`y`'\""
    done = subprocess.run(
        ["/bin/sh", "-c", network.client_command(peer)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": f"{tmp_path}:/usr/bin:/bin"},
        check=True,
    )
    assert done.stdout.startswith(f"[-c][{peer}][-p][{network.PORT}][--bidir]")
    assert not (tmp_path / "x").exists()


def test_bench_ib_write_bw_keeps_hostile_words_whole(tmp_path):
    """ib_write_bw's server and client lines, run by a real /bin/sh against a stand-in
    that prints its arguments: a device named from sysfs and the peer come back whole."""
    import shutil

    from mpicluster.bench import rdma

    fake = tmp_path / "ib_write_bw"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "[%s]" "$a"; done\n')
    fake.chmod(0o755)
    (tmp_path / "timeout").symlink_to(shutil.which("timeout"))
    port, peer = "mlx5 $(touch x);0:2", "a b;`touch y`'\""
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    client = subprocess.run(
        ["/bin/sh", "-c", rdma.client_command(port, peer)],
        capture_output=True, text=True, cwd=tmp_path, env=env, check=True,
    )  # fmt: skip
    assert client.stdout.startswith("[-d][mlx5 $(touch x);0][-i][2][-s][1M]")
    assert client.stdout.strip().endswith(f"[{peer}]")
    server = subprocess.run(
        ["/bin/sh", "-c", rdma.server_command(port)],
        capture_output=True, text=True, cwd=tmp_path, env=env, check=True,
    )  # fmt: skip
    assert server.returncode == 0
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def test_setup_runs_the_command_and_folder_intact(tmp_path, marker):
    """--setup's line for a node, run by /bin/sh as sshd would: the command reaches bash
    whole and runs from the job's folder, whatever either holds."""
    from mpicluster.run.setup_step import node_command

    show = 'printf "%s\\0" "$(pwd)"'
    for value in hostile(marker):
        folder = value.replace("\n", "_") or None
        if folder:
            (tmp_path / "home" / folder).mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["/bin/sh", "-c", node_command(show, folder)],
            cwd=tmp_path / "home" if (tmp_path / "home").exists() else tmp_path,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, (value, done.stderr)
        if folder:
            assert done.stdout.split("\0")[0] == str(tmp_path / "home" / folder), value
        if not value:
            continue
        # the value as the command: bash gets it as one word (a command of that name)
        done = subprocess.run(
            ["/bin/sh", "-c", node_command(f"printf %s {shlex.quote(value)}", None)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert (done.returncode, done.stdout) == (0, value), value


def test_collect_brings_back_a_hostile_path_through_rsync(tmp_path, monkeypatch, marker):
    """--collect end to end here: the real rsync both ends, a stand-in ssh that runs the
    far end's command in a stand-in home; a file of a hostile name comes back whole."""
    from mpicluster.run import collect as collecting

    if shutil.which("rsync") is None:
        pytest.fail("rsync is not installed (make test installs it: python -m tests.host_packages)")
    home = tmp_path / "home"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(
        f"#!{sys.executable}\nimport subprocess, sys\n"
        "at = sys.argv.index('127.0.0.1')\n"
        "far = ' '.join(sys.argv[at + 1:])\n"
        f"sys.exit(subprocess.call(['/bin/sh', '-c', far], cwd={str(home)!r}))\n"
    )
    (bin_dir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    inv = inventory(
        tmp_path,
        "cluster: test\nssh: {user: alice}\nnodes:\n  - {name: n1, address: 127.0.0.1}\n",
    )
    plan = inv
    for index, value in enumerate(v for v in hostile(marker) if v and "/" not in v):
        if "\n" in value:
            with pytest.raises(collecting.UsageError, match="--collect: not a path"):
                collecting.checked_path(value)
            continue
        job = f"job{index}"
        (home / "run" / value).mkdir(parents=True, exist_ok=True)
        (home / "run" / value / "metrics.txt").write_text(value)
        got = collecting.collect(plan, plan.nodes, collecting.checked_path(value), "run", job)
        assert got.nodes["n1"].ok and not got.nodes["n1"].missing, (value, got)
        back = collecting.jobs_dir("test", job) / "n1" / value / "metrics.txt"
        assert back.read_text() == value
    got = collecting.collect(plan, plan.nodes, "not-there", "run", "gone")
    assert got.nodes["n1"].missing and got.nodes["n1"].ok


def test_batch_script_keeps_hostile_words_whole(tmp_path):
    """job.sh as sbatch runs it: srun's command (here a stand-in program given hostile
    words), then exit.json with its code, written aside and renamed, in a folder whose
    name a shell would split."""
    folder = tmp_path / "jobs" / "a folder; with $pace `id` 'q'"
    folder.mkdir(parents=True)
    exit_json = folder / "exit.json"
    script = tmp_path / "job.sh"
    hostile = ["$(touch pwned)", "a;b", "it's", '"q"', "line\nbreak", "*", "`id`"]
    program = "import sys; print(sys.argv[1:]); sys.exit(7)"
    text = load("job_runner").batch_script(
        "0123456789ab", [sys.executable, "-c", program, *hostile], str(exit_json)
    )
    script.write_text(text)
    done = subprocess.run(
        ["/bin/sh", str(script)], capture_output=True, text=True, check=False, cwd=tmp_path
    )
    assert (done.returncode, done.stdout) == (7, f"{hostile}\n"), done.stderr
    ended = json.loads(exit_json.read_text())
    assert (ended["code"], ended["status"]) == (7, 7) and ended["ended"] > time.time() - 60
    assert sorted(p.name for p in folder.iterdir()) == ["exit.json"]
    assert not (tmp_path / "pwned").exists()


def test_the_nodes_commands_split_back(tmp_path):
    """`mpicluster nodes`: the check run through sudo (or not, without become), or its
    last result read, then the cordons; every path one word."""
    from mpicluster.cluster.layout import CORDONS, HEALTH_LAST, HEALTH_PROGRAM
    from mpicluster.health.states import command

    plan = inventory(tmp_path)
    tail = ["echo", "@@cordons;", "cat", CORDONS, "2>/dev/null;", "true"]
    checked = shlex.split(command(plan, True))
    assert checked == ["sudo", "-n", HEALTH_PROGRAM, "--json;", "echo", "@@exit $?;", *tail]
    read = shlex.split(command(plan, False))
    last = ["sudo", "-n", "cat", HEALTH_LAST, "2>/dev/null;"]
    assert read == [*last, "echo;", "echo", "@@exit", "0;", *tail]
    bare = inventory(tmp_path, GOOD.replace("{user: alice}", "{user: alice, become: false}"))
    assert shlex.split(command(bare, True))[:2] == [HEALTH_PROGRAM, "--json;"]


def test_the_cordon_writer_keeps_every_file_whole(tmp_path, monkeypatch):
    """cordon's writer: its program one word after -c (sudo or not), the files as JSON on
    stdin; run here, it writes each file whole at a hostile path."""
    from mpicluster.health import cordons as cordon_io
    from mpicluster.nodes import transport

    plan = inventory(tmp_path)
    seen = {}

    def fake_everywhere(plan, command, *, nodes=None, stdin=None, **kw):
        seen.update(command=command, stdin=stdin)
        return transport.GroupResult()

    monkeypatch.setattr(transport, "run_everywhere", fake_everywhere)
    target = tmp_path / "it's $(x) a `file`"
    cordon_io.write(plan, list(plan.nodes), {str(target): "n1 slots=2\n"})
    words = shlex.split(seen["command"])
    assert words[:4] == ["sudo", "-n", remote.PYTHON, "-c"] and len(words) == 5
    subprocess.run([sys.executable, "-c", words[4]], input=seen["stdin"], text=True, check=True)
    assert target.read_text() == "n1 slots=2\n" and oct(target.stat().st_mode)[-3:] == "644"
    assert shlex.split(cordon_io.read_command())[:2] == ["cat", "/etc/mpicluster/cordons.json"]


def test_the_sites_on_change_gets_each_word_whole(tmp_path):
    """The site's on_change command, run by the node's check through /bin/sh: the node,
    the state and a hostile reason reach it as three whole arguments."""
    from tests.shipped import load

    slurmnode = load("slurmnode")
    out = tmp_path / "said.json"
    program = "import json, sys; print(json.dumps(sys.argv[1:]))"
    command = f"{shlex.quote(sys.executable)} -c {shlex.quote(program)} >> {shlex.quote(str(out))}"
    reason = "mpicluster: disk: /tmp $(touch x) `id` 'q' \"d\"; ls *"
    assert slurmnode.on_change(command, "node-2", "drained", reason) is None
    assert json.loads(out.read_text()) == ["node-2", "drained", reason]
    said = slurmnode.on_change("exit 3", "n", "returned", "r")
    assert said == "on_change exited 3: "
    # the same words from the control machine, at a cordon and a return
    from mpicluster.health import site_command

    calls = recorder(tmp_path / "bin", "page")
    plan = inventory(tmp_path, GOOD + f"health:\n  on_change: {tmp_path / 'bin' / 'page'}\n")
    changes = [("node-2", "cordoned", reason), ("n1", "returned", "")]
    assert site_command.on_change(plan, changes) == []
    assert calls_of(calls) == [list(change) for change in changes]
    failing = inventory(tmp_path, GOOD + "health:\n  on_change: exit 4\n")
    assert site_command.on_change(failing, [("n1", "cordoned", "r")]) == [
        "on_change for n1 exited 4: "
    ]
    assert site_command.on_change(inventory(tmp_path), changes) == []
