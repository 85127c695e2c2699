"""`mpicluster up`: probe the nodes, run the playbooks, then prove the cluster works."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mpicluster import remote, slurm
from mpicluster.cluster import cordons
from mpicluster.cluster import hostfiles as hostfile
from mpicluster.cluster.cordons import CordonState
from mpicluster.cluster.layout import (
    CLUSTER_JSON,
    CORDONS,
    ENV_FILE,
    HEALTH_PROGRAM,
    HEALTH_PROLOG,
    HEALTH_RECORD,
    HEALTH_SLURM,
    SMOKE_DIR,
    SYSTEM_PATH,
    USERS_RECORD,
)
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.cluster.state import (
    ClusterKey,
    cluster_dir,
    cluster_lock,
    ensure_cluster_key,
    existing_cluster_key,
)
from mpicluster.nodes import facts as node_facts
from mpicluster.nodes import supported
from mpicluster.nodes.ansible_run import EventSink, PlaybookResult, run_playbook
from mpicluster.smoke import SmokeReport, run_smoke
from mpicluster.stack import StackPlan, prepare_stack
from mpicluster.up import accounts, applied
from mpicluster.util import exitcodes, templates
from mpicluster.util.errors import MpiclusterError
from mpicluster.util.paths import data_path

Progress = Callable[[str], None]


@dataclass
class UpResult:
    cluster: str
    playbook: PlaybookResult | None = None
    smoke: SmokeReport | None = None
    seconds: float = 0.0
    #: "unchanged": the probes proved the playbooks would change nothing, so they were
    #: skipped; "full": they ran (`why`: what the probes found, or --full).
    path: str = "full"
    why: str = ""
    #: Seconds until every node's probe had answered (and the stack was planned).
    probe_seconds: float = 0.0
    #: How many nodes the inventory names.
    nodes: int = 0

    @property
    def exit_code(self) -> int:
        if self.playbook is not None and self.playbook.exit_code != exitcodes.OK:
            return self.playbook.exit_code
        if self.smoke is not None and not self.smoke.ok:
            return exitcodes.CHECK_FAILED
        return exitcodes.OK

    @property
    def changes(self) -> int:
        if self.playbook is None:
            return 0
        return sum(s.changed for s in self.playbook.hosts.values())

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "cluster": self.cluster,
            "exit_code": self.exit_code,
            "seconds": round(self.seconds, 1),
            "path": self.path,
            "why": self.why,
            "probe_seconds": round(self.probe_seconds, 1),
            "hosts": {},
            "smoke": None,
        }
        if self.playbook is not None:
            data["log"] = str(self.playbook.log)
            data["command"] = self.playbook.command
            data["hosts"] = {name: s.to_dict() for name, s in self.playbook.hosts.items()}
        if self.smoke is not None:
            data["smoke"] = self.smoke.to_dict()
        return data


def rdma_host_vars(
    plan: ClusterPlan, facts: dict[str, dict[str, Any]], host_vars: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """`host_vars` with `base_rdma: true` for each node that has an RDMA device: the base
    role installs rdma-core's run-time libraries there (NCCL and UCX load libibverbs and
    the device's provider at run time, and fall back to TCP sockets without them); and
    `base_peermem: true` where such a node also has GPUs that need nvidia-peermem for
    GPUDirect RDMA (peermem_wanted)."""
    merged = {name: dict(values) for name, values in host_vars.items()}
    for node in plan.nodes:
        seen = facts.get(node.name) or {}
        if seen.get("rdma"):
            merged.setdefault(node.name, {})["base_rdma"] = True
            if node.gpus and plan.stack.gpus_present and peermem_wanted(seen):
                merged[node.name]["base_peermem"] = True
    return merged


def peermem_wanted(seen: dict[str, Any]) -> bool:
    """Whether NCCL needs the driver's nvidia-peermem module on this GPU node to move GPU
    memory straight to its RDMA card: the module ships with the driver, and dma-buf (the
    driver's open kernel module on a kernel >= 5.12) is not there to do it instead.
    Whether it is loaded now does not count: the answer stays the same once `up` loaded
    it."""
    direct = seen.get("gpudirect") or {}
    dmabuf = direct.get("open_kernel_module") and direct.get("dmabuf_kernel")
    return bool(direct.get("peermem_available")) and not dmabuf


@dataclass(frozen=True)
class ControlFiles:
    """The files on the control machine the playbooks copy to the nodes, made by `up`
    before it computes any input (the cluster's SSH key; Slurm's munge key)."""

    key: ClusterKey
    munge_key: Path | None = None

    @classmethod
    def ensure(cls, plan: ClusterPlan) -> ControlFiles:
        munge = slurm.ensure_munge_key(plan.cluster) if plan.scheduler else None
        return cls(ensure_cluster_key(plan.cluster), munge)

    @classmethod
    def peek(cls, plan: ClusterPlan, notes: list[str]) -> ControlFiles:
        """The files as they are, none made (a dry run): a key not made yet is said in
        `notes` and stands in as a placeholder (no node has it either)."""
        key = existing_cluster_key(plan.cluster)
        if key is None:
            notes.append(
                f"the cluster's SSH key would be made on this machine ({cluster_dir(plan.cluster)})"
            )
            key = ClusterKey(
                cluster_dir(plan.cluster) / "id_ed25519",
                f"ssh-ed25519 (not made yet) mpicluster:{plan.cluster}",
            )
        munge = None
        if plan.scheduler:
            munge = slurm.munge_key_path(plan.cluster)
            if not munge.exists():
                notes.append(f"Slurm's munge key would be made on this machine ({munge})")
        return cls(key, munge)


def extravars(
    plan: ClusterPlan,
    cores: dict[str, int],
    files: ControlFiles,
    cordoned: CordonState | None = None,
    users: accounts.UsersPlan | None = None,
) -> dict[str, Any]:
    """The playbooks' inputs (each role declares the ones it reads in
    meta/argument_specs.yml): what every run takes (ClusterPlan.playbook_inputs), and
    up's own."""
    node_slots = hostfile.slots(plan, cores)
    nodes = [
        {
            "name": node.name,
            "host": node.host,
            "ip": plan.node_ip(node),
            "port": plan.node_ssh(node).port,
            "user": plan.node_ssh(node).user,
            "gpus": node.gpus,
            "slots": node_slots[node.name],
        }
        for node in plan.nodes
    ]
    inputs = plan.playbook_inputs()
    return {
        **inputs,
        "mpicluster_applied_watch": applied.watched(inputs["mpicluster_footprint"]),
        "mpicluster_nodes": nodes,
        "mpicluster_env_vars": dict(plan.mpi_env),
        "mpicluster_cluster_key": str(files.key.private_path),
        "mpicluster_cluster_pubkey": files.key.public_line,
        "mpicluster_relay_src": str(remote.HERE / "relay.py"),
        "mpicluster_templates": str(data_path("templates")),
        "mpicluster_config_files": config_files(plan, node_slots, nodes, cordoned, users),
        "mpicluster_users": users_vars(plan, list((users or accounts.UsersPlan()).accounts)),
        "mpicluster_users_leaving": (users or accounts.UsersPlan()).leaving,
        **slurm.scheduler_vars(plan, files.munge_key),
        **slurm.teardown_vars(),
    }


