"""bench's measurements: the MPI program (remote/rank_programs/bench_mpi.py, installed by `up`
with the smoke test's programs) started from the head node with the stack's own
mpirun, one rank per node, in the inventory's order: rank i is node i. The allreduce's
mpirun asks each rank to say which PML it selected (the transport between nodes), as
the smoke test's does."""

from __future__ import annotations

import json
import shlex

from mpicluster.cluster import layout, mpirun
from mpicluster.cluster.mpi_settings import mpirun_network_args
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.nodes import head_mpi, transport
from mpicluster.smoke import PML_CHATTER, PML_VERBOSE, selected_pmls
from mpicluster.util import exitcodes
from mpicluster.util.errors import MpiclusterError
from mpicluster.util.text import json_line, last_line

PROGRAM = "bench_mpi.py"
#: The large message of the pairs' bandwidth, and the small one of their latency.
LARGE = 64 << 20
SMALL = 8
#: Allreduce sizes: 8 B to 128 MiB, x4 (13 sizes), and 256 MiB.
SWEEP = [*(8 << (2 * i) for i in range(13)), 256 << 20]
#: Allreduce sizes below this are shown by their latency (one call's time, in
#: microseconds), larger ones by their bandwidth: at 8 B to 32 KiB the time is the
#: latency, and the GB/s read 0.000 on any network.
LATENCY_BELOW = 64 << 10


def shows_latency(nbytes: int) -> bool:
    """Whether an allreduce of `nbytes` is shown by its latency, not its bandwidth."""
    return nbytes < LATENCY_BELOW


class MeasureFailed(MpiclusterError):
    """bench's MPI program did not report (mpirun failed, hung or printed no result)."""

    exit_code = exitcodes.CHECK_FAILED


def mpi_major(plan: ClusterPlan) -> int:
    try:
        return head_mpi.ask(plan).major
    except head_mpi.HeadMpiError as exc:
        raise MeasureFailed(
            f"{exc.problem} ({exc.node}): {exc.cause}",
            hint="run `mpicluster doctor` (bench needs a cluster `up` made)",
        ) from None


def command(plan: ClusterPlan, names: list[str], spec: dict, major: int) -> str:
    head = plan.nodes[0]
    runner = mpirun.Mpirun.of(plan.layout, major, root=plan.node_ssh(head).user == "root")
    placement = mpirun.hosts(dict.fromkeys(names, 1))
    options = [*mpirun_network_args(plan.network, major), "--bind-to", "none"]
    if spec["mode"] == "allreduce":  # every node at once: the PML they all selected
        options += PML_VERBOSE
    program = [plan.layout.python, f"{layout.SMOKE_DIR}/{PROGRAM}", json.dumps(spec)]
    return shlex.join(runner.argv(placement, options, program))


def run(plan: ClusterPlan, names: list[str], spec: dict, timeout: float, major: int) -> dict:
    """The program's report (rank 0's JSON line), with "pmls": the PMLs the ranks said
    they selected (the allreduce's; [] for the pairs'); MeasureFailed with mpirun's
    words."""
    head = plan.nodes[0]
    line = command(plan, names, spec, major)
    done = transport.run_on(
        plan, head, f"timeout -k 10 {int(timeout)} {line}", timeout=timeout + 30
    )
    if done.error:
        raise MeasureFailed(
            f"could not start mpirun on {head.name}: {done.error}",
            exit_code=exitcodes.HOSTS_UNREACHABLE,
        )
    if done.exit_code in (124, 137):
        raise MeasureFailed(
            f"bench's {spec['mode']} run did not end in {timeout:.0f} s on {', '.join(names)}",
            hint="run `mpicluster doctor`: a launch that hangs is what it explains",
        )
    report = json_line(done.stdout)
    if report is not None:
        return {**report, "pmls": selected_pmls(done.stdout + "\n" + done.stderr)}
    said = last_line(_without_chatter(done.stderr)) or last_line(_without_chatter(done.stdout))
    said = said or f"exit {done.exit_code}"
    raise MeasureFailed(
        f"bench's {spec['mode']} run on {', '.join(names)} printed no result: {said}",
        hint="run `mpicluster doctor` (it proves the same launch and explains failures)",
    )


def _without_chatter(text: str) -> str:
    """mpirun's output without the PML selection's verbose lines (not what failed)."""
    return "\n".join(line for line in text.splitlines() if not PML_CHATTER.search(line))
