"""`mpicluster up`: validate, probe, run the playbooks, then prove the cluster works."""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mpicluster import exitcodes, hostfile, transport
from mpicluster import layout as paths
from mpicluster.ansible_run import EventSink, PlaybookResult, run_playbook
from mpicluster.cluster_key import cluster_dir, ensure_cluster_key
from mpicluster.errors import MpiclusterError
from mpicluster.inventory import Inventory
from mpicluster.layout import Layout
from mpicluster.names import is_ip
from mpicluster.paths import data_path
from mpicluster.smoke import PROGRAMS, SmokeReport, run_smoke
from mpicluster.stack.prepare import StackPlan, prepare

STACK_PROGRAMS = Path(__file__).resolve().parent / "stack" / "programs"

Progress = Callable[[str], None]


class HostsUnreachable(MpiclusterError):
    exit_code = exitcodes.HOSTS_UNREACHABLE

    def __init__(self, reasons: dict[str, str]):
        self.reasons = reasons
        first = next(iter(reasons.items()))
        more = f" (and {len(reasons) - 1} more)" if len(reasons) > 1 else ""
        super().__init__(f"{first[0]}: {first[1]}{more}; nothing was changed on any node")


@dataclass
class UpResult:
    cluster: str
    playbook: PlaybookResult | None = None
    smoke: SmokeReport | None = None
    unreachable: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        if self.playbook is not None:
            if self.playbook.failed_hosts:
                return exitcodes.HOSTS_FAILED
            if self.playbook.unreachable_hosts:
                return exitcodes.HOSTS_UNREACHABLE
            if self.playbook.rc != 0:
                return exitcodes.FAILED
        if self.smoke is not None and not self.smoke.ok:
            return exitcodes.SMOKE_FAILED
        return exitcodes.OK


def probe_nodes(inventory: Inventory) -> dict[str, dict[str, Any]]:
    """Reach every node once before changing anything; return what each node is.

    Raises HostsUnreachable naming each node that cannot be reached and why.
    """
    script = (STACK_PROGRAMS / "node_facts.py").read_text()
    command = " ".join(
        shlex.quote(a)
        for a in (
            # absolute: the node's PATH may be the very thing up has to repair
            "/usr/bin/python3",
            "-",
            inventory.stack.prefix,
            inventory.stack.cuda_home,
        )
    )
    results = transport.run_everywhere(inventory, command, stdin=script, timeout=60)
    reasons = {}
    facts = {}
    for name, result in results.items():
        if not result.ok:
            reasons[name] = result.error or f"probe failed: {_last_line(result.stderr)}"
            continue
        try:
            facts[name] = json.loads(result.stdout)
        except json.JSONDecodeError:
            reasons[name] = f"probe printed no facts: {_last_line(result.stdout)}"
    if reasons:
        raise HostsUnreachable(reasons)
    return facts


def cores_of(facts: dict[str, dict[str, Any]]) -> dict[str, int]:
    return {name: int(f.get("nproc") or 1) for name, f in facts.items()}


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def extravars(inventory: Inventory, cores: dict[str, int]) -> dict[str, Any]:
    lay = Layout.of(inventory)
    key = ensure_cluster_key(inventory.cluster)
    node_slots = hostfile.slots(inventory, cores)
    selector = inventory.network.selector
    env_vars: dict[str, str] = {}
    if selector:
        env_vars["OMPI_MCA_btl_tcp_if_include"] = selector
        env_vars["OMPI_MCA_oob_tcp_if_include"] = selector  # Open MPI 4.x
        env_vars["PRTE_MCA_oob_tcp_if_include"] = selector  # Open MPI 5.x (PRRTE)
    if inventory.network.interface:
        env_vars["NCCL_SOCKET_IFNAME"] = inventory.network.interface
    nodes = []
    for node in inventory.nodes:
        ssh = inventory.node_ssh(node)
        ip = node.address if node.address and is_ip(node.address) else ""
        nodes.append(
            {
                "name": node.name,
                "host": node.host,
                "ip": ip,
                "port": ssh.port,
                "user": ssh.user,
                "gpus": node.gpus,
                "slots": node_slots[node.name],
            }
        )
    return {
        "mpicluster_cluster": inventory.cluster,
        "mpicluster_install": inventory.stack.install,
        "mpicluster_prefix": inventory.stack.prefix,
        "mpicluster_layout": {
            "current": lay.current,
            "mpi_bin": lay.mpi_bin,
            "mpi_lib": lay.mpi_lib or "",
            "python": lay.python,
            "path_dirs": lay.path_dirs,
            "library_dirs": lay.library_dirs,
            "system_path": paths.SYSTEM_PATH,
        },
        "mpicluster_nodes": nodes,
        "mpicluster_env_vars": env_vars,
        "mpicluster_cluster_key": str(key.private_path),
        "mpicluster_cluster_pubkey": key.public_line,
        "mpicluster_templates": str(data_path("templates")),
        "mpicluster_smoke_src": str(PROGRAMS),
        "mpicluster_hostfiles": {
            Path(paths.HOSTFILE).name: hostfile.render(node_slots, "openmpi"),
            Path(paths.HOSTFILE_MPICH).name: hostfile.render(node_slots, "mpich"),
            Path(paths.HOSTFILE_HOROVOD).name: hostfile.render(node_slots, "horovod"),
        },
        "mpicluster_cluster_json": {
            "cluster": inventory.cluster,
            "install": inventory.stack.install,
            "prefix": inventory.stack.prefix,
            "network": selector or "",
            "nodes": [{k: n[k] for k in ("name", "ip", "gpus", "slots")} for n in nodes],
        },
    }


@contextmanager
def cluster_lock(cluster: str) -> Iterator[None]:
    """One `up` per cluster at a time on this control machine."""
    directory = cluster_dir(cluster)
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / "up.lock").open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise MpiclusterError(
                f"another `mpicluster up` is running for cluster {cluster} ({holder})"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}\n")
        handle.flush()
        yield


def up(
    inventory: Inventory,
    *,
    on_event: EventSink | None = None,
    on_progress: Progress | None = None,
    smoke: bool = True,
) -> UpResult:
    progress = on_progress or (lambda message: None)
    started = time.monotonic()
    result = UpResult(inventory.cluster)
    with cluster_lock(inventory.cluster):
        progress(f"Reaching {len(inventory.nodes)} node(s) over SSH")
        facts = probe_nodes(inventory)
        variables = extravars(inventory, cores_of(facts))
        stack = StackPlan()
        if inventory.stack.install == "source":
            stack = prepare(inventory, facts, progress)
            for line in describe_plan(stack):
                progress(line)
            variables |= stack.variables
        progress("Running playbooks/site.yml")
        result.playbook = run_playbook(
            inventory,
            "site.yml",
            runs_dir=cluster_dir(inventory.cluster) / "runs",
            label="up",
            extravars=variables,
            host_vars=stack.host_vars,
            groups={"stack_builders": stack.builders, "stack_installers": stack.installers},
            on_event=on_event,
        )
        if result.playbook.ok and smoke:
            result.smoke = run_smoke(inventory, progress)
    result.seconds = time.monotonic() - started
    return result


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
    return lines