def users_vars(plan: ClusterPlan, made: list[accounts.Account]) -> list[dict[str, Any]]:
    """The users role's input: each user as planned, with her public keys."""
    wanted = {user.name: user for user in plan.users}
    return [
        {
            "name": account.name,
            "uid": account.uid,
            "gid": account.gid,
            "made_on": list(account.made_on),
            "groups": list(wanted[account.name].groups),
            "sudo": wanted[account.name].sudo,
            "keys": list(wanted[account.name].keys),
        }
        for account in made
    ]


def config_files(
    plan: ClusterPlan,
    node_slots: dict[str, int],
    nodes: list[dict[str, Any]],
    cordoned: CordonState | None = None,
    users: accounts.UsersPlan | None = None,
) -> list[dict[str, str]]:
    """What the hostfiles role writes on every node (one module call, changed files only):
    the hostfiles (without the cordoned nodes), the cordons themselves, the environment
    for users' scripts, cluster.json, the smoke programs, the health check."""
    state = cordoned or CordonState()
    ready = {name: count for name, count in node_slots.items() if name not in state.cordons}
    described = {
        "cluster": plan.cluster,
        "install": plan.stack.install,
        "prefix": plan.stack.prefix,
        "network": plan.network.selector or "",
        "nodes": [{k: n[k] for k in ("name", "ip", "gpus", "slots")} for n in nodes],
    }
    texts = {
        **hostfile.rendered(ready),
        CORDONS: state.to_json(),
        ENV_FILE: plan.layout.shell_exports(dict(plan.mpi_env)),
        CLUSTER_JSON: templates.render("cluster.json.j2", cluster=described),
    }
    for program in sorted(remote.RANK_PROGRAMS.glob("*.py")):
        texts[f"{SMOKE_DIR}/{program.name}"] = program.read_text(encoding="utf-8")
    texts[HEALTH_RECORD] = json.dumps(health_record(plan, node_slots), indent=1) + "\n"
    recorded = (users or accounts.UsersPlan()).record_text()
    if recorded is not None:
        texts[USERS_RECORD] = recorded
    files = [{"path": path, "content": text, "mode": "0644"} for path, text in texts.items()]
    program = f"#!{remote.PYTHON}\n" + remote.script("health")
    return [
        *files,
        {"path": HEALTH_PROGRAM, "content": program, "mode": "0755"},
        {"path": HEALTH_SLURM, "content": _health_mode("--slurm"), "mode": "0755"},
        {"path": HEALTH_PROLOG, "content": _health_mode("--prolog"), "mode": "0755"},
    ]


