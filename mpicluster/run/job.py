"""`mpicluster run`: start a job on the head node, stream its output, stop it cleanly.

The control machine only starts the job and relays it: mpirun runs on the head node
(the first of the inventory's nodes, or of --nodes) under mpicluster's launcher
(remote/job_runner.py), reached over the inventory's SSH settings, and launches the
ranks over the cluster's own trust. Ctrl-C here (or SIGTERM) tells the launcher to
stop the job; if this machine goes away, the launcher stops it too.

Nothing here prints: output lines and progress go to callbacks.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

from mpicluster import remote
from mpicluster.cluster import cordons, layout
from mpicluster.cluster.cordons import CordonState
from mpicluster.cluster.inventory import Node
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.nodes import head_mpi, transport
from mpicluster.run import job_command, sync
from mpicluster.run.hang_report import HangReport
from mpicluster.run.job_command import HeadFacts, Launch, RunOptions
from mpicluster.util import exitcodes
from mpicluster.util.errors import MpiclusterError

TAIL = 10  # lines kept per rank for the failure report
STOP_WAIT = 30.0  # how long a stopped job may take to end before the channel is closed
HUNG = exitcodes.HANG_TIMEOUT  # the exit code of a job stopped by --hang-timeout
FAILED_RANK = (  # searched in mpirun's own lines, joined (it wraps its messages)
    re.compile(r"MPI_ABORT\s+was\s+invoked\s+on\s+rank\s+(\d+)"),
    re.compile(r"process\s+rank\s+(\d+)\s+with\s+PID\s+\d+\s+on\s+node\s+\S+\s+exited\s+on"),
    re.compile(r"Process name:\s*\[.*?(\d+)\]\s*$", re.MULTILINE),
    # srun (--via slurm): "srun: error: node2: task 1: Exited with exit code 3" (the
    # ranks it then ends are "Killed" or "Terminated": not the one that failed)
    re.compile(r"srun: error: \S+: tasks? (\d+)[-,\d]*: Exited with exit code [1-9]"),
)

#: (rank, its node) or (None, None) for the launcher's own lines, stream, text
OnLine = Callable[[int | None, str | None, str, str], None]
Progress = Callable[[str], None]


@dataclass
class HangWatch:
    """What to do when the job prints nothing for `timeout` seconds: read every rank's
    stack (`inspect`), hand the report to `on_report`, then stop the job or keep it."""

    timeout: float
    inspect: Callable[[str], HangReport]  # job id -> report
    on_report: Callable[[HangReport], None]
    stop: bool = True


@dataclass
class JobResult:
    exit_code: int
    command: str
    ranks: int
    seconds: float
    stopped: bool = False
    failed_rank: int | None = None
    failed_node: str | None = None
    tail: list[str] = field(default_factory=list)  # the failed rank's last lines
    hang: HangReport | None = None  # the last hang report, when there was one
    job_id: str = ""  # the launcher's id of the job ("" for a dry run)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def to_dict(self) -> dict:
        hang = self.hang.to_dict() if self.hang else None
        return self.__dict__ | {"ok": self.ok, "hang": hang}


def head_node(plan: ClusterPlan, options: RunOptions) -> Node:
    """Where mpirun runs: the first node of --nodes, else the inventory's first. srun
    and sbatch run on the job's first node in the inventory's order: Slurm's, where it
    runs a batch job's script (a detached job's folder is there)."""
    job_command.check_hosts(plan, options.hosts)
    if options.via == "slurm":
        return job_nodes(plan, options)[0]
    if options.hosts:
        return next(n for n in plan.nodes if n.name == options.hosts[0])
    return plan.nodes[0]


def job_nodes(plan: ClusterPlan, options: RunOptions) -> list[Node]:
    """The nodes a job uses (--nodes, else all), in the inventory's order."""
    chosen = set(options.hosts) if options.hosts else {n.name for n in plan.nodes}
    return [n for n in plan.nodes if n.name in chosen]


def sync_nodes(
    plan: ClusterPlan,
    options: RunOptions,
    source: Path,
    to: str | None,
    progress: Progress,
) -> sync.SyncResult:
    """The job's folder on every node it runs on (the head first, then the others)."""
    head = head_node(plan, options)
    others = [n for n in job_nodes(plan, options) if n.name != head.name]
    destination = sync.destination_for(source, to)
    return sync.sync_tree(plan, source, destination, head, others, progress)


