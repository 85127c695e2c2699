"""`up --dry-run`: what `up` would do, node by node, with nothing changed on any node.

It probes the nodes as `up` does (read only), plans the run as `up` does (no key made,
no source downloaded), then reads how the files `up` writes are on each node now and
compares them with what `up` would write. No file's content is shown: names and states
only, so no secret reaches the terminal.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass, field
from typing import Any

from mpicluster import remote
from mpicluster.cluster.layout import BLOCK_BEGIN, BLOCK_END, ENVIRONMENT_FILE
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.nodes import facts as node_facts
from mpicluster.nodes import transport
from mpicluster.remote.plugins.module_utils import mpicluster_envblock as envblock
from mpicluster.up import applied
from mpicluster.up.provision import Progress, Survey, describe_plan, survey
from mpicluster.util import exitcodes
from mpicluster.util.text import last_line

#: A file's state against what `up` would write.
NEW, DIFFERS, MODE, UNREADABLE = "new", "differs", "mode", "unreadable"


@dataclass(frozen=True)
class FileChange:
    path: str
    #: NEW (missing), DIFFERS (its content), MODE (only its mode), UNREADABLE.
    state: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "state": self.state}


@dataclass
class NodePreview:
    name: str
    #: The node's system, as its probe found it (debian-12).
    system: str
    #: Why this node's record of the last `up` does not match this run ('' when it does).
    record: str
    #: The managed paths changed on the node since the last `up` (its probe's finding).
    changed_since: list[str] = field(default_factory=list)
    #: What happens to the MPI stack here, in words.
    stack: str = ""
    #: The files `up` writes whose content or mode would change.
    files: list[FileChange] = field(default_factory=list)
    #: How many of the files `up` writes are already as it would write them.
    files_same: int = 0
    #: The users' accounts: "make alice (uid 2001)", "lock bob (left the inventory)".
    users: list[str] = field(default_factory=list)
    cordon: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "system": self.system,
            "record": self.record or "matches this run",
            "changed_since": self.changed_since,
            "stack": self.stack,
            "files": [f.to_dict() for f in self.files],
            "files_same": self.files_same,
            "users": self.users,
            "cordon": self.cordon,
        }


@dataclass
class UpPreview:
    cluster: str
    nodes: list[NodePreview]
    #: Whether `up` would run the playbooks (False: only the smoke test would run).
    runs_playbooks: bool
    why: str
    #: The stack's plan and what `up` would do on this machine first, in lines.
    notes: list[str] = field(default_factory=list)
    exit_code: int = exitcodes.OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "cluster": self.cluster,
            "dry_run": True,
            "exit_code": self.exit_code,
            "runs_playbooks": self.runs_playbooks,
            "why": self.why,
            "notes": self.notes,
            "nodes": [node.to_dict() for node in self.nodes],
        }


def preview(plan: ClusterPlan, on_progress: Progress | None = None) -> UpPreview:
    """What `up` on `plan` would do; nothing is changed on any node (nor a key made or a
    source fetched on this machine)."""
    progress = on_progress or (lambda message: None)
    found = survey(plan, progress, dry_run=True)
    wanted = wanted_files(found)
    progress(f"Reading the {len(wanted) + 1} file(s) up writes on every node")
    states = file_states(plan, sorted(wanted))
    inputs = found.variables["mpicluster_applied_inputs"]
    nodes = []
    for node in plan.nodes:
        seen = found.facts.get(node.name) or {}
        record, changed = standing(plan.cluster, inputs, node.name, seen.get("applied"))
        now = states.get(node.name) or {}
        files = compare(wanted, now.get("files") or {})
        block = environment_change(found, now)
        if block is not None:
            files.insert(0, block)
        nodes.append(
            NodePreview(
                name=node.name,
                system=node_facts.release(seen),
                record=record,
                changed_since=changed,
                stack=stack_words(found, node.name, plan.stack.install),
                files=files,
                files_same=len(wanted) + 1 - len(files),
                users=user_words(found, node.name),
                cordon=found.cordoned.describe(node.name)
                if node.name in found.cordoned.cordons
                else "",
            )
        )
    verdict = found.verdict
    why = "" if verdict.unchanged else verdict.reason
    return UpPreview(
        plan.cluster,
        nodes,
        runs_playbooks=not verdict.unchanged,
        why=why,
        notes=[*found.control_notes, *describe_plan(found.stack)],
    )


def wanted_files(found: Survey) -> dict[str, tuple[str, str]]:
    """path -> (sha256, mode) of every file the hostfiles role writes, as `up` would."""
    return {
        entry["path"]: (hashlib.sha256(entry["content"].encode()).hexdigest(), entry["mode"])
        for entry in found.variables["mpicluster_config_files"]
    }


def file_states(plan: ClusterPlan, paths: list[str]) -> dict[str, dict[str, Any]]:
    """Each node's answer of remote/filestates.py: /etc/environment's text, and each
    path's sha256 and mode (a node that does not answer has none: the survey reached it
    a moment ago, so its absence is said in its files, not raised)."""
    argv = [remote.PYTHON, "-", ENVIRONMENT_FILE, *paths]
    command = " ".join(shlex.quote(a) for a in argv)
    results = transport.run_everywhere(plan, command, stdin=remote.script("filestates"), timeout=60)
    answers: dict[str, dict[str, Any]] = {}
    for name, result in results.items():
        if not result.ok:
            answers[name] = {"error": result.error or last_line(result.stderr, "no output")}
            continue
        try:
            answers[name] = json.loads(result.stdout)
        except json.JSONDecodeError:
            answers[name] = {"error": last_line(result.stdout, "no output")}
    return answers


def compare(
    wanted: dict[str, tuple[str, str]], now: dict[str, dict[str, str] | None]
) -> list[FileChange]:
    changes = []
    for path, (digest, mode) in sorted(wanted.items()):
        if path not in now:
            changes.append(FileChange(path, UNREADABLE))
            continue
        state = now[path]
        if state is None:
            changes.append(FileChange(path, NEW))
        elif "error" in state:
            changes.append(FileChange(path, UNREADABLE))
        elif state["sha256"] != digest:
            changes.append(FileChange(path, DIFFERS))
        elif int(state["mode"], 8) != int(mode, 8):
            changes.append(FileChange(path, MODE))
    return changes


def environment_change(found: Survey, now: dict[str, Any]) -> FileChange | None:
    """/etc/environment's block as `up` would write it (the node_environment role's own
    rendering, module_utils/mpicluster_envblock), against the node's file."""
    if "error" in now:
        return FileChange(ENVIRONMENT_FILE, UNREADABLE)
    text = now.get("text")
    layout = found.variables["mpicluster_layout"]
    try:
        new = envblock.render(
            text or "",
            BLOCK_BEGIN,
            BLOCK_END,
            layout["path_dirs"],
            layout["library_dirs"],
            found.variables["mpicluster_env_vars"],
            layout["system_path"],
        )
    except ValueError:
        return FileChange(ENVIRONMENT_FILE, DIFFERS)
    if text is None:
        return FileChange(ENVIRONMENT_FILE, NEW)
    return None if new == text else FileChange(ENVIRONMENT_FILE, DIFFERS)