def _health_mode(option: str) -> str:
    """slurmd's HealthCheckProgram or Prolog: the check in one mode (slurmd gives them
    no arguments, and no PATH)."""
    return (
        "#!/bin/sh\n"
        "# Written by mpicluster up: the node's health check, as Slurm runs it.\n"
        f"PATH={':'.join(SYSTEM_PATH)}\n"
        "export PATH\n"
        f"exec {HEALTH_PROGRAM} {option} >/dev/null\n"
    )


def health_record(plan: ClusterPlan, node_slots: dict[str, int]) -> dict[str, Any]:
    """What the node's health check (remote/health.py) judges against: the layout, the
    MPI settings of /etc/environment's block, and each node's MPI user, ssh port (the one
    its peers log in on), GPUs and slots."""
    return {
        "cluster": plan.cluster,
        "layout": {
            "prefix": plan.layout.prefix,
            "install": plan.layout.install,
            "cuda_home": plan.layout.cuda_home,
            "packages": plan.layout.packages,
            "site_ucx": plan.layout.site_ucx,
        },
        "mpi_env": dict(plan.mpi_env),
        "gpus_present": plan.stack.gpus_present,
        "on_change": plan.health.on_change,
        "nodes": {
            node.name: {
                "user": plan.node_ssh(node).user,
                "port": plan.node_ssh(node).port,
                "gpus": node.gpus,
                "slots": node_slots[node.name],
            }
            for node in plan.nodes
        },
    }


def provision(
    plan: ClusterPlan,
    *,
    on_event: EventSink | None = None,
    on_progress: Progress | None = None,
    smoke: bool = True,
    full: bool = False,
) -> UpResult:
    """`full`: run every task even where the probes prove nothing would change."""
    with cluster_lock(plan.cluster):
        return _provision(plan, on_event, on_progress, smoke, full)


