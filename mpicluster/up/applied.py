"""`up`'s fast path: prove from one probe per node that the playbooks would change
nothing, and skip them.

A successful `up` ends on every node with a record of what it applied (the
applied_record role: digests of every managed path and package, and the digest of the
run's inputs, `inputs_digest` below). The next `up`'s probe recomputes the digests on
each node (module_utils/mpicluster_applied). The playbooks are skipped only when every
node has a record of this cluster, for the same inputs, with nothing changed since, and
the stack plan installs nothing; anything else runs every task, and says why.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from mpicluster import __version__, remote
from mpicluster.cluster.inventory import ResolvedSsh
from mpicluster.cluster.layout import APPLIED
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.util.paths import data_path

#: Files read whole: what decides how the nodes resolve each other's names (the
#: node_environment role adds /etc/hosts entries only for names that do not resolve).
WHOLE_FILES = ("/etc/hosts", "/etc/nsswitch.conf")

#: Extra vars that are not inputs of what a node ends up with: the build plan (the
#: fingerprint in each node's host vars is) and the digest itself.
NOT_INPUTS = ("mpicluster_stack_groups", "mpicluster_applied_inputs")
#: Host vars that are not either: the free space the preflight asks of a node that
#: installs or builds its stack (none once it is in use), the repair of a stack whose
#: files differed from its manifest (once repaired, there is none), and which nodes
#: still lack the cluster's packages and how their archive reaches them (once there,
#: none do).
NOT_HOST_INPUTS = (
    "preflight_min_free_kb",
    "mpicluster_stack_repair",
    "mpicluster_packages_needed",
    "mpicluster_packages_relay",
)


def watched(footprint: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the record takes digests of: the footprint, with WHOLE_FILES whole (and
    without what the MPI user cannot read)."""
    entries = [e for e in footprint if e["path"] not in WHOLE_FILES and not e.get("unwatched")]
    return entries + [{"path": path, "kind": "file"} for path in WHOLE_FILES]


@cache
def code_digest() -> str:
    """The playbooks, the templates they render, their modules and the programs they
    install, as one digest: a new mpicluster release runs every task once."""
    hasher = hashlib.sha256(__version__.encode())
    roots = (data_path("playbooks"), data_path("templates"), remote.PLUGINS, remote.RANK_PROGRAMS)
    for root in roots:
        for path in sorted(p for p in Path(root).rglob("*") if p.is_file()):
            if "__pycache__" in path.parts:
                continue
            hasher.update(str(path.relative_to(root)).encode() + b"\0")
            hasher.update(path.read_bytes() + b"\0")
    return hasher.hexdigest()


def inputs_digest(
    plan: ClusterPlan,
    variables: dict[str, Any],
    host_vars: dict[str, dict[str, Any]],
    facts: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """Everything the playbooks make a node from, as digests by part (so that the next
    `up` can say which changed): mpicluster's code; the inventory (the extra vars and
    become); per node, how it is reached, its host vars and its identity (names,
    addresses, host keys: what its peers' known_hosts and /etc/hosts hold)."""
    return {
        "code": code_digest(),
        "inventory": _digest(
            {
                "variables": {k: v for k, v in variables.items() if k not in NOT_INPUTS},
                "become": plan.logins.become,
            }
        ),
        "nodes": {
            node.name: _digest(
                {
                    "ssh": _ssh_of(plan.node_ssh(node)),
                    "host_vars": {
                        k: v
                        for k, v in host_vars.get(node.name, {}).items()
                        if k not in NOT_HOST_INPUTS
                    },
                    "identity": (facts.get(node.name) or {}).get("identity"),
                }
            )
            for node in plan.nodes
        },
    }


def _digest(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _ssh_of(ssh: ResolvedSsh) -> dict[str, Any]:
    return {"host": ssh.host, "user": ssh.user, "port": ssh.port}


@dataclass(frozen=True)
class Verdict:
    """Whether the playbooks can be skipped; if not, why (the first reason found)."""

    unchanged: bool
    reason: str = ""


def judge(
    cluster: str,
    inputs: dict[str, Any],
    facts: dict[str, dict[str, Any]],
    stack_changes: list[str],
) -> Verdict:
    """The fast path's verdict from every node's probe (`applied`), this run's inputs
    digest and the nodes the stack plan builds on or installs to."""
    if stack_changes:
        return Verdict(
            False,
            f"the MPI stack or the cluster's packages are to be installed on "
            f"{', '.join(stack_changes)}",
        )
    for name in sorted(facts):
        seen = facts[name].get("applied")
        why = record_mismatch(cluster, inputs, name, seen)
        if why:
            return Verdict(False, why)
        changed = (seen or {}).get("changed") or []
        if changed:
            more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
            return Verdict(False, f"{name}: {changed[0]} changed since the last up{more}")
    return Verdict(True)


def record_mismatch(
    cluster: str, inputs: dict[str, Any], name: str, seen: dict[str, Any] | None
) -> str:
    """Why node `name`'s record of the last up (`seen`, its probe's `applied`) is not one
    of this cluster for these inputs ('' when it is). `judge` asks it of every node with
    the whole cluster's inputs; `up --dry-run` with the node's own part of them."""
    if seen is None:
        return f"{name} has no record of an earlier up ({APPLIED})"
    if seen.get("cluster") != cluster:
        owner = seen.get("cluster")
        why = f"of cluster {owner}" if owner else "that cannot be read"
        return f"{name}'s record of the last up is one {why}"
    different = inputs_differ(seen.get("inputs"), inputs)
    return f"{different} changed since the last up" if different else ""


def inputs_differ(was: Any, now: dict[str, Any]) -> str:
    """What differs between the recorded inputs and this run's ('' for nothing)."""
    if not isinstance(was, dict) or set(was) != set(now):
        return "mpicluster (the record's form)"
    if was["code"] != now["code"]:
        return "mpicluster (its playbooks or the programs they install)"
    if was["inventory"] != now["inventory"]:
        return "the inventory (what up writes on the nodes)"
    if set(was["nodes"]) != set(now["nodes"]):
        return "the cluster's list of nodes"
    for name in sorted(now["nodes"]):
        if was["nodes"][name] != now["nodes"][name]:
            return f"{name} (how it is reached, its stack, names, addresses or host keys)"
    return ""
