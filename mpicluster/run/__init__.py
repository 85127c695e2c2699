"""`mpicluster run`: the user's job on the cluster: its command line, the code synced to
every node, the job started from the head node and stopped cleanly, the hang report.

Its face: `run_request(plan, JobRequest, control_env, Watchers)` runs one job from its
request to its `JobOutcome` (session.py); `inspect_ranks(plan, progress)` reads where the
ranks of running jobs are."""

from mpicluster.run.job_command import RunOptions
from mpicluster.run.session import JobOutcome, JobRequest, Watchers
from mpicluster.run.session import inspect as inspect_ranks
from mpicluster.run.session import run as run_request

__all__ = ["JobOutcome", "JobRequest", "RunOptions", "Watchers", "inspect_ranks", "run_request"]