def _provision(
    plan: ClusterPlan,
    on_event: EventSink | None,
    on_progress: Progress | None,
    smoke: bool,
    full: bool,
) -> UpResult:
    progress = on_progress or (lambda message: None)
    started = time.monotonic()
    result = UpResult(plan.cluster, nodes=len(plan.nodes))
    found = survey(plan, progress)
    facts, cordoned, stack = found.facts, found.cordoned, found.stack
    variables, host_vars, verdict = found.variables, found.host_vars, found.verdict
    result.probe_seconds = time.monotonic() - started
    if full:
        result.why = "--full"
    elif not verdict.unchanged:
        result.why = verdict.reason
    else:
        progress(
            f"Nothing to change: every node matches the record of the last up "
            f"({len(facts)} probe(s); --full runs every task)"
        )
        result.path = "unchanged"
        if not smoke:
            result.seconds = time.monotonic() - started
            return result
        # The probes proved the stack the one its framework runs passed on: MPI's own
        # runs prove the cluster; Horovod's and torch's wait for --full or a change.
        result.smoke = run_smoke(smoked(plan, cordoned, progress), progress, frameworks=False)
        if result.smoke.ok:
            result.seconds = time.monotonic() - started
            return result
        progress(
            "The smoke test failed on a cluster the probes found unchanged: running every task"
        )
        result.path, result.why, result.smoke = "full", "the smoke test failed", None
    if result.why != "--full":
        progress(f"Running every task: {result.why}")
    progress("Running playbooks/site.yml")
    result.playbook = run_playbook(
        plan,
        "site.yml",
        runs_dir=cluster_dir(plan.cluster) / "runs",
        label="up",
        extravars=variables,
        host_vars=host_vars,
        groups={"stack_builders": stack.builders, "stack_installers": stack.installers},
        on_event=on_event,
    )
    if result.playbook.ok and smoke:
        result.smoke = run_smoke(smoked(plan, cordoned, progress), progress)
    result.seconds = time.monotonic() - started
    return result


@dataclass(frozen=True)
class Survey:
    """What `up` learns and decides before any change: every node's probe, the users'
    accounts, the cordons, the stack's plan, the playbooks' inputs and the fast path's
    verdict. `up --dry-run` shows it; `up` acts on it."""

    facts: dict[str, dict[str, Any]]
    users: accounts.UsersPlan
    cordoned: CordonState
    stack: StackPlan
    variables: dict[str, Any]
    host_vars: dict[str, dict[str, Any]]
    verdict: applied.Verdict
    #: Only in a dry run: what up would do first on this machine (a key to make,
    #: sources to download), said instead of done.
    control_notes: tuple[str, ...] = ()


def survey(plan: ClusterPlan, progress: Progress, *, dry_run: bool = False) -> Survey:
    """Probe every node and plan the run. `dry_run`: change nothing anywhere (no key or
    munge key made, no source downloaded: what is missing is said in `control_notes`),
    and say what a check that would stop `up` found instead of raising it."""
    progress(f"Reaching {len(plan.nodes)} node(s) over SSH")
    facts = node_facts.gather(plan, applied=True, users=[user.name for user in plan.users])
    supported.check(plan, facts)
    node_facts.check_gpus(plan, facts)
    node_facts.check_site_ucx(plan, facts)
    kept = accounts.earlier(facts)
    made = accounts.UsersPlan(tuple(accounts.plan_accounts(plan.users, facts, kept)), kept)
    cordoned = cordons.newest(cordons.parse(seen.get("cordons")) for seen in facts.values())
    notes: list[str] = []
    files = ControlFiles.peek(plan, notes) if dry_run else ControlFiles.ensure(plan)
    variables = extravars(plan, node_facts.cores(facts), files, cordoned, made)
    stack = StackPlan()
    if plan.stack.install == "source":
        try:
            stack = prepare_stack(plan, facts, progress, offline=dry_run)
        except MpiclusterError as exc:
            if not dry_run:
                raise
            notes.append(f"the stack cannot be planned offline: {exc.message}")
        try:
            node_facts.check_no_job(facts, stack.installers, "switching to the new stack")
        except MpiclusterError as exc:
            if not dry_run:
                raise
            notes.append(exc.message)
        for line in describe_plan(stack):
            progress(line)
        variables |= stack.variables
    host_vars = rdma_host_vars(plan, facts, stack.host_vars)
    variables["mpicluster_applied_inputs"] = applied.inputs_digest(
        plan, variables, host_vars, facts
    )
    verdict = applied.judge(
        plan.cluster,
        variables["mpicluster_applied_inputs"],
        facts,
        sorted(set(stack.builders) | set(stack.installers) | set(stack.packages_to)),
    )
    return Survey(facts, made, cordoned, stack, variables, host_vars, verdict, tuple(notes))


