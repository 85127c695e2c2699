"""`mpicluster down`: take back, on every node, exactly what `up` added.

On the nodes, playbooks/down.yml removes mpicluster's blocks and lines and gives each
edited file back as the journal `up` wrote before its first change says it was (byte for
byte where nobody edited it since), and removes what `up` created: the cluster key's
files, /etc/mpicluster, the ld.so.conf.d entry, the installed stacks (unless
`keep_stack`). On the control machine the cluster's key and state go too (unless
`keep_key`), once every node is down: a node that could not be reached keeps them so
that `down` can be run again.

`down --nodes NODE` takes one node out: the other nodes are provisioned again without it
(trust, known_hosts, ssh config, /etc/hosts and hostfiles no longer name it; the smoke
test proves the smaller cluster), then the node itself is taken down. Adding it back is
`up` with the full plan.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mpicluster import slurm
from mpicluster.cluster import node_choice
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.cluster.state import cluster_dir, cluster_lock
from mpicluster.nodes import facts as node_facts
from mpicluster.nodes.ansible_run import EventSink, PlaybookResult, run_playbook
from mpicluster.up import UpResult, provision
from mpicluster.util import exitcodes
from mpicluster.util.errors import UsageError

Progress = Callable[[str], None]


@dataclass
class DownResult:
    cluster: str
    nodes: list[str]
    playbook: PlaybookResult | None = None
    #: `down --nodes NODE`: the other nodes provisioned again without the node.
    rest: UpResult | None = None
    #: What happened to the control machine's key and state for this cluster.
    state: str = "kept"
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        if self.rest is not None and self.rest.exit_code != exitcodes.OK:
            return self.rest.exit_code
        return exitcodes.FAILED if self.playbook is None else self.playbook.exit_code

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "cluster": self.cluster,
            "nodes": self.nodes,
            "exit_code": self.exit_code,
            "seconds": round(self.seconds, 1),
            "state": self.state,
            "hosts": {},
        }
        if self.playbook is not None:
            data["hosts"] = {name: s.to_dict() for name, s in self.playbook.hosts.items()}
            data["command"] = self.playbook.command
            if self.state != "removed":
                data["log"] = str(self.playbook.log)
        if self.rest is not None:
            data["rest"] = self.rest.to_dict()
        return data


def extravars(plan: ClusterPlan, keep_stack: bool, purge_homes: bool = False) -> dict[str, Any]:
    """down.yml's inputs: what every playbook run takes (the same as up's), and down's."""
    return {
        **plan.playbook_inputs(),
        "teardown_keep_stack": keep_stack,
        "teardown_purge_homes": purge_homes,
        **slurm.teardown_vars(),
    }


def check_node(plan: ClusterPlan, node: str) -> None:
    names = [n.name for n in plan.nodes]
    node_choice.check(names, [node])
    if len(names) == 1:
        raise UsageError(f"--nodes {node}: the cluster's only node; use `mpicluster down`")


def describe(
    plan: ClusterPlan,
    *,
    node: str | None = None,
    keep_stack: bool = False,
    keep_key: bool = False,
    purge_homes: bool = False,
) -> list[str]:
    """What `down` with these options will do, in lines, before it reaches any node: what
    `down` asks its question about (and says without a terminal)."""
    if node is not None:
        check_node(plan, node)
    names = [n.name for n in plan.nodes]
    targets = [node] if node else names
    lines = [
        f"mpicluster down takes back what up added on {len(targets)} node(s) of cluster "
        f"{plan.cluster}: {', '.join(targets)}"
    ]
    if node is not None:
        others = [name for name in names if name != node]
        lines.append(
            f"first, the other {len(others)} node(s) ({', '.join(others)}) are provisioned "
            f"again without {node} (every task of up, then its smoke test): they stop "
            f"trusting and naming it"
        )
    lines.append(
        "the MPI stack under "
        f"{plan.stack.prefix}: " + ("kept (--keep-stack)" if keep_stack else "removed")
    )
    lines.append(
        "the cluster's SSH trust, /etc/environment's block, /etc/hosts' lines, "
        "/etc/mpicluster: removed (files up edited come back as they were)"
    )
    if plan.users:
        homes = (
            "removed (--purge-homes)"
            if purge_homes
            else "kept where they hold more than the skeleton (the account locked)"
        )
        lines.append(
            f"the users' accounts ({', '.join(u.name for u in plan.users)}): removed; "
            f"their homes {homes}"
        )
    if node is None:
        lines.append(
            f"this machine's key and state for the cluster ({cluster_dir(plan.cluster)}): "
            + ("kept (--keep-key)" if keep_key else "removed once every node is down")
        )
    return lines


def teardown(
    plan: ClusterPlan,
    *,
    node: str | None = None,
    keep_stack: bool = False,
    keep_key: bool = False,
    purge_homes: bool = False,
    on_event: EventSink | None = None,
    on_progress: Progress | None = None,
) -> DownResult:
    progress = on_progress or (lambda message: None)
    if node is not None:
        check_node(plan, node)
    started = time.monotonic()
    targets = plan.only_nodes([node]) if node else plan
    result = DownResult(plan.cluster, [n.name for n in targets.nodes])
    with cluster_lock(plan.cluster):
        if not keep_stack:
            progress(f"Looking for jobs on the stack on {len(targets.nodes)} node(s)")
            facts = node_facts.gather(targets, reachable_only=True)
            node_facts.check_no_job(facts, list(facts), "removing the stack")
        if node is not None:
            rest = plan.only_nodes([n.name for n in plan.nodes if n.name != node])
            progress(f"Provisioning the other {len(rest.nodes)} node(s) without {node}")
            result.rest = provision(rest, on_event=on_event, on_progress=progress, full=True)
            if result.rest.playbook is None or not result.rest.playbook.ok:
                # The others still trust the node: leave it as it is, say why, rerun.
                result.seconds = time.monotonic() - started
                return result
        progress(f"Running playbooks/down.yml on {len(targets.nodes)} node(s)")
        result.playbook = run_playbook(
            targets,
            "down.yml",
            runs_dir=cluster_dir(plan.cluster) / "runs",
            label="down",
            extravars=extravars(plan, keep_stack, purge_homes),
            on_event=on_event,
        )
        if node is None and result.playbook.ok and not keep_key:
            shutil.rmtree(cluster_dir(plan.cluster), ignore_errors=True)
            result.state = "removed"
    result.seconds = time.monotonic() - started
    return result
