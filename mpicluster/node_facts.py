"""What every node is (platform, cores, CUDA, GPUs, the active stack), asked over SSH
in one round before anything changes. `up` plans from it; `fetch` and `hostfile` use
it when they need the nodes' platform or cores."""

from __future__ import annotations

import json
import shlex
from typing import Any

from mpicluster import exitcodes, remote, transport
from mpicluster.errors import MpiclusterError
from mpicluster.inventory import Inventory
from mpicluster.text import last_line

Facts = dict[str, dict[str, Any]]


class HostsUnreachable(MpiclusterError):
    """Nodes that could not be reached or did not answer; nothing was changed."""

    exit_code = exitcodes.HOSTS_UNREACHABLE

    def __init__(self, reasons: dict[str, str]):
        self.reasons = reasons
        first = next(iter(reasons.items()))
        more = f" (and {len(reasons) - 1} more)" if len(reasons) > 1 else ""
        super().__init__(f"{first[0]}: {first[1]}{more}; nothing was changed on any node")


def gather(inventory: Inventory) -> Facts:
    """Every node's facts (mpicluster/remote/nodeinfo.py); HostsUnreachable naming each
    node that cannot be reached and why."""
    command = " ".join(
        shlex.quote(a)
        for a in (remote.PYTHON, "-", inventory.stack.prefix, inventory.stack.cuda_home)
    )
    results = transport.run_everywhere(
        inventory, command, stdin=remote.script("nodeinfo"), timeout=60
    )
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
    if reasons:
        raise HostsUnreachable(reasons)
    return facts


def cores(facts: Facts) -> dict[str, int]:
    return {name: int(f.get("nproc") or 1) for name, f in facts.items()}