#: A free TCP port on the head, for PyTorch's rendezvous.
FREE_PORT = (
    'import os, socket; s = socket.socket(); s.bind(("", 0)); '
    'os.write(1, b"%d" % s.getsockname()[1])'
)
#: After the head's MPI (nodes/head_mpi.py), in the same round trip before the launch: a
#: free port for PyTorch's rendezvous, the user, and the cordoned nodes.
FACTS_TAIL = (
    f"; echo @@port; {remote.PYTHON} -c {shlex.quote(FREE_PORT)}; echo; echo @@user; id -un"
    f"; echo @@cordons; cat {shlex.quote(layout.CORDONS)} 2>/dev/null; true"
)


def facts_command(mpi_bin: str) -> str:
    return head_mpi.command(mpi_bin) + FACTS_TAIL


def parse_head_facts(node: str, text: str) -> HeadFacts:
    mpi_part, _, rest = text.partition("@@port\n")
    port, cut, tail = rest.partition("@@user\n")
    user, _, cordoned = tail.partition("@@cordons\n")
    if not cut:
        raise MpiclusterError("the head node's answer was cut short", hint="run mpicluster doctor")
    if not head_mpi.slots(mpi_part):
        raise MpiclusterError(
            f"the head node has no hostfile at {layout.HOSTFILE}",
            hint="run `mpicluster up INVENTORY` first",
        )
    mpi = head_mpi.parse(node, mpi_part)
    state = cordons.parse(cordoned) or CordonState()
    return HeadFacts(mpi.slots, mpi.major, int(port.strip() or 0), user.strip(), state)


def remote_command(
    plan: Launch,
    cwd: str | None,
    job_id: str = "",
    head: str = "",
    detached: Mapping[str, object] | None = None,
) -> str:
    """The launcher's command line; with the job's id, a stop also ends what mpirun
    left of the job on every node it used (remote/reap.py); `detached` (the spec's
    "detach" and "hang") starts it detached, the id after the spec."""
    spec = {"argv": plan.argv, "env": plan.env, "cwd": cwd}
    if job_id:
        spec.update(job=job_id, head=head, hosts=list(plan.placement), reap=remote.script("reap"))
    spec.update(detached or {})
    encoded = base64.b64encode(json.dumps(spec).encode()).decode()
    # not on stdin (remote.script): the launcher's stdin is the control channel
    line = f"{remote.PYTHON} -c {shlex.quote(remote.source('job_runner'))} {encoded}"
    return f"{line} {job_id}" if detached else line


def failed_rank(lines: list[str]) -> int | None:
    text = "\n".join(lines)
    for pattern in FAILED_RANK:
        match = pattern.search(text)
        if match:
            return int(match.group(1))
    return None