def standing(
    cluster: str, inputs: dict[str, Any], name: str, seen: dict[str, Any] | None
) -> tuple[str, list[str]]:
    """(why this node's record of the last `up` does not match this run, '' when it
    does, judged on its own part of the inputs; the managed paths changed on it since)."""
    if isinstance(seen, dict) and isinstance(seen.get("inputs"), dict):
        was = seen["inputs"]
        seen = {**seen, "inputs": {**was, "nodes": {name: (was.get("nodes") or {}).get(name)}}}
    own = {**inputs, "nodes": {name: inputs["nodes"].get(name)}}
    why = applied.record_mismatch(cluster, own, name, seen)
    return why, list((seen or {}).get("changed") or [])


def stack_words(found: Survey, name: str, install: str) -> str:
    if install != "source":
        return "the distribution's MPI packages (apt installs what is missing)"
    for group in found.stack.groups:
        if name not in group.nodes:
            continue
        if group.builder == name:
            return f"stack {group.fingerprint}: built here, then installed"
        if name in group.install and group.builder:
            return f"stack {group.fingerprint}: installed once {group.builder} has built it"
        if name in group.install:
            return f"stack {group.fingerprint}: installed from the artifact cache"
        if name in group.repair:
            return f"stack {group.fingerprint}: installed again ({group.repair[name]})"
        packages = " (the cluster's packages installed)" if name in found.stack.packages_to else ""
        return f"stack {group.fingerprint}: already active{packages}"
    return "no stack planned (see the notes)"


def user_words(found: Survey, name: str) -> list[str]:
    words = []
    for account in found.users.accounts:
        if name in account.create_on:
            words.append(f"make {account.name} (uid {account.uid})")
    for leaving in found.users.leaving:
        words.append(f"lock {leaving} (no longer in the inventory; the home is kept)")
    return words
