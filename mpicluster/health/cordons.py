"""`mpicluster cordon` and `uncordon`: the cordon state (cluster/cordons.py) read from
every node, changed, and written whole to every node the command reaches, with the
hostfiles every node keeps rewritten without the cordoned nodes (as `up` writes them).
`doctor --cordon` and `bench --cordon` make every change their run calls for
(cluster/cordon_verdicts.py) the same way, in one read and one write."""

from __future__ import annotations

import getpass
import json
import shlex
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from mpicluster import remote
from mpicluster.cluster import cordon_verdicts, cordons
from mpicluster.cluster import hostfiles as hostfile
from mpicluster.cluster.cordon_verdicts import Decision, Findings
from mpicluster.cluster.cordons import Cordon, CordonState
from mpicluster.cluster.layout import CORDONS
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.health import site_command
from mpicluster.nodes import transport
from mpicluster.util.errors import MpiclusterError, UsageError

#: Writes each {path: text} of its stdin whole (a temporary file renamed onto it), 0644.
WRITER = (
    "import json, os, sys\n"
    "for path, text in json.load(sys.stdin).items():\n"
    "    partial = path + '.partial'\n"
    "    with open(partial, 'w', encoding='utf-8') as handle:\n"
    "        handle.write(text)\n"
    "    os.chmod(partial, 0o644)\n"
    "    os.replace(partial, path)\n"
)


@dataclass
class CordonResult:
    node: str
    #: "cordoned" or "returned"; "unchanged" when the node already was (or was not).
    action: str
    state: CordonState
    written: list[str] = field(default_factory=list)
    #: node -> why the new state could not be written there (it gets it at the next
    #: change or `up`: the newest version wins).
    missed: dict[str, str] = field(default_factory=dict)
    #: What went wrong running the site's on_change command, one line each.
    on_change: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "action": self.action,
            "version": self.state.version,
            "cordons": {n: c.to_dict() for n, c in self.state.cordons.items()},
            "written": self.written,
            "missed": self.missed,
            "on_change": self.on_change,
        }


def read_command() -> str:
    """Each node's cordon state, then its cores (for the hostfiles' slots)."""
    return f"cat {shlex.quote(CORDONS)} 2>/dev/null; echo @@nproc; nproc"


def read(plan: ClusterPlan) -> tuple[CordonState, dict[str, int], dict[str, str]]:
    """The newest state among the nodes, each reachable node's cores, and why the others
    could not be asked."""
    answers = transport.run_everywhere(
        plan, read_command(), timeout=plan.logins.connect_timeout + 20
    )
    states, cores, missed = [], {}, {}
    for name, answer in answers.items():
        if not answer.ok:
            missed[name] = answer.error or f"exit {answer.exit_code}: {answer.stderr.strip()}"
            continue
        text, _, count = answer.stdout.partition("@@nproc\n")
        states.append(cordons.parse(text))
        cores[name] = int(count.strip() or 1)
    return cordons.newest(states), cores, missed


def files(plan: ClusterPlan, state: CordonState, cores: dict[str, int]) -> dict[str, str]:
    """The state and the hostfiles without the cordoned nodes, as `up` writes them (the
    cordoned nodes' slots are not needed: an unreachable node can be cordoned)."""
    ready = state.ready([node.name for node in plan.nodes])
    try:
        slots = hostfile.slots(plan, cores, ready)
    except UsageError as exc:  # a node whose slots need its cores, and it did not answer
        raise MpiclusterError(
            f"the hostfiles cannot be written without every ready node's slots: {exc}",
            hint="give the unreachable node `slots:` in the inventory, or retry when it is back",
        ) from None
    return {CORDONS: state.to_json(), **hostfile.rendered(slots)}


def change(
    plan: ClusterPlan, node: str, reason: str | None, *, by: str = "operator"
) -> CordonResult:
    """Cordon `node` (a reason given) or return it (None)."""
    names = [n.name for n in plan.nodes]
    if node not in names:
        raise UsageError(f"{node!r}: no such node (one of: {', '.join(names)})")
    text = cordons.check_reason(reason) if reason is not None else None
    current, cores, missed = read(plan)
    if text is None and node not in current.cordons:
        return CordonResult(node, "unchanged", current, missed=missed)
    if text is not None:
        state = current.with_cordon(node, Cordon(text, time.time(), by, who()))
    else:
        state = current.without(node)
    result = CordonResult(node, "cordoned" if text is not None else "returned", state)
    result.written, result.missed = write_state(plan, state, cores, missed)
    if result.written:
        was = current.cordons.get(node)
        said = text if text is not None else (was.reason if was else "")
        result.on_change = site_command.on_change(plan, [(node, result.action, said)])
    return result


def who() -> str:
    """Who makes a change, and from where: user@host."""
    return f"{getpass.getuser()}@{socket.gethostname()}"


def write_state(
    plan: ClusterPlan, state: CordonState, cores: dict[str, int], missed: dict[str, str]
) -> tuple[list[str], dict[str, str]]:
    """`state` and its hostfiles written on every node that answered the read: the nodes
    written, and why each other one was not (`missed` first)."""
    reachable = [n for n in plan.nodes if n.name not in missed]
    written, not_written = [], dict(missed)
    for name, answer in write(plan, reachable, files(plan, state, cores)).items():
        if answer.ok:
            written.append(name)
        else:
            not_written[name] = answer.error or answer.stderr.strip()[-300:]
    return written, not_written


@dataclass
class AppliedFindings:
    """What `doctor --cordon` or `bench --cordon` changed (Decision: what it wanted)."""

    by: str
    decision: Decision
    written: list[str] = field(default_factory=list)
    missed: dict[str, str] = field(default_factory=dict)
    #: Why nothing could be written (then nothing changed).
    problem: str = ""
    #: What went wrong running the site's on_change command, one line each.
    on_change: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "by": self.by,
            **self.decision.to_dict(),
            "written": self.written,
            "missed": self.missed,
            "problem": self.problem,
            "on_change": self.on_change,
        }


def apply_findings(plan: ClusterPlan, found: Findings) -> AppliedFindings:
    """Cordon the nodes `found` fails and return the ones it cordoned that pass now
    (cordon_verdicts.decide), read from every node once and written to them once. A state
    that cannot be written is the result's `problem`, not an error: the run's own report
    stands."""
    current, cores, missed = read(plan)
    decision = cordon_verdicts.decide(found, current)
    result = AppliedFindings(found.by, decision, missed=dict(missed))
    if not decision.changes:
        return result
    state = decision.applied(current, by=found.by, who=who(), at=time.time())
    try:
        result.written, result.missed = write_state(plan, state, cores, missed)
    except MpiclusterError as exc:
        result.problem = str(exc)
        return result
    if result.written:
        changes = [(n, "cordoned", reason) for n, reason in decision.cordon.items()]
        changes += [(n, "returned", current.cordons[n].reason) for n in decision.give_back]
        result.on_change = site_command.on_change(plan, changes)
    return result


def write(plan: ClusterPlan, nodes: list, texts: dict[str, str]) -> transport.GroupResult:
    """Every file of `texts` written whole on each of `nodes`, as root."""
    program = f"{remote.PYTHON} -c {shlex.quote(WRITER)}"
    command = f"sudo -n {program}" if plan.logins.become else program
    return transport.run_everywhere(plan, command, nodes=nodes, stdin=json.dumps(texts))