class Streams:
    """Reassembles the ranks' lines from Open MPI's tagged output, keeps each rank's last
    lines and the launcher's own (mpirun's messages).

    Open MPI tags each chunk a rank writes, not each line: a line Python writes unbuffered
    in two pieces arrives as `[1,0]<stdout>:a[1,2]<stdout>:x[1,0]<stdout>: b` (4.x puts
    no space after the tag; `sep` is what the series puts there). A rank's text is held
    until its newline.
    """

    def __init__(
        self,
        on_line: OnLine,
        node_of: Callable[[int], str | None],
        sep: str = "",
        *,
        slurm: bool = False,
    ) -> None:
        self.on_line = on_line
        self.node_of = node_of
        self.tag = re.compile(r"\[\d+,(\d+)\]<(stdout|stderr)>:" + re.escape(sep))
        if slurm:  # srun --label: whole lines, "  0: text", on the rank's own stream
            self.tag = re.compile(r"^ *(\d+)(): ")
        self.partial = {"stdout": b"", "stderr": b""}
        self.open: dict[tuple[int | None, str], str] = {}  # (rank, stream) -> text so far
        self.tails: dict[int, deque[str]] = {}
        self.untagged: list[str] = []
        self.raised: list[int] = []  # ranks that printed a Python traceback, in order
        #: rank -> its last lines as they were when its first traceback ended (the
        #: exception's line): what the failure shows, not MPI's abort banner after it
        self.at_traceback: dict[int, list[str]] = {}
        self._in_traceback: set[int] = set()

    def feed(self, stream: str, data: bytes) -> None:
        data = self.partial[stream] + data
        *lines, self.partial[stream] = data.split(b"\n")
        for raw in lines:
            self._raw_line(stream, raw.decode("utf-8", "replace"))

    def flush(self) -> None:
        for stream, rest in self.partial.items():
            if rest:
                self._raw_line(stream, rest.decode("utf-8", "replace"))
            self.partial[stream] = b""
        for (rank, stream), text in list(self.open.items()):
            if text:
                self._emit(rank, stream, text)
        self.open.clear()

    def _raw_line(self, stream: str, raw: str) -> None:
        """One newline-ended piece of the channel: chunks of one or more ranks; the
        newline ends the last chunk's line."""
        pieces: list[tuple[int | None, str, str]] = []
        at, key = 0, (None, stream)
        for match in self.tag.finditer(raw):
            if match.start() > at:
                pieces.append((*key, raw[at : match.start()]))
            key = (int(match.group(1)), match.group(2) or stream)
            at = match.end()
        pieces.append((*key, raw[at:]))
        *continued, (rank, kind, last) = pieces
        for r, k, text in continued:
            self.open[(r, k)] = self.open.get((r, k), "") + text
        self._emit(rank, kind, self.open.pop((rank, kind), "") + last)

    def _emit(self, rank: int | None, stream: str, text: str) -> None:
        if rank is None:
            self.untagged.append(text)
            self.on_line(None, None, stream, text)
            return
        tail = self.tails.setdefault(rank, deque(maxlen=TAIL))
        tail.append(text)
        if text.startswith("Traceback (most recent call last)") and rank not in self.raised:
            self.raised.append(rank)
            self._in_traceback.add(rank)
        elif rank in self._in_traceback and text and not text[0].isspace():
            self._in_traceback.discard(rank)
            self.at_traceback[rank] = list(tail)
        self.on_line(rank, self.node_of(rank), stream, text)


@contextmanager
def connected(plan: ClusterPlan, node: Node) -> Iterator[paramiko.SSHClient]:
    """A connection to one node; what goes wrong on it is a one-line error."""
    ssh = plan.node_ssh(node)
    unreachable = exitcodes.HOSTS_UNREACHABLE
    try:
        conn = transport.connect(ssh)
    except Exception as exc:  # every failure to connect is a one-line error
        said = f"{node.name}: {transport.describe_error(ssh, exc)}"
        raise MpiclusterError(said, exit_code=unreachable) from None
    try:
        yield conn.client
    except (paramiko.SSHException, OSError, TimeoutError) as exc:
        said = f"{node.name}: {transport.describe_error(ssh, exc)}"
        raise MpiclusterError(said, exit_code=unreachable) from None
    finally:
        transport.close(conn)


@contextmanager
def on_head(plan: ClusterPlan, options: RunOptions) -> Iterator[tuple[Node, paramiko.SSHClient]]:
    """A connection to the job's head node (`connected`)."""
    head = head_node(plan, options)
    with connected(plan, head) as client:
        yield head, client


def planned_launch(
    client: paramiko.SSHClient,
    plan: ClusterPlan,
    options: RunOptions,
    control_env: Mapping[str, str],
    job_id: str,
) -> Launch:
    """The job's command line on the head, from what the head reports."""
    _, out, _ = transport.run_command(client, facts_command(plan.layout.mpi_bin), 30)
    facts = parse_head_facts(head_node(plan, options).name, out)
    return job_command.build(plan, options, facts, control_env, job_id=job_id)


def new_job_id() -> str:
    return uuid.uuid4().hex[:12]


def run_job(
    plan: ClusterPlan,
    options: RunOptions,
    control_env: Mapping[str, str],
    on_line: OnLine,
    progress: Progress,
    *,
    cwd: str | None = None,
    dry_run: bool = False,
    hang: HangWatch | None = None,
) -> JobResult:
    job_command.validate(plan, options, control_env)
    started = time.monotonic()
    with on_head(plan, options) as (head, client):
        job_id = "" if dry_run else new_job_id()
        job = planned_launch(client, plan, options, control_env, job_id)
        if dry_run:
            return JobResult(0, job.command(), job.ranks, time.monotonic() - started)
        for line in job.left_out:
            progress(line)
        progress(
            f"Running on {job.ranks} rank(s): "
            + ", ".join(f"{n} x{c}" for n, c in job.placement.items())
        )
        return _stream(client, job, cwd, on_line, started, hang, job_id, head.name)


