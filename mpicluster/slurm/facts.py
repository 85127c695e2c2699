"""What doctor's slurm check judges (scheduler: slurm), gathered over SSH as the MPI user:

- on every node: which of munged, slurmd and slurmctld run, slurm.conf's sha256,
  `slurmd -C`'s line, and whether a munge credential made on the controller decodes;
- on the controller: `scontrol ping`, slurm.conf's node lines, `sinfo`'s node states and
  `sinfo -R`'s reasons, and a real `srun --mpi=pmix` launch of the smoke test's
  allreduce over every node (when every node is idle): a PMIx plugin that is listed
  but cannot start ranks is only found by starting them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from mpicluster.cluster.plan import ClusterPlan
from mpicluster.nodes import transport
from mpicluster.slurm.config import SLURM_CONF
from mpicluster.slurm.smoke_steps import judge_world, not_ready, parse_sinfo, pmix_now

DAEMONS = ("munged", "slurmd", "slurmctld")
#: One round trip per node: key=value lines.
NODE_COMMAND = (
    "for d in " + " ".join(DAEMONS) + "; do "
    'if pgrep -x "$d" >/dev/null; then echo "daemon.$d=up"; else echo "daemon.$d=down"; fi; '
    "done; "
    f'echo "conf=$(sha256sum < {SLURM_CONF} 2>/dev/null | cut -c1-64)"; '
    'echo "hardware=$(slurmd -C 2>/dev/null | head -n 1)"; '
    'echo "munge=$(unmunge 2>&1 | grep -m1 -E "^STATUS|unmunge:" | tr -s " ")"'
)
#: One round trip to the controller: a credential, `scontrol ping`, slurm.conf, and
#: (when slurmctld answers) sinfo's states and reasons, in sections.
CONTROLLER_COMMAND = (
    'munge -n; echo @@; ping=$(timeout 20 scontrol ping 2>&1); echo "$ping"; echo @@; '
    f"cat {SLURM_CONF}; echo @@; "
    'case "$ping" in *"is UP"*) '
    "timeout 20 sinfo -h -N -o '%N|%T'; echo @@; timeout 20 sinfo -h -R -o '%n|%E';; esac"
)
LAUNCH_TIMEOUT = 90


@dataclass
class SlurmNode:
    reached: bool
    error: str = ""
    daemons: dict[str, bool] = field(default_factory=dict)
    conf: str = ""
    hardware: dict[str, int] = field(default_factory=dict)
    munge: str = ""


@dataclass
class SlurmFacts:
    controller: str
    credential_error: str = ""
    nodes: dict[str, SlurmNode] = field(default_factory=dict)
    ping: str = ""
    ping_ok: bool = False
    #: slurm.conf's node lines on the controller: {node: {CPUs: n, ...}}.
    configured: dict[str, dict[str, int]] = field(default_factory=dict)
    states: dict[str, str] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    #: The PMIx launch: None when not tried (why in launch_skipped).
    launch_ok: bool | None = None
    launch_problem: str = ""
    launch_cause: str = ""
    launch_skipped: str = ""
    launch_command: str = ""


def parse_hardware(line: str) -> dict[str, int]:
    """`slurmd -C`'s first line, or a slurm.conf NodeName line, as {key: number}."""
    return {key: int(value) for key, value in re.findall(r"\b(\w+)=([0-9]+)\b", line)}


def parse_node_lines(conf: str) -> dict[str, dict[str, int]]:
    nodes = {}
    for line in conf.splitlines():
        match = re.match(r"\s*NodeName=(\S+)\s", line)
        if match and match.group(1) != "DEFAULT":
            nodes[match.group(1)] = parse_hardware(line)
    return nodes


def parse_node(text: str) -> SlurmNode:
    node = SlurmNode(True)
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.startswith("daemon."):
            node.daemons[key.removeprefix("daemon.")] = value.strip() == "up"
        elif key == "conf":
            node.conf = value.strip()
        elif key == "hardware":
            node.hardware = parse_hardware(value)
        elif key == "munge":
            node.munge = value.strip()
    return node


def gather(plan: ClusterPlan) -> SlurmFacts:
    controller = plan.controller or plan.nodes[0]
    found = SlurmFacts(controller.name)
    said = transport.run_on(plan, controller, CONTROLLER_COMMAND, timeout=90)
    credential, ping, conf, states, reasons = (said.stdout.split("@@\n") + [""] * 5)[:5]
    credential = credential.strip()
    if said.error or not credential.startswith("MUNGE:"):
        found.credential_error = said.error or said.stderr.strip()[-200:] or "no credential"
        credential = ""
    results = transport.run_everywhere(plan, NODE_COMMAND, timeout=30, stdin=credential + "\n")
    for node in plan.nodes:
        result = results[node.name]
        if result.error:
            found.nodes[node.name] = SlurmNode(False, error=result.error)
        else:
            found.nodes[node.name] = parse_node(result.stdout)
    found.ping = ping.strip() or said.error
    found.ping_ok = "is UP" in ping
    found.configured = parse_node_lines(conf)
    if not found.ping_ok:
        found.launch_skipped = "slurmctld does not answer"
        return found
    found.states, found.reasons = parse_sinfo(states), parse_sinfo(reasons)
    # A job sent to a node whose slurmd is dead stays COMPLETING there, and the node
    # with it, until Slurm declares the node down (SlurmdTimeout, 5 minutes): no launch.
    dead = [
        f"{daemon} is not running on {name}"
        for name, node in found.nodes.items()
        for daemon in ("munged", "slurmd")
        if node.reached and not node.daemons.get(daemon)
    ]
    busy = not_ready(found.states, [n.name for n in plan.nodes])
    if dead:
        found.launch_skipped = "; ".join(dead)
        return found
    if busy:
        found.launch_skipped = "not every node is idle: " + ", ".join(
            f"{name} {state}" for name, state in busy.items()
        )
        return found
    found.launch_command = pmix_now(plan)
    launched = transport.run_on(
        plan,
        controller,
        f"timeout -k 5 {LAUNCH_TIMEOUT} {found.launch_command}",
        timeout=LAUNCH_TIMEOUT + 20,
    )
    problem, cause = judge_world(launched.stdout, len(plan.nodes))
    found.launch_ok = launched.exit_code == 0 and not problem
    if not found.launch_ok:
        said = (launched.error or launched.stderr or launched.stdout).strip().splitlines()
        found.launch_problem = (
            problem
            if launched.exit_code == 0
            else (f"exited {launched.exit_code}: " + (said[-1] if said else "no output"))
        )
        found.launch_cause = cause
    return found
