"""mpicluster bench: whether the cluster is fast, and which node or link is not.

`run_bench(plan, ...)` (runner.py) measures node pairs (schedule.py: a ring and a sample, or all
pairs, in rounds of disjoint pairs) through the network alone (network.py: iperf3, the
baseline) and with the stack's MPI (measure.py), and an allreduce over all nodes;
judges the pairs (verdict.py: a second pass tells a slow node from a slow link) and
returns a BenchReport (report.py); it never prints. The command is
mpicluster/cli/bench.py, the rendering mpicluster/render/bench.py. `cordon_findings(report)`
(cordoning.py) is the report as `--cordon` reads it.
"""

from mpicluster.bench.cordoning import cordon_findings
from mpicluster.bench.report import BenchReport
from mpicluster.bench.runner import run_bench

__all__ = ["BenchReport", "cordon_findings", "run_bench"]
