"""Plan a source install: group nodes by fingerprint, pick builders, find what to install.

For each fingerprint: if its artifact (the packed install tree) is in the control
machine's artifact cache, nothing is built; otherwise one node of the group builds
it (a node whose active stack has it intact only packs its tree; else a node that
needs it builds it). Nodes whose active stack already has the fingerprint are left
alone, which is what makes a second `up` change nothing, unless its files differ from
the stack's manifest: those are installed again from the pack (`repair`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mpicluster.cluster.lockfile import Source
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.stack.fingerprint import Platform, fingerprint, platform_of
from mpicluster.util.errors import MpiclusterError, UsageError


@dataclass
class Group:
    fingerprint: str
    platform: Platform
    document: dict[str, Any]
    nodes: list[str]
    install: list[str] = field(default_factory=list)  # nodes whose active stack differs
    #: nodes whose active stack is this one, with files that differ from its manifest
    #: (what differs, in words): installed again from the pack
    repair: dict[str, str] = field(default_factory=dict)
    builder: str | None = None  # set when the artifact must be built
    artifact: Path | None = None


def artifact_path(artifacts: Path, fp: str) -> Path:
    return artifacts / f"stack-{fp}.tar.gz"


def plan_builds(
    plan: ClusterPlan,
    facts: dict[str, dict[str, Any]],
    sources: list[Source],
    wheel_digests: dict[str, str],
    recipe: str,
    artifacts: Path,
) -> list[Group]:
    groups: dict[str, Group] = {}
    for node in plan.nodes:
        node_facts = facts[node.name]
        if node.gpus and not node_facts.get("cuda"):
            raise UsageError(
                f"{node.name}: the inventory says {node.gpus} GPU(s) but there is no CUDA "
                f"toolkit at {plan.stack.cuda_home}",
                hint="install CUDA there, or set stack.cuda_home",
            )
        if node_facts.get("gcc_error"):
            raise MpiclusterError(
                f"{node.name}: which gcc a build would use could not be read "
                f"({node_facts['gcc_error']}); it is part of the stack's fingerprint, so "
                "nothing was changed",
                hint="run this again (a node under heavy load answers slowly)",
            )
        platform = platform_of(node_facts, plan, node.gpus)
        fp, document = fingerprint(
            platform, sources, plan, wheel_digests[platform.wheel_target], recipe
        )
        group = groups.setdefault(fp, Group(fp, platform, document, []))
        group.nodes.append(node.name)
        current = node_facts.get("current") or {}
        if current.get("fingerprint") != fp:
            group.install.append(node.name)
        elif why := damage(node_facts):
            group.install.append(node.name)
            group.repair[node.name] = why
    for group in groups.values():
        group.artifact = artifact_path(artifacts, group.fingerprint)
        if group.install and not group.artifact.is_file():
            # a node with the stack intact packs its tree; else a node that needs it builds
            intact = [n for n in group.nodes if n not in group.install]
            group.builder = (intact or group.install)[0]
    return list(groups.values())


def damage(node_facts: dict[str, Any]) -> str:
    """What differs between a node's active stack and its manifest, in words ('' for
    nothing, or no manifest to tell by): from `up`'s probe (nodeinfo.stack_files)."""
    files = node_facts.get("current_files") or {}
    problems = files.get("problems") or []
    if not problems:
        return ""
    first = problems[0]
    counts = files.get("counts") or {}
    total = sum(counts.values()) or len(problems)
    what = f"{first['path']} {first['what']}" + (f" ({first['how']})" if first["how"] else "")
    return what + (f", {total - 1} more file(s)" if total > 1 else "")
