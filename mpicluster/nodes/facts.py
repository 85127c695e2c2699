"""What every node is (platform, cores, CUDA, GPUs, the active stack), asked over SSH
in one round before anything changes. `up` plans from it; `fetch` and `hostfile` use
it when they need the nodes' platform or cores."""

from __future__ import annotations

import json
import shlex
from typing import Any

from mpicluster import remote
from mpicluster.cluster.layout import APPLIED
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.nodes import transport
from mpicluster.util import exitcodes
from mpicluster.util.errors import MpiclusterError, UsageError
from mpicluster.util.text import last_line

Facts = dict[str, dict[str, Any]]


class HostsUnreachable(MpiclusterError):
    """Nodes that could not be reached or did not answer; nothing was changed."""

    exit_code = exitcodes.HOSTS_UNREACHABLE

    def __init__(self, reasons: dict[str, str]):
        self.reasons = reasons
        first = next(iter(reasons.items()))
        more = f" (and {len(reasons) - 1} more)" if len(reasons) > 1 else ""
        super().__init__(f"{first[0]}: {first[1]}{more}; nothing was changed on any node")


def gather(
    plan: ClusterPlan,
    *,
    reachable_only: bool = False,
    applied: bool = False,
    users: list[str] | None = None,
) -> Facts:
    """Every node's facts (mpicluster/remote/nodeinfo.py); HostsUnreachable naming each
    node that cannot be reached and why (`reachable_only`: the facts of those that can
    be, for `down`, which reports the others itself; `applied`: with each node's identity
    and its standing against the record of the last `up`, for `up`'s fast path; `users`:
    names the nodes' directory is asked about)."""
    argv = [remote.PYTHON, "-", plan.stack.prefix, plan.stack.cuda_home]
    if applied:
        argv.append(APPLIED)
    command = " ".join(shlex.quote(a) for a in argv)
    if users:
        command = f"MPICLUSTER_USERS={shlex.quote(','.join(users))} {command}"
    if plan.stack.ucx.prefix:  # whether each node has the site's UCX (check_site_ucx)
        command = f"MPICLUSTER_SITE_UCX={shlex.quote(plan.stack.ucx.prefix)} {command}"
    results = transport.run_everywhere(plan, command, stdin=remote.script("nodeinfo"), timeout=60)
    reasons = {}
    facts = {}
    for name, result in results.items():
        if not result.ok:
            why = last_line(result.stderr, "no output")
            reasons[name] = result.error or f"probe failed: {why}"
            continue
        try:
            facts[name] = json.loads(result.stdout)
        except json.JSONDecodeError:
            reasons[name] = f"probe printed no facts: {last_line(result.stdout, 'no output')}"
    if reasons and not reachable_only:
        raise HostsUnreachable(reasons)
    return facts


def release(node_facts: dict[str, Any]) -> str:
    """The node's OS release as its /etc/os-release names it (`debian-12`): what a stack
    fingerprint is built for, and what doctor groups builds by."""
    found = node_facts.get("os") or {}
    return f"{found.get('id', '?')}-{found.get('version_id', '?')}"


def check_no_job(facts: Facts, nodes: list[str], change: str) -> None:
    """A MpiclusterError, before any change, when a job runs on the stack that `change`
    would replace or remove on one of `nodes`."""
    busy = {n: facts[n]["stack_users"] for n in nodes if (facts.get(n) or {}).get("stack_users")}
    if not busy:
        return
    node, users = next(iter(busy.items()))
    first = users[0]
    more = f" and {len(busy) - 1} more node(s)" if len(busy) > 1 else ""
    raise MpiclusterError(
        f"{node}: a job is running on the active stack (pid {first['pid']}: "
        f"{first['command'][:80]}){more}; {change} would pull the stack from under it; "
        "nothing was changed",
        hint="let the job end (or stop it), then run this again",
    )


def cores(facts: Facts) -> dict[str, int]:
    return {name: int(f.get("nproc") or 1) for name, f in facts.items()}


def check_gpus(plan: ClusterPlan, facts: Facts) -> None:
    """Every node the inventory gives GPUs shows exactly that many in nvidia-smi (unless
    stack.gpus_present is false); a MpiclusterError naming each node that does not."""
    if not plan.stack.gpus_present:
        return
    reasons = {}
    for node in plan.nodes:
        if not node.gpus:
            continue
        found = (facts.get(node.name) or {}).get("gpus") or {}
        if not found.get("ok"):
            reasons[node.name] = (
                f"the inventory says {node.gpus} GPU(s), but nvidia-smi "
                f"{'is not installed' if found.get('error') == 'nvidia-smi not found' else 'fails'}"
                f" ({found.get('error') or 'no answer'})"
            )
        elif found.get("count", 0) != node.gpus:
            # more than listed too: the hostfile's slots, the smoke test and `run
            # --per-node` would use the listed count and leave the others idle, silently
            names = ", ".join(found.get("names") or []) or "none"
            reasons[node.name] = (
                f"the inventory says {node.gpus} GPU(s), nvidia-smi shows "
                f"{found.get('count', 0)} ({names})"
            )
    if reasons:
        first = next(iter(reasons.items()))
        more = f" (and {len(reasons) - 1} more node(s))" if len(reasons) > 1 else ""
        raise MpiclusterError(
            f"{first[0]}: {first[1]}{more}; nothing was changed on any node",
            hint="install the NVIDIA driver, set the node's `gpus:` to what it has, or set "
            "stack.gpus_present: false to build the GPU stack on nodes without GPUs",
        )


def check_site_ucx(plan: ClusterPlan, facts: Facts) -> None:
    """Every node has the site's UCX the stack is built against (stack.ucx.prefix), as
    its probe found it; a UsageError naming the first that lacks it, before any change."""
    prefix = plan.stack.ucx.prefix
    if not prefix or plan.stack.install != "source":
        return
    lacking = [
        node.name
        for node in plan.nodes
        if not ((facts.get(node.name) or {}).get("site_ucx") or {}).get("libucp")
    ]
    if not lacking:
        return
    more = f" (and {len(lacking) - 1} more node(s))" if len(lacking) > 1 else ""
    raise UsageError(
        f"stack.ucx.prefix: {lacking[0]} has no {prefix}/lib/libucp.so*{more}: install the "
        "site's UCX there on every node, or remove stack.ucx.prefix to build UCX"
    )
