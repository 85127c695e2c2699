"""`mpicluster run --setup 'CMD'`: a command run once on every node of the job, before
any rank starts (installing what the job needs, unpacking its data).

Each node runs `bash -c CMD` from the job's folder (--chdir, --sync's, else the MPI
user's home) with the environment its logins get (the cluster's PATH), all nodes at
once. Every node's output comes back tagged by node; a node that fails (or cannot run
it) stops the job before it starts, and is named.

Nothing here prints: lines go to a callback.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from mpicluster.cluster.inventory import Node
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.nodes import transport
from mpicluster.util import exitcodes
from mpicluster.util.text import last_line, telling_line

#: How long the setup may take on a node (it may install packages).
TIMEOUT = 3600.0

#: node, stream ("stdout"/"stderr"), line
OnLine = Callable[[str, str, str], None]


@dataclass
class SetupResult:
    command: str
    #: node -> its exit code (None: it could not be run there; `errors` says why)
    exits: dict[str, int | None] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    #: node -> its last line of output, for the one-line failure
    last: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def failed(self) -> list[str]:
        """The nodes where it did not exit 0, in the job's order."""
        return [node for node, code in self.exits.items() if code != 0]

    @property
    def ok(self) -> bool:
        return not self.failed

    @property
    def exit_code(self) -> int:
        """`run`'s exit code when the setup failed (mpicluster's own, not the nodes'):
        3 a node ran it and failed, else 4 it could not be run on a node."""
        if any(self.exits[node] is not None for node in self.failed):
            return exitcodes.HOSTS_FAILED
        return exitcodes.HOSTS_UNREACHABLE if self.failed else exitcodes.OK

    def why(self, node: str) -> str:
        """One line: how the setup failed on `node`."""
        if node in self.errors:
            return f"could not run it: {self.errors[node]}"
        said = self.last.get(node)
        return f"exit {self.exits[node]}" + (f": {said}" if said else "")

    def to_dict(self) -> dict:
        return {
            "command": self.command,
            "ok": self.ok,
            "exits": self.exits,
            "errors": self.errors,
            "failed": self.failed,
            "seconds": round(self.seconds, 1),
        }


def node_command(command: str, cwd: str | None) -> str:
    """What a node runs: bash -c CMD from the job's folder (relative: to the home)."""
    run = f"bash -c -- {shlex.quote(command)}"  # --: a command may start with "-"
    return f"cd -- {shlex.quote(cwd)} && {run}" if cwd else run


def run_setup(
    plan: ClusterPlan,
    nodes: list[Node],
    command: str,
    cwd: str | None,
    on_line: OnLine,
    *,
    timeout: float = TIMEOUT,
) -> SetupResult:
    """`command` on every node of `nodes` at once; once all have ended, each node's
    lines handed to `on_line`, node by node in the job's order."""
    started = time.monotonic()
    results = transport.run_everywhere(
        plan, node_command(command, cwd), nodes=nodes, timeout=timeout, workers=len(nodes)
    )
    outcome = SetupResult(command)
    for node in nodes:
        result = results[node.name]
        for stream, text in (("stdout", result.stdout), ("stderr", result.stderr)):
            for line in text.splitlines():
                on_line(node.name, stream, line)
        if result.error:
            outcome.exits[node.name] = None
            outcome.errors[node.name] = result.error
            continue
        outcome.exits[node.name] = result.exit_code
        outcome.last[node.name] = telling_line(result.stderr, "") or last_line(result.stdout)
    outcome.seconds = time.monotonic() - started
    return outcome
