"""Run mpicluster's playbooks with ansible-runner and collect per-host results.

Every run gets a fresh folder under the cluster's state directory holding the
exact inputs (hosts.yml, vars.yml, ansible.cfg), the full log, and the
equivalent `ansible-playbook` command so a user can rerun it by hand.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from mpicluster import remote
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.nodes import host_keys
from mpicluster.util import commandlog, exitcodes
from mpicluster.util.files import write_atomic
from mpicluster.util.paths import data_path
from mpicluster.util.text import last_line, lines_of

KEEP_RUNS = 20


@dataclass
class HostStats:
    host: str
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    first_event: float | None = None
    last_event: float | None = None
    stage: str = ""
    task: str = ""
    failures: list[str] = field(default_factory=list)
    #: What the tasks reported doing, path -> action (mpicluster_journal's undo `actions`).
    actions: dict[str, str] = field(default_factory=dict)
    #: Seconds the node's tasks took, by stage (role or play): where its time went.
    stages: dict[str, float] = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        if self.first_event is None or self.last_event is None:
            return 0.0
        return self.last_event - self.first_event

    @property
    def status(self) -> str:
        if self.unreachable:
            return "unreachable"
        if self.failed:
            return "failed"
        return "changed" if self.changed else "ok"

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "ok": self.ok,
            "changed": self.changed,
            "failed": self.failed,
            "unreachable": self.unreachable,
            "seconds": round(self.seconds, 1),
            "last_task": f"{self.stage}: {self.task}" if self.stage else "",
            "failures": self.failures,
            "stages": {stage: round(seconds, 1) for stage, seconds in self.stages.items()},
            **({"actions": self.actions} if self.actions else {}),
        }


@dataclass(frozen=True)
class Event:
    """What the playbook is doing, for a progress display."""

    kind: str  # task | ok | changed | failed | unreachable | skipped
    host: str | None
    stage: str
    task: str
    message: str = ""


EventSink = Callable[[Event], None]


@dataclass
class PlaybookResult:
    playbook: str
    run_dir: Path
    log: Path
    command: str
    rc: int
    hosts: dict[str, HostStats]
    seconds: float

    @property
    def failed_hosts(self) -> list[str]:
        return [h for h, s in self.hosts.items() if s.failed and not s.unreachable]

    @property
    def unreachable_hosts(self) -> list[str]:
        return [h for h, s in self.hosts.items() if s.unreachable]

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.failed_hosts and not self.unreachable_hosts

    @property
    def exit_code(self) -> int:
        """A failed host first, then an unreachable one, then any other failure."""
        if self.failed_hosts:
            return exitcodes.HOSTS_FAILED
        if self.unreachable_hosts:
            return exitcodes.HOSTS_UNREACHABLE
        return exitcodes.FAILED if self.rc != 0 else exitcodes.OK


def ssh_args(plan: ClusterPlan) -> str:
    """OpenSSH options for the control connection: host keys always checked."""
    policy = host_keys.openssh_options(plan.logins.known_hosts, plan.logins.accept_new_host_keys)
    args = [
        "-o ControlMaster=auto",
        "-o ControlPersist=60s",
        *(f"-o {shlex.quote(option)}" for option in policy),
        "-o BatchMode=yes",
        "-o ServerAliveInterval=15",
        f"-o ConnectTimeout={plan.logins.connect_timeout}",
    ]
    return " ".join(args)


def hosts_yaml(
    plan: ClusterPlan,
    host_vars: dict[str, dict[str, Any]],
    groups: dict[str, list[str]] | None = None,
) -> str:
    hosts = {}
    for node in plan.nodes:
        ssh = plan.node_ssh(node)
        entry: dict[str, Any] = {
            "ansible_host": ssh.host,
            "ansible_user": ssh.user,
            "ansible_port": ssh.port,
        }
        if ssh.identity:
            entry["ansible_ssh_private_key_file"] = str(ssh.identity)
            entry["ansible_ssh_extra_args"] = "-o IdentitiesOnly=yes"
        entry.update(host_vars.get(node.name, {}))
        hosts[node.name] = entry
    children = {
        name: {"hosts": dict.fromkeys(members)} if members else {}
        for name, members in (groups or {}).items()
    }
    data: dict[str, Any] = {
        # The system's Python, never one found on PATH: /etc/environment puts the stack's
        # venv first, and a `down` (or a switch) removes it while the playbook runs.
        "all": {"hosts": hosts, "vars": {"ansible_python_interpreter": remote.PYTHON}}
    }
    if children:
        data["all"]["children"] = children
    return data_yaml(data, sort_keys=False)


class _Unsafe(str):
    """A string Ansible must take as it is (YAML's `!unsafe`): never a template."""


class _DataDumper(yaml.SafeDumper):
    pass


_DataDumper.add_representer(
    _Unsafe, lambda dumper, text: dumper.represent_scalar("!unsafe", str(text))
)
#: What Jinja2 reads as the start of a template in a string Ansible uses.
_JINJA = ("{{", "{%", "{#")


def _as_data(value: Any) -> Any:
    if isinstance(value, str):
        return _Unsafe(value) if any(mark in value for mark in _JINJA) else value
    if isinstance(value, dict):
        return {key: _as_data(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_as_data(item) for item in value]
    return value


def data_yaml(data: dict[str, Any], *, sort_keys: bool = True) -> str:
    """`data` as YAML for Ansible: every input is computed data, never a template, so a
    string holding Jinja2's delimiters (a shipped program's `f"${{{name}}}"`) is marked
    `!unsafe` and reaches the nodes as written."""
    return yaml.dump(_as_data(data), Dumper=_DataDumper, sort_keys=sort_keys)


def runner_env(run_dir: Path, bin_dir: str) -> dict[str, str]:
    """The environment ansible-runner starts ansible-playbook with.

    Unless told otherwise, ansible-runner turns Ansible's host key checking off through
    the environment, which outranks ansible.cfg: Ansible then puts an option switching
    ssh's strict checking off on every ssh command line (after ours, so ssh still
    checked, but only by the order of its options). Set here, Ansible checks too."""
    return {
        "ANSIBLE_CONFIG": str(run_dir / "ansible.cfg"),
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "PATH": os.pathsep.join([bin_dir, os.environ.get("PATH", "")]),
        "ANSIBLE_FORCE_COLOR": "0",
    }


def ansible_cfg(plan: ClusterPlan, playbooks: Path) -> str:
    forks = max(5, min(100, len(plan.nodes)))
    return f"""\
# Written by mpicluster for this run.
[defaults]
roles_path = {playbooks / "roles"}
library = {remote.MODULES}
module_utils = {remote.MODULE_UTILS}
host_key_checking = True
forks = {forks}
timeout = {plan.logins.connect_timeout}
gathering = explicit
retry_files_enabled = False
interpreter_python = {remote.PYTHON}
display_skipped_hosts = False
nocows = 1

[privilege_escalation]
become = {plan.logins.become}
# absolute, so a node whose PATH is broken can still be repaired
become_exe = /usr/bin/sudo

[ssh_connection]
pipelining = True
ssh_args = {ssh_args(plan)}
"""


def prepare_run(
    runs_dir: Path,
    label: str,
    plan: ClusterPlan,
    extravars: dict[str, Any],
    host_vars: dict[str, dict[str, Any]],
    playbook: str,
    groups: dict[str, list[str]] | None = None,
) -> tuple[Path, str]:
    """Write a run folder; return it and the equivalent ansible-playbook command."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S.%fZ")
    run_dir = runs_dir / f"{stamp}-{label}"
    (run_dir / "runner").mkdir(parents=True)
    playbooks = data_path("playbooks")
    write_atomic(run_dir / "hosts.yml", hosts_yaml(plan, host_vars, groups))
    write_atomic(run_dir / "vars.yml", data_yaml(extravars))
    write_atomic(run_dir / "ansible.cfg", ansible_cfg(plan, playbooks))
    command = (
        f"ANSIBLE_CONFIG={shlex.quote(str(run_dir / 'ansible.cfg'))} "
        f"ansible-playbook -i {shlex.quote(str(run_dir / 'hosts.yml'))} "
        f"-e @{shlex.quote(str(run_dir / 'vars.yml'))} {shlex.quote(str(playbooks / playbook))}"
    )
    write_atomic(run_dir / "command.sh", f'#!/bin/sh\n{command} "$@"\n', mode=0o755)
    _prune(runs_dir)
    return run_dir, command


def run_playbook(
    plan: ClusterPlan,
    playbook: str,
    *,
    runs_dir: Path,
    label: str,
    extravars: dict[str, Any],
    host_vars: dict[str, dict[str, Any]] | None = None,
    groups: dict[str, list[str]] | None = None,
    on_event: EventSink | None = None,
) -> PlaybookResult:
    import ansible_runner

    run_dir, command = prepare_run(
        runs_dir, label, plan, extravars, host_vars or {}, playbook, groups
    )
    hosts = {node.name: HostStats(node.name) for node in plan.nodes}
    sink = on_event or (lambda event: None)
    collector = _Collector(hosts, sink)
    cancel = threading.Event()
    started = time.monotonic()
    bin_dir = str(Path(sys.executable).parent)
    envvars = runner_env(run_dir, bin_dir)
    cmdline = f"-e @{shlex.quote(str(run_dir / 'vars.yml'))}"
    commandlog.ran("ansible", command)
    thread, runner = ansible_runner.run_async(
        private_data_dir=str(run_dir / "runner"),
        project_dir=str(data_path("playbooks")),
        playbook=playbook,
        inventory=str(run_dir / "hosts.yml"),
        cmdline=cmdline,
        envvars=envvars,
        event_handler=collector,
        cancel_callback=cancel.is_set,
        quiet=True,
        suppress_env_files=True,
        ident="run",
    )
    interrupted = False
    try:
        # Ctrl-C or SIGTERM (the CLI turns it into KeyboardInterrupt): the playbook is
        # stopped, and only then does this return, so the cluster's lock is never let go
        # while a playbook still runs.
        while thread.is_alive():
            try:
                thread.join(0.2)
            except KeyboardInterrupt:
                interrupted = True
                stop_playbook(thread, cancel)
    finally:
        log = run_dir / "ansible.log"
        produced = run_dir / "runner" / "artifacts" / "run" / "stdout"
        if produced.exists():
            shutil.copyfile(produced, log)
    if interrupted:
        raise KeyboardInterrupt
    return PlaybookResult(
        playbook=playbook,
        run_dir=run_dir,
        log=log,
        command=command,
        rc=runner.rc if runner.rc is not None else 1,
        hosts=hosts,
        seconds=time.monotonic() - started,
    )


#: Seconds ansible-playbook gets to stop its workers after SIGINT before it is killed.
STOP_GRACE = 30.0


def _process_table() -> dict[int, tuple[int, bytes]]:
    """pid -> (parent pid, command line), from /proc."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            table[int(entry.name)] = (parent, (entry / "cmdline").read_bytes())
        except OSError:
            continue
    return table


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def stop_playbook(thread: threading.Thread, cancel: threading.Event) -> None:
    """Stop the running playbook as Ctrl-C in its own terminal would: SIGINT to
    ansible-playbook, which ends its workers (each in a session of its own, so they
    never saw the user's Ctrl-C) and exits; after STOP_GRACE, or a second Ctrl-C, all of
    them are killed. Returns once none of its processes is left."""
    table = _process_table()
    processes: set[int] = set()
    frontier = {os.getpid()}
    while frontier:  # every descendant of this process
        frontier = {pid for pid, (parent, _) in table.items() if parent in frontier} - processes
        processes |= frontier
    for pid in processes:
        parent, command = table[pid]
        if parent == os.getpid() and b"ansible-playbook" in command:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + STOP_GRACE
    while thread.is_alive() or any(_alive(p) for p in processes):
        try:
            if time.monotonic() > deadline:
                cancel.set()
                for pid in processes:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            thread.join(0.1)
        except KeyboardInterrupt:
            deadline = 0.0


class _Collector:
    """Turns ansible-runner events into HostStats and Events."""

    def __init__(self, hosts: dict[str, HostStats], sink: EventSink):
        self.hosts = hosts
        self.sink = sink
        self.stage = ""
        self.task = ""

    def __call__(self, event: dict[str, Any]) -> bool:
        kind = event.get("event", "")
        data = event.get("event_data", {}) or {}
        now = time.monotonic()
        if kind == "playbook_on_task_start":
            self.stage = data.get("role") or _play_stage(data)
            self.task = (data.get("task") or "").split(" : ")[-1]
            self.sink(Event("task", None, self.stage, self.task))
            return True
        host = data.get("host")
        stats = self.hosts.get(host) if host else None
        if stats is None or not kind.startswith("runner_on_"):
            return True
        stats.first_event = stats.first_event or now
        stats.last_event = now
        stats.stage, stats.task = self.stage, self.task
        duration = data.get("duration")
        if isinstance(duration, int | float):
            stats.stages[self.stage] = stats.stages.get(self.stage, 0.0) + duration
        result = data.get("res", {}) or {}
        if kind == "runner_on_ok":
            changed = bool(result.get("changed"))
            stats.ok += 1
            stats.changed += int(changed)
            if isinstance(result.get("actions"), dict):
                stats.actions.update(result["actions"])
            outcome = "changed" if changed else "ok"
            self.sink(Event(outcome, host, self.stage, self.task, _changed_note(result)))
        elif kind == "runner_on_failed":
            if data.get("ignore_errors"):
                stats.ok += 1
                return True
            stats.failed += 1
            message = _failure_message(result)
            stats.failures.append(f"{self.stage}: {self.task}: {message}")
            self.sink(Event("failed", host, self.stage, self.task, message))
        elif kind == "runner_on_unreachable":
            stats.unreachable += 1
            message = _failure_message(result)
            stats.failures.append(f"{self.stage}: {self.task}: unreachable: {message}")
            self.sink(Event("unreachable", host, self.stage, self.task, message))
        elif kind == "runner_on_skipped":
            stats.skipped += 1
        return True


def _play_stage(data: dict[str, Any]) -> str:
    return (data.get("play") or "").split(":")[0].strip().lower() or "play"


def _changed_note(result: dict[str, Any]) -> str:
    return str(result.get("msg") or "") if result.get("changed") else ""


def _failure_message(result: dict[str, Any]) -> str:
    message = result.get("msg") or ""
    stderr = (result.get("stderr") or "").strip()
    if stderr:
        lines = lines_of(stderr)
        errors = [line for line in lines if line.lower().startswith(("error:", "fatal"))]
        telling = errors[0] if errors else last_line(stderr)
        message = f"{message}: {telling}" if message else telling
    if not message and result.get("rc") is not None:
        message = f"exited {result['rc']}"
    return " ".join(str(message).split())[:500] or "failed"


def _prune(runs_dir: Path) -> None:
    runs = sorted(p for p in runs_dir.iterdir() if p.is_dir())
    for old in runs[:-KEEP_RUNS]:
        shutil.rmtree(old, ignore_errors=True)
