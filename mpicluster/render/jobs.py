"""How detached jobs are shown: started, listed, their end, stopped, collected."""

from __future__ import annotations

import time

from rich.markup import escape

from mpicluster.render.display import Display
from mpicluster.render.run import show_collected, show_hang, show_result
from mpicluster.run.collect import Collected
from mpicluster.run.detached import DetachedJob
from mpicluster.run.job import JobResult
from mpicluster.run.setup_step import SetupResult


def when(epoch: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch)) if epoch else "?"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    minutes, rest = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{rest:02d}s"


def show_started(
    display: Display,
    found: DetachedJob,
    inventory: str,
    setup: SetupResult | None = None,
    *,
    as_json: bool = False,
) -> None:
    """The started job's id alone on stdout, for scripts (`JOB=$(mpicluster run
    --detach ...)`), its sentences as messages (`run`'s are on stderr); or, as_json, its
    record on stdout."""
    if as_json:
        display.json(found.to_dict() | {"setup": setup.to_dict() if setup else None})
        return
    how = f"is queued as Slurm job {found.slurm}" if found.slurm else "runs detached"
    display.success(
        f"job {found.id} {how} on {found.ranks} rank(s), from {found.node} "
        f"(its output: {found.node}:{found.log})"
    )
    display.detail(f"  follow it: mpicluster logs {inventory} {found.id} --follow")
    display.detail(f"  stop it:   mpicluster stop {inventory} {found.id}")
    display.text(f"{found.id}\n")


def show_jobs(
    display: Display,
    cluster: str,
    jobs: list[DetachedJob],
    problems: dict[str, str],
    *,
    as_json: bool = False,
) -> None:
    if as_json:
        display.json({"jobs": [j.to_dict() for j in jobs], "problems": problems})
        return
    for node, why in problems.items():
        display.warning(f"{node}: its jobs could not be read: {why}")
    if not jobs:
        display.info(f"no detached jobs on the nodes of {cluster}")
        return
    rows = [
        [
            j.id,
            j.node,
            _state(j),
            "" if j.exit_code is None else str(j.exit_code),
            when(j.started),
            duration(j.seconds),
            str(j.ranks),
            escape(" ".join(j.program)),
        ]
        for j in jobs
    ]
    columns = ["job", "head", "state", "exit", "started", "ran", "ranks", "command"]
    # the id is what `logs`, `stop` and `collect` take: never cut
    display.table(
        f"Detached jobs on {cluster}",
        columns,
        rows,
        whole=("job", "head"),
        give_way=("command", "started", "state"),
    )


def _state(found: DetachedJob) -> str:
    """The job's state; a Slurm job's id and, where it differs, Slurm's word for it."""
    if found.slurm is None:
        return found.state
    said = found.slurm_state.lower()
    also = f", {said}" if said and said != found.state else ""
    return f"{found.state} (Slurm {found.slurm}{also})"


def show_log_end(
    display: Display,
    found: DetachedJob,
    result: JobResult,
    inventory: str,
    collected: Collected | None = None,
    *,
    as_json: bool = False,
) -> None:
    """After the output: how the job ended (as `run` says it), or that it still runs."""
    if as_json:
        display.json(
            found.to_dict()
            | {
                "result": None if found.running else result.to_dict(),
                "collect": collected.to_dict() if collected else None,
            }
        )
        return
    if found.running:
        display.info(
            f"job {found.id} is {_state(found)} ({duration(found.seconds)} so far): "
            f"`mpicluster logs {inventory} {found.id} --follow` follows it"
        )
        return
    if found.state == "lost":
        gone = (
            f"Slurm no longer knows job {found.slurm}"
            if found.slurm
            else f"its launcher on {found.node} is gone"
        )
        display.failure(
            f"job {found.id}: {gone} and no end was recorded "
            "(the node restarted, or the launcher was killed)"
        )
        return
    if found.slurm_state and found.slurm_state not in ("COMPLETED", "FAILED"):
        display.warning(f"job {found.id}: Slurm ended it as {found.slurm_state}")
    if found.hang is not None:
        show_hang(display, found.hang, found.hang_timeout)
    if collected is not None:
        show_collected(display, collected)
    show_result(display, result)


def show_stopped(
    display: Display, found: DetachedJob, was_running: bool, *, as_json: bool = False
) -> None:
    if as_json:
        display.json(found.to_dict() | {"was_running": was_running})
        return
    if not was_running:
        code = "" if found.exit_code is None else f", exit {found.exit_code}"
        display.warning(f"job {found.id} was not running ({found.state}{code})")
    elif found.running:
        display.failure(f"job {found.id} on {found.node} did not end when told to stop")
    else:
        display.success(
            f"job {found.id} stopped: its processes on {', '.join(found.placement)} ended"
        )


def show_collect(display: Display, collected: Collected, *, as_json: bool = False) -> None:
    if as_json:
        display.json(collected.to_dict())
        return
    show_collected(display, collected)
