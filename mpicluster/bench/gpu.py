"""bench on GPU nodes: NVIDIA's nccl-tests (built by `up` on `--cuda` stacks) across
every GPU node, one rank per GPU, with the stack's own mpirun: `all_reduce_perf`,
`all_gather_perf` and `sendrecv_perf` from 16 B to 256 MiB, results checked.

Each size's bus bandwidth (nccl-tests' own figure: what each link carries, comparable
between collectives and node counts) is set against the slowest link's baseline where
the GPUs span nodes; on one node NCCL never meets the network, and there is no ratio.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from mpicluster.cluster import mpirun
from mpicluster.cluster.mpi_settings import mpirun_network_args
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.nodes import transport
from mpicluster.smoke import (
    NCCL_TESTS_OK,
    gpu_placement,
    nccl_tests_exit_meaning,
    parse_nccl_tests,
)

TESTS = ("all_reduce_perf", "all_gather_perf", "sendrecv_perf")
#: 16 B to 256 MiB in steps of x4 (13 sizes), one GPU per rank, results checked.
ARGS = ("-b", "16", "-e", "256M", "-f", "4", "-g", "1", "-c", "1")
#: Seconds one test may take (13 sizes, 20 iterations each at most).
SECONDS = 300


@dataclass
class GpuFigure:
    """One nccl-tests program's run: each size's out-of-place bus bandwidth, checked."""

    test: str
    ranks: int = 0
    rows: list[dict] = field(default_factory=list)  # bytes, busbw_gbs, exact, efficiency
    avg_busbw_gbs: float | None = None
    problem: str = ""

    def to_dict(self) -> dict:
        return {
            "test": self.test,
            "ranks": self.ranks,
            "avg_busbw_gbs": self.avg_busbw_gbs,
            "rows": self.rows,
            "problem": self.problem,
        }


def wanted(plan: ClusterPlan) -> bool:
    """nccl-tests runs where the inventory has GPUs and `up` built nccl-tests there."""
    stack = plan.stack
    built = stack.install == "source" and stack.nccl_tests.enabled
    return bool(plan.gpu_nodes) and built


def command(plan: ClusterPlan, test: str, major: int) -> str:
    head = plan.nodes[0]
    runner = mpirun.Mpirun.of(plan.layout, major, root=plan.node_ssh(head).user == "root")
    options = mpirun_network_args(plan.network, major)
    program = [f"{plan.layout.mpi_bin}/{test}", *ARGS]
    return shlex.join(runner.argv(gpu_placement(plan), options, program))


def judge(test: str, stdout: str, exit_code: int | None, slowest: float | None) -> GpuFigure:
    """A test's figures from its standard output; `slowest`: the slowest link's baseline
    (GB/s), None where the ranks share one node."""
    parsed = parse_nccl_tests(stdout)
    found = GpuFigure(test, len(parsed.devices), avg_busbw_gbs=parsed.avg_busbw_gbs)
    for row in parsed.rows:
        bus = row.out_of_place.busbw_gbs
        found.rows.append(
            {
                "bytes": row.bytes,
                "busbw_gbs": bus,
                "exact": row.exact,
                "efficiency": round(bus / slowest, 3) if slowest else None,
            }
        )
    if parsed.failures:
        found.problem = parsed.failures[0]
    elif parsed.wrong_rows:
        found.problem = f"wrong values at {parsed.wrong_rows[0].bytes} bytes"
    elif exit_code != NCCL_TESTS_OK:
        found.problem = f"{test} exited {exit_code} ({nccl_tests_exit_meaning(exit_code)})"
    elif not parsed.complete:
        found.problem = f"{test} printed no result summary"
    return found


def run(plan: ClusterPlan, major: int, slowest: float | None) -> list[GpuFigure]:
    """Each test in turn from the head node (a failed one does not stop the others)."""
    spans = len(plan.gpu_nodes) > 1
    figures = []
    for test in TESTS:
        line = command(plan, test, major)
        done = transport.run_on(
            plan, plan.nodes[0], f"timeout -k 10 {SECONDS} {line}", timeout=SECONDS + 30
        )
        if done.error:
            figures.append(GpuFigure(test, problem=f"could not start mpirun: {done.error}"))
            continue
        figures.append(judge(test, done.stdout, done.exit_code, slowest if spans else None))
    return figures
