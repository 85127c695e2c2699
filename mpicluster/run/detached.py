"""`mpicluster run --detach`, and the commands that follow a detached job: `jobs`,
`logs`, `stop`, `collect`.

A detached job runs under the launcher's daemon on its head node (remote/job_runner.py:
the first node of --nodes, else the inventory's), in a session of its own, so it
outlives the `run` that started it and this machine. Its folder on the head
(~/.local/state/mpicluster/jobs/JOB, read by remote/jobs.py) is the job's record:
any machine with the inventory finds it, since `jobs` asks every node at once.

With a scheduler (`--via slurm`) the job is a Slurm batch job instead, submitted with
sbatch on the job's first node (where Slurm runs its batch script); its folder there
has the same files, and its state is Slurm's (remote/jobs.py asks squeue/scontrol):
queued, running, then as above; `stop` is scancel.

Nothing here prints.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import paramiko

from mpicluster import remote
from mpicluster.cluster import layout
from mpicluster.cluster.inventory import Node
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.nodes import transport
from mpicluster.run import hang_report, job, job_command
from mpicluster.run.job import JobResult, OnLine, Progress, Streams
from mpicluster.run.job_command import RunOptions
from mpicluster.util import exitcodes
from mpicluster.util.errors import MpiclusterError, UsageError
from mpicluster.util.text import telling_line

JOB_ID = re.compile(r"^[0-9a-f]{12}$")
START_TIMEOUT = 60
LIST_TIMEOUT = 30
#: remote/jobs.py waits up to 90 s for a stopped job's end
STOP_TIMEOUT = 150
ENDED = ("done", "failed", "stopped", "hung")


@dataclass
class DetachedJob:
    """A detached job as its head's record says (`state`: queued (Slurm's), running,
    done, failed, stopped, hung, or lost: no daemon and no end recorded)."""

    id: str
    node: str  # its head, where its folder is
    state: str
    program: list[str] = field(default_factory=list)  # as the user gave it
    command: str = ""
    started: float | None = None
    ended: float | None = None
    exit_code: int | None = None
    placement: dict[str, int] = field(default_factory=dict)
    ranks: int = 0
    cwd: str = ""
    log: str = ""
    mpi_major: int = 5
    collect: dict | None = None  # {"path", "from"} of run --collect
    hang_timeout: float | None = None
    hang: hang_report.HangReport | None = None
    was_running: bool | None = None  # for `stop`: whether there was a job to stop
    slurm: int | None = None  # its Slurm job id (a batch job)
    slurm_state: str = ""  # as squeue or scontrol said it

    @classmethod
    def from_answer(cls, node: str, answer: Mapping) -> DetachedJob:
        ended = answer.get("exit") or {}
        found = cls(
            id=str(answer.get("id", "")),
            node=node,
            state=str(answer.get("state", "lost")),
            program=[str(word) for word in answer.get("program") or []],
            command=str(answer.get("command", "")),
            started=answer.get("started"),
            ended=ended.get("ended"),
            exit_code=ended.get("code"),
            placement=dict(answer.get("placement") or {}),
            ranks=int(answer.get("ranks") or 0),
            cwd=str(answer.get("cwd", "")),
            log=str(answer.get("log", "")),
            mpi_major=int(answer.get("mpi_major") or 5),
            collect=answer.get("collect"),
            hang_timeout=answer.get("hang_timeout"),
            was_running=answer.get("was_running"),
            slurm=answer.get("slurm"),
            slurm_state=str(answer.get("slurm_state") or ended.get("slurm_state") or ""),
        )
        hang = answer.get("hang")
        if isinstance(hang, dict) and isinstance(hang.get("nodes"), dict):
            found.hang = hang_report.summarize(hang["nodes"])
        return found

    @property
    def running(self) -> bool:
        """Not ended yet (queued counts: it will run)."""
        return self.state in ("running", "queued")

    @property
    def seconds(self) -> float | None:
        if self.started is None:
            return None
        return (self.ended or time.time()) - self.started

    def node_of(self, rank: int) -> str | None:
        return job_command.node_of(self.placement, rank)

    def to_dict(self) -> dict:
        data = {k: v for k, v in self.__dict__.items() if k != "hang"}
        return data | {"hang": self.hang.to_dict() if self.hang else None}


def jobs_command(*args: str) -> str:
    """remote/jobs.py run on a node with `args` (its stdin left free for `follow`)."""
    words = [remote.PYTHON, "-c", remote.source("jobs"), *args]
    return " ".join(shlex.quote(word) for word in words)


def checked_id(job_id: str) -> str:
    if not JOB_ID.match(job_id):
        raise UsageError(
            f"{job_id!r} is not a job id (12 hex digits; `mpicluster jobs INVENTORY` lists them)"
        )
    return job_id


def start(
    plan: ClusterPlan,
    options: RunOptions,
    control_env: Mapping[str, str],
    progress: Progress,
    *,
    cwd: str | None = None,
    hang_timeout: float | None = None,
    keep_hung: bool = False,
    collect: dict | None = None,
) -> DetachedJob:
    """The job started under the head's launcher, detached; returns once it runs."""
    job_command.validate(plan, options, control_env)
    job_id = job.new_job_id()
    with job.on_head(plan, options) as (head, client):
        planned = job.planned_launch(client, plan, options, control_env, job_id)
        record = {
            "program": list(options.program),
            "command": planned.command(),
            "head": head.name,
            "placement": planned.placement,
            "ranks": planned.ranks,
            "mpi_major": planned.mpi_major,
            "collect": collect,
            "hang_timeout": hang_timeout,
        }
        folder = {"folder": f"{layout.DETACHED_JOBS}/{job_id}", "record": record}
        if planned.via == "slurm":
            folder["sbatch"] = job_command.allocation(planned.placement)
        detached: dict[str, object] = {"detach": folder}
        if hang_timeout is not None:
            detached["hang"] = {
                "timeout": hang_timeout,
                "stop": not keep_hung,
                "stacks": remote.script("stacks"),
                "pyspy": plan.layout.pyspy or "",
            }
        for line in planned.left_out:
            progress(line)
        progress(
            f"Starting job {job_id} detached on {planned.ranks} rank(s): "
            + ", ".join(f"{n} x{c}" for n, c in planned.placement.items())
        )
        command = job.remote_command(planned, cwd, job_id, head.name, detached)
        code, out, err = transport.run_command(client, command, START_TIMEOUT)
    if code != 0:
        raise MpiclusterError(f"{head.name}: the job did not start: {telling_line(err)}")
    try:
        answer = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise MpiclusterError(f"{head.name}: the launcher did not say the job runs") from None
    state = {"id": job_id, "state": "queued" if answer.get("slurm") else "running"}
    found = DetachedJob.from_answer(head.name, record | state | {"slurm": answer.get("slurm")})
    found.log, found.started = f"{answer.get('folder', '')}/output.log", time.time()
    return found


