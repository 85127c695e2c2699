"""How `mpicluster run` shows a job: its lines as they come, then how it ended."""

from __future__ import annotations

import sys

from mpicluster.render.display import Display
from mpicluster.run.collect import Collected
from mpicluster.run.hang_report import HangReport
from mpicluster.run.job import HUNG, JobResult
from mpicluster.run.job_env import JobEnv
from mpicluster.run.setup_step import SetupResult
from mpicluster.run.sync import SyncResult


class LinePrinter:
    """Writes each rank's line to this process's stdout or stderr, as the rank did;
    with `tag`, prefixed by `[rank node]`; `stdout_to_stderr` keeps stdout for JSON."""

    def __init__(self, *, tag: bool = False, stdout_to_stderr: bool = False) -> None:
        self.tag = tag
        self.stdout_to_stderr = stdout_to_stderr

    def line(self, rank: int | None, node: str | None, stream: str, text: str) -> None:
        out = sys.stderr if stream == "stderr" or self.stdout_to_stderr else sys.stdout
        if self.tag and rank is not None:
            text = f"[{rank} {node or '?'}] {text}"
        out.write(text + "\n")
        out.flush()


def show_job(
    display: Display,
    result: JobResult,
    synced: SyncResult | None = None,
    *,
    as_json: bool = False,
    dry_run: bool = False,
    collected: Collected | None = None,
    setup: SetupResult | None = None,
    env: JobEnv | None = None,
) -> None:
    """How the job ended (`show_result`) and what --collect brought back, or with
    `dry_run` the command line it would run on the head (as text, --json or not)."""
    if dry_run:
        display.text(result.command + "\n")
        return
    if as_json:
        display.json(
            result.to_dict()
            | {
                "sync": synced.to_dict() if synced else None,
                "setup": setup.to_dict() if setup else None,
                "collect": collected.to_dict() if collected else None,
                "requirements": env.to_dict() if env else None,
            }
        )
        return
    if collected is not None:
        show_collected(display, collected)
    show_result(display, result, synced)


def show_setup(
    display: Display, result: SetupResult, synced: SyncResult | None, *, as_json: bool
) -> None:
    """Where --setup failed, each node in a line (the job did not start; the command's
    last line, `show_setup_failed`, says so); nothing when it passed (its output came
    tagged)."""
    if result.ok:
        return
    if as_json:
        display.json(
            {
                "ok": False,
                "exit_code": result.exit_code,
                "setup": result.to_dict(),
                "sync": synced.to_dict() if synced else None,
            }
        )
        return
    for node in result.failed:
        display.error(f"--setup failed on {node}: {result.why(node)}")


def show_setup_failed(display: Display, result: SetupResult) -> None:
    """`run`'s last line on stderr when --setup failed: no rank started, so the exit
    code is mpicluster's (3, or 4 where it could not run on a node)."""
    display.error(
        f"no rank started: the setup failed on {', '.join(result.failed)} (exit {result.exit_code})"
    )


#: The last line on stderr of `run` (and `logs`) once the job ran: the exit code is the
#: job's own. Any other last line means the code is mpicluster's (docs/exit-codes.md).
JOB_EXITED = "job exited with {code}"


def show_exit(display: Display, result: JobResult) -> None:
    """The last line on stderr once the job ran: `job exited with N` when N is the job's
    own exit status, an `error:` line when mpicluster stopped it (124 --hang-timeout,
    130 a stop or Ctrl-C)."""
    if not result.stopped:
        display.final(JOB_EXITED.format(code=result.exit_code))
    elif result.hang is not None and result.exit_code == HUNG:
        display.error(f"the job hung: stopped by --hang-timeout (exit {HUNG})")
    else:
        display.error(f"the job was stopped before its end (exit {result.exit_code})")


def show_collected(display: Display, collected: Collected) -> None:
    """What --collect brought back, one line, and each node it could not reach."""
    got = [n for n, c in collected.nodes.items() if c.ok and not c.missing]
    missing = [n for n, c in collected.nodes.items() if c.missing]
    line = f"collected {collected.path} from {len(got)} node(s) into {collected.into}/"
    if missing:
        line += f" (not there on {', '.join(missing)})"
    display.info(line)
    for node in collected.failed:
        display.error(f"--collect from {node}: {collected.nodes[node].error}")


def show_result(
    display: Display, result: JobResult, synced: SyncResult | None = None, *, as_json: bool = False
) -> None:
    """How the job ended, as JSON (its result and the sync's) or in a line or two."""
    if as_json:
        display.json(result.to_dict() | {"sync": synced.to_dict() if synced else None})
        return
    if result.hang is not None and result.exit_code == HUNG:
        display.failure(f"stopped: the job hung ({result.seconds:.1f} s), exit {HUNG}")
        return
    if result.stopped:
        display.warning(
            f"stopped: the job's {result.ranks} rank(s) were ended ({result.seconds:.1f} s)"
        )
        return
    if result.ok:
        display.success(f"job done: {result.ranks} rank(s), exit 0, {result.seconds:.1f} s")
        return
    if result.failed_rank is None:
        display.failure(f"job failed with exit code {result.exit_code} ({result.seconds:.1f} s)")
        return
    display.failure(
        f"rank {result.failed_rank} on {result.failed_node or '?'} failed: the job ended with "
        f"exit code {result.exit_code} after {result.seconds:.1f} s"
    )
    if result.tail:
        display.detail(f"last lines of rank {result.failed_rank}:")
        for line in result.tail:
            display.detail(f"  {line}")


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def show_inspect(display: Display, report: HangReport, *, as_json: bool = False) -> None:
    """`--inspect`: where the running jobs' ranks are, as JSON or grouped (`show_hang`)."""
    if as_json:
        display.json(report.to_dict())
        return
    show_hang(display, report)


def show_hang(display: Display, report: HangReport, quiet: float | None = None) -> None:
    """Where every rank is, grouped; the ranks that are not where most are, named."""
    head = f"no output for {quiet:.0f} s: " if quiet else ""
    if not report.ranks:
        display.warning(f"{head}no rank of an mpicluster job found on the nodes")
    else:
        display.warning(f"{head}where the job's {len(report.ranks)} rank(s) are (py-spy):")
    for group in report.groups:
        display.detail(
            f"  {_ranks(group.ranks)} ({', '.join(group.nodes)}): in {group.where}, "
            f"from {group.caller}"
        )
    for state in report.ranks:
        if state.error:
            display.detail(f"  rank {state.rank} ({state.node}): not read: {state.error}")
    for problem in report.problems:
        display.detail(f"  {problem}")
    if report.odd:
        big = report.groups[0]
        odd = [s for s in report.ranks if s.rank in report.odd]
        where = ", ".join(f"{s.rank} on {s.node} at {s.caller}" for s in odd)
        display.failure(
            f"{_ranks(report.odd)} not where the other {len(big.ranks)} wait "
            f"({big.where}, from {big.caller}): {where}"
        )