def smoked(plan: ClusterPlan, cordoned: CordonState, progress: Progress) -> ClusterPlan:
    """The cluster the smoke test proves: every node that is not cordoned."""
    names = [n.name for n in plan.nodes]
    for name in names:
        if name in cordoned.cordons:
            progress(f"{cordoned.describe(name)}: left out of the smoke test")
    ready = cordoned.ready(names)
    return plan if ready == names or not ready else plan.only_nodes(ready)


def describe_plan(stack: StackPlan) -> list[str]:
    lines = []
    for group in stack.groups:
        head = f"Stack {group.fingerprint} ({group.platform.os}, {group.platform.arch}"
        head += f", CUDA {group.platform.cuda})" if group.platform.cuda else ")"
        if not group.install:
            lines.append(f"{head}: already active on {', '.join(group.nodes)}")
        elif group.builder:
            lines.append(
                f"{head}: build on {group.builder}, then install on {', '.join(group.install)}"
            )
        else:
            lines.append(f"{head}: install from the artifact cache on {', '.join(group.install)}")
        for name, why in sorted(group.repair.items()):
            lines.append(
                f"Stack {group.fingerprint}: {name}'s files differ from the stack's manifest "
                f"({why}): installed again"
            )
        spec = stack.variables.get("mpicluster_stack_groups", {}).get(group.fingerprint) or {}
        if group.builder and spec.get("site_ucx"):
            lines.append(
                f"Stack {group.fingerprint}: Open MPI built against the site's UCX in "
                f"{spec['site_ucx']} (stack.ucx.prefix)"
            )
        horovod = spec.get("horovod")
        if group.builder and spec.get("nccl") and horovod and not horovod["gpu_operations"]:
            lines.append(
                f"Stack {group.fingerprint}: Horovod without GPU operations (NCCL): the "
                "wheelhouse's PyTorch is a CPU build"
            )
        torch = spec.get("pytorch")
        if group.builder and torch:
            build = f"CUDA {torch.get('cuda_version') or '?'}" if torch["cuda"] else "CPU"
            lines.append(
                f"Stack {group.fingerprint}: PyTorch {torch.get('version')} ({build} build)"
            )
        if group.builder and torch and torch["nccl"] == "stack":
            lines.append(
                f"Stack {group.fingerprint}: PyTorch loads the stack's NCCL "
                f"(its wheel's NCCL {torch['wheel_nccl']} is replaced by a link)"
            )
    packages = stack.variables.get("mpicluster_python_packages") or {}
    for fingerprint, spec in packages.items():
        install = spec["install"]
        names = ", ".join(f"{n} {v}" for n, v in install.items()) or "none beyond the stack's"
        where = [n for g in stack.groups if g.fingerprint == fingerprint for n in g.nodes]
        needing = [n for n in where if n in stack.packages_to]
        state = f"to install on {', '.join(needing)}" if needing else "in place"
        lines.append(f"The cluster's packages {spec['digest']} ({names}): {state}")
    return lines + stack.notes
