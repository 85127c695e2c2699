"""The site's own command at each cordon and return (`health: {on_change: CMD}`): run on
the control machine that made the change, as `CMD NODE STATE REASON` (STATE: cordoned
or returned). Slurm's drains and returns run it on the node instead
(remote/slurmnode.py's on_change, the same words)."""

from __future__ import annotations

import subprocess

from mpicluster.cluster.plan import ClusterPlan

#: The longest the command may take (it is a hook: a page, a ticket, a webhook).
TIMEOUT = 15


def on_change(plan: ClusterPlan, changes: list[tuple[str, str, str]]) -> list[str]:
    """Run the site's command once per (node, state, reason): what went wrong, one line
    each (never an error: the change is made)."""
    command = plan.health.on_change
    if not command:
        return []
    problems = []
    for node, state, reason in changes:
        try:
            done = subprocess.run(
                ["/bin/sh", "-c", command + ' "$@"', "on_change", node, state, reason],
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            problems.append(f"on_change for {node}: {exc}")
            continue
        if done.returncode != 0:
            said = (done.stderr.strip().splitlines() or [""])[-1]
            problems.append(f"on_change for {node} exited {done.returncode}: {said}")
    return problems
