"""`local up/status`: each node, its address, state and whether SSH reaches it."""

from __future__ import annotations

from rich.markup import escape

from mpicluster.local.cluster import LocalCluster
from mpicluster.render.display import Display, styled


def show_local(display: Display, result: LocalCluster) -> None:
    rows = [
        [
            escape(n.name),
            escape(n.address),
            escape(n.state),
            styled("reachable") if n.reachable else styled("fail", "unreachable"),
            escape(n.hostname or ""),
            escape(n.detail),
        ]
        for n in result.nodes
    ]
    display.table(
        escape(
            f"local cluster {result.spec.name} ({result.spec.provider}, {result.spec.subnet}"
            + (f", CUDA from {result.spec.cuda})" if result.spec.cuda else ")")
        ),
        ["node", "address", "state", "ssh", "hostname", "detail"],
        rows,
    )
