"""How a packed stack reaches the nodes that install it: the control machine copies it
to the first of them, which passes it on to the others node to node over the cluster's
own mesh (mpicluster/remote/relay.py), so the control machine's uplink carries it once
per fingerprint, not once per node.

The plan is a tree: node i passes it on to nodes FAN_OUT*i+1 ... FAN_OUT*i+FAN_OUT (in
the plan's order). Every hop streams as it receives, so the tree's depth costs only a
hop's latency per level; each node sends FAN_OUT copies at once (its uplink is shared by
them) and a node that is lost on the way costs only its own part of the tree, whose
nodes then get their copy from the control machine.
"""

from __future__ import annotations

from typing import Any

#: Copies each node sends on (1: a chain; 2: a binary tree; see benchmarks/stack_relay.py).
FAN_OUT = 2


def tree(nodes: list[str], fan_out: int = FAN_OUT) -> dict[str, Any] | None:
    """The relay plan over `nodes` (the first one gets the pack from the control
    machine): {"node": name, "children": [subtree, ...]}; None for no nodes."""
    if not nodes:
        return None
    if fan_out < 1:
        raise ValueError("fan_out must be at least 1")

    def subtree(index: int) -> dict[str, Any]:
        first = fan_out * index + 1
        children = range(first, min(first + fan_out, len(nodes)))
        return {"node": nodes[index], "children": [subtree(c) for c in children]}

    return subtree(0)


def depth(plan: dict[str, Any]) -> int:
    """Hops from the first node to the farthest one."""
    return max((1 + depth(child) for child in plan["children"]), default=0)
