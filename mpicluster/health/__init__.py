"""Each node's health at a glance (`mpicluster nodes`): reachable or not, and the node's
own health check (remote/health.py, installed by `up`): its last result, or one run now.

`node_states(plan, check=...)` asks every node at once and returns a NodesReport;
`change(plan, node, reason)` cordons a node (or, reason None, returns it) on every node
(cordons.py); `apply_findings(plan, findings)` makes the changes a run of doctor or bench
calls for (their `--cordon`; cluster/cordon_verdicts.py decides). None of them prints.
The commands are mpicluster/cli/nodes.py, the rendering mpicluster/render/nodes.py."""

from mpicluster.health.cordons import AppliedFindings, CordonResult, apply_findings, change
from mpicluster.health.states import NodesReport, NodeState, node_states

__all__ = [
    "AppliedFindings",
    "CordonResult",
    "NodeState",
    "NodesReport",
    "apply_findings",
    "change",
    "node_states",
]