def _stream(
    client: paramiko.SSHClient,
    plan: Launch,
    cwd: str | None,
    on_line: OnLine,
    started: float,
    hang: HangWatch | None = None,
    job_id: str = "",
    head: str = "",
) -> JobResult:
    channel = client.get_transport().open_session()
    channel.exec_command(remote_command(plan, cwd, job_id, head))
    streams = Streams(
        on_line, plan.node_of, " " if plan.mpi_major >= 5 else "", slurm=plan.via == "slurm"
    )
    watch = _Watch(channel, streams, hang, job_id)
    while True:
        try:
            if not watch.step():
                break
        except KeyboardInterrupt:
            if not watch.interrupt():
                break
    streams.flush()
    return _outcome(watch, plan, started)


@dataclass
class _Watch:
    """One running job's channel: its output relayed, a stop asked (Ctrl-C, a hang)."""

    channel: paramiko.Channel
    streams: Streams
    hang: HangWatch | None
    job_id: str
    stopped: bool = False
    hung: bool = False
    stop_deadline: float | None = None
    report: HangReport | None = None
    quiet_since: float = field(default_factory=time.monotonic)

    def step(self) -> bool:
        """Relay what arrived, or wait a moment; False once the job has ended."""
        channel = self.channel
        if channel.recv_ready():
            self.streams.feed("stdout", channel.recv(65536))
            self.quiet_since = time.monotonic()
        elif channel.recv_stderr_ready():
            self.streams.feed("stderr", channel.recv_stderr(65536))
            self.quiet_since = time.monotonic()
        elif channel.exit_status_ready() and (channel.eof_received or channel.closed):
            return False
        elif self.stop_deadline and time.monotonic() > self.stop_deadline:
            channel.close()  # the launcher sees its stdin end and kills the job
            return False
        elif self._quiet_too_long():
            self._report_hang()
        else:
            channel.status_event.wait(0.02)
        return True

    def _quiet_too_long(self) -> bool:
        return bool(
            self.hang
            and not self.stop_deadline
            and time.monotonic() - self.quiet_since > self.hang.timeout
        )

    def _report_hang(self) -> None:
        hang = self.hang
        if hang is None:
            return
        self.report = hang.inspect(self.job_id)
        hang.on_report(self.report)
        self.quiet_since = time.monotonic()  # keep: report again after another quiet spell
        if hang.stop:
            self.hung, self.stop_deadline = True, time.monotonic() + STOP_WAIT
            self.channel.sendall(b"stop\n")

    def interrupt(self) -> bool:
        """Ctrl-C: ask the job to stop; a second one stops waiting (False)."""
        if self.stopped:
            self.channel.close()
            return False
        self.stopped, self.stop_deadline = True, time.monotonic() + STOP_WAIT
        self.channel.sendall(b"stop\n")
        return True


def _outcome(watch: _Watch, plan: Launch, started: float) -> JobResult:
    """The job's result: its exit code (130 stopped, HUNG stopped as hung) and, when a
    rank failed, which one and its last lines."""
    channel, streams = watch.channel, watch.streams
    code = channel.recv_exit_status() if channel.exit_status_ready() else 130
    if watch.hung:
        code = HUNG
    elif watch.stopped:
        code = 130
    seconds = time.monotonic() - started
    # stopped: mpicluster ended it (Ctrl-C, or as hung), as a detached job's `stopped`
    result = JobResult(code, plan.command(), plan.ranks, seconds, watch.stopped or watch.hung)
    result.hang, result.job_id = watch.report, watch.job_id
    if not watch.stopped and not watch.hung:
        blame(result, streams, plan.node_of)
    return result


def blame(result: JobResult, streams: Streams, node_of: Callable[[int], str | None]) -> None:
    """A failed job's failing rank (mpirun's words, else the first rank that raised),
    its node and last lines."""
    if result.exit_code == 0:
        return
    rank = failed_rank(streams.untagged)
    if rank is None and streams.raised:
        rank = streams.raised[0]
    if rank is not None:
        result.failed_rank = rank
        result.failed_node = node_of(rank)
        result.tail = streams.at_traceback.get(rank) or list(streams.tails.get(rank, ()))