@dataclass
class Listing:
    """Every node's detached jobs (oldest first), and the nodes that could not say."""

    jobs: list[DetachedJob]
    #: node -> why its jobs could not be read
    problems: dict[str, str] = field(default_factory=dict)
    #: the nodes of `problems` that could not be reached at all
    unreached: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """4 a node could not be reached, else 1 a node's answer could not be read."""
        if self.unreached:
            return exitcodes.HOSTS_UNREACHABLE
        return exitcodes.FAILED if self.problems else exitcodes.OK


def list_jobs(plan: ClusterPlan) -> Listing:
    """Every node's detached jobs (oldest first), and the nodes that could not say."""
    results = transport.run_everywhere(plan, jobs_command("list"), timeout=LIST_TIMEOUT)
    found: list[DetachedJob] = []
    listing = Listing(found)
    for node in plan.nodes:
        result = results[node.name]
        if result.error:
            listing.unreached.append(node.name)
        if not result.ok:
            why = result.error or telling_line(result.stderr) or "no answer"
            listing.problems[node.name] = why
            continue
        try:
            answer = json.loads(result.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            listing.problems[node.name] = "its answer was not JSON"
            continue
        found += [DetachedJob.from_answer(node.name, entry) for entry in answer.get("jobs", [])]
    listing.jobs = sorted(found, key=lambda j: (j.started or 0, j.id))
    return listing


def find(plan: ClusterPlan, job_id: str) -> DetachedJob:
    """The job with this id, from its head's record: UsageError if every node answered
    and none has it; exit 4 (or 1) if a node that did not answer might."""
    checked_id(job_id)
    listing = list_jobs(plan)
    for found in listing.jobs:
        if found.id == job_id:
            return found
    missing = f"no job {job_id} on the nodes of {plan.cluster}"
    if listing.problems:
        node, why = next(iter(listing.problems.items()))
        raise MpiclusterError(
            f"{missing} that answered; {len(listing.problems)} node(s) did not ({node}: {why})",
            hint="run it again once every node answers",
            exit_code=listing.exit_code,
        )
    raise UsageError(f"{missing}; `mpicluster jobs INVENTORY` lists them")


def _node(plan: ClusterPlan, name: str) -> Node:
    return next(n for n in plan.nodes if n.name == name)


def follow(
    plan: ClusterPlan, found: DetachedJob, on_line: OnLine, *, wait: bool
) -> tuple[DetachedJob, JobResult]:
    """The job's output from its start through `on_line` (with `wait`, until it ends);
    then its state, and its result as `run` would have shown it."""
    node = _node(plan, found.node)
    sep = " " if found.mpi_major >= 5 else ""
    streams = Streams(on_line, found.node_of, sep, slurm=found.slurm is not None)
    with job.connected(plan, node) as client:
        channel = client.get_transport().open_session()
        channel.exec_command(jobs_command("follow", found.id, "1" if wait else "0"))
        err = _relay(channel, streams)
    streams.flush()
    try:
        answer = json.loads(err.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise MpiclusterError(f"{node.name}: no state of job {found.id} ({err[-200:]})") from None
    now = DetachedJob.from_answer(node.name, answer)
    return now, result_of(now, streams)


def _relay(channel: paramiko.Channel, streams: Streams) -> str:
    """The log's bytes into `streams` until the channel ends; what came on stderr."""
    err = bytearray()
    while True:
        if channel.recv_ready():
            streams.feed("stdout", channel.recv(65536))
        elif channel.recv_stderr_ready():
            err += channel.recv_stderr(65536)
        elif channel.exit_status_ready() and (channel.eof_received or channel.closed):
            break
        else:
            channel.status_event.wait(0.05)
    while channel.recv_stderr_ready():
        err += channel.recv_stderr(65536)
    return err.decode("utf-8", "replace")


def result_of(found: DetachedJob, streams: Streams) -> JobResult:
    """A detached job's end as `run` reports an attached one's (the failing rank named
    from its log)."""
    code = found.exit_code if found.exit_code is not None else 0
    stopped = found.state in ("stopped", "hung")
    result = JobResult(code, found.command, found.ranks, found.seconds or 0.0, stopped)
    result.job_id, result.hang = found.id, found.hang
    if found.state == "failed":
        job.blame(result, streams, found.node_of)
    return result


def stop(plan: ClusterPlan, found: DetachedJob) -> DetachedJob:
    """SIGTERM to the job's daemon, which ends every rank on every node; its state after."""
    node = _node(plan, found.node)
    result = transport.run_on(plan, node, jobs_command("stop", found.id), timeout=STOP_TIMEOUT)
    if not result.ok:
        why = result.error or telling_line(result.stderr) or f"exit {result.exit_code}"
        code = exitcodes.HOSTS_UNREACHABLE if result.error else exitcodes.FAILED
        raise MpiclusterError(f"{node.name}: could not stop job {found.id}: {why}", exit_code=code)
    try:
        answer = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise MpiclusterError(f"{node.name}: no state of job {found.id} after the stop") from None
    return DetachedJob.from_answer(node.name, answer)


def collect_nodes(plan: ClusterPlan, found: DetachedJob, where: str) -> list[Node]:
    """The nodes --collect copies from: the job's (`all`) or its head's (`head`)."""
    names = [found.node] if where == "head" else list(found.placement) or [found.node]
    return [n for n in plan.nodes if n.name in names]
