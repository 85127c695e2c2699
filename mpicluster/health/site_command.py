"""The site's own command at each cordon and return (`health: {on_change: CMD}`): run on
the control machine that made the change, as `CMD NODE STATE REASON` (STATE: cordoned
or returned). Slurm's drains and returns run it on the node instead; both sides share
module_utils/mpicluster_sitecommand.py."""

from __future__ import annotations

from mpicluster.cluster.plan import ClusterPlan
from mpicluster.remote.plugins.module_utils.mpicluster_sitecommand import run_site_command


def on_change(plan: ClusterPlan, changes: list[tuple[str, str, str]]) -> list[str]:
    """Run the site's command once per (node, state, reason): what went wrong, one line
    each (never an error: the change is made)."""
    command = plan.health.on_change
    if not command:
        return []
    said = (
        run_site_command(command, node, state, reason, label=f"on_change for {node}")
        for node, state, reason in changes
    )
    return [line for line in said if line]
