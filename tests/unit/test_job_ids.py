"""Ids that can be copied, and exit codes a script can read: the jobs table keeps each id
whole at any terminal width (the start and command give way, cut with "…"); `run
--detach` prints the new job's id alone on stdout; `run` and `logs` end with `job exited
with N` when the code is the job's own; `jobs` and `collect` exit 4 for a node they could
not reach."""

from __future__ import annotations

import re
import time

import pytest

from mpicluster.render import Display, fit
from mpicluster.render.jobs import show_jobs, show_started
from mpicluster.render.run import show_exit, show_setup_failed
from mpicluster.run.collect import Collected, NodeCopy
from mpicluster.run.detached import DetachedJob, Listing
from mpicluster.run.job import HUNG, JobResult, new_job_id
from mpicluster.run.setup_step import SetupResult

LONG_COMMAND = "python train.py --epochs 100 --learning-rate 0.001 --data /data/imagenet/train"


def job(job_id: str, **fields) -> DetachedJob:
    started = time.time() - 4000
    defaults = {"node": "node1", "state": "running", "ranks": 16, "started": started}
    return DetachedJob(id=job_id, program=LONG_COMMAND.split(), **defaults | fields)


@pytest.fixture
def columns_80(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("NO_COLOR", "1")


def test_the_id_column_is_whole_and_the_table_fits_80_columns(columns_80, capsys):
    ids = [new_job_id(), new_job_id()]  # what `run --detach` makes: 12 hex digits
    jobs = [job(ids[0]), job(ids[1], state="failed", exit_code=3, ended=time.time())]
    show_jobs(Display(messages_on_stderr=True), "c", jobs, {})
    table = capsys.readouterr().err
    lines = table.splitlines()
    assert all(len(line) <= 80 for line in lines), table
    for job_id in ids:
        assert re.search(rf"│ {job_id} +│", table), table
    assert "…" in table and LONG_COMMAND not in table  # the command gave way


def test_a_64_hex_id_stays_whole_even_where_the_table_cannot_fit(columns_80, capsys):
    """Nothing else can give way enough: the lines run past the terminal, the id whole."""
    long_id = "9335240df" + "0123456789abcdef" * 3 + "0123456"
    assert len(long_id) == 64
    show_jobs(Display(messages_on_stderr=True), "c", [job(long_id)], {})
    table = capsys.readouterr().err
    assert f"│ {long_id} │" in table, table
    assert "9335240df…" not in table


def test_a_wide_terminal_shows_every_column_whole(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "200")
    job_id = new_job_id()
    show_jobs(Display(messages_on_stderr=True), "c", [job(job_id)], {})
    table = capsys.readouterr().err
    assert job_id in table and LONG_COMMAND in table and "…" not in table


def test_columns_give_way_in_order_down_to_their_narrowest():
    natural, narrowest = [12, 7, 19, 40], [12, 4, 7, 7]
    assert fit.column_widths(natural, narrowest, [3, 2], 78) == natural
    assert fit.column_widths(natural, narrowest, [3, 2], 60) == [12, 7, 19, 22]
    assert fit.column_widths(natural, narrowest, [3, 2], 30) == [12, 7, 7, 7]  # as far as it goes


def test_run_detach_prints_the_id_alone_on_stdout(capsys):
    job_id = new_job_id()
    show_started(Display(messages_on_stderr=True), job(job_id), "inv.yaml")
    out, err = capsys.readouterr()
    assert out == f"{job_id}\n"
    assert f"job {job_id} runs detached on 16 rank(s)" in err
    assert f"mpicluster logs inv.yaml {job_id} --follow" in err


def last_line(capsys) -> str:
    return capsys.readouterr().err.splitlines()[-1]


def test_the_last_line_says_whose_exit_code_it_is(capsys):
    display = Display(messages_on_stderr=True)
    show_exit(display, JobResult(3, "cmd", 4, 1.0))
    assert last_line(capsys) == "job exited with 3"
    show_exit(display, JobResult(0, "cmd", 4, 1.0))
    assert last_line(capsys) == "job exited with 0"
    show_exit(display, JobResult(HUNG, "cmd", 4, 1.0, stopped=True, hang=object()))  # type: ignore[arg-type]
    assert last_line(capsys).startswith("error: the job hung: stopped by --hang-timeout")
    show_exit(display, JobResult(130, "cmd", 4, 1.0, stopped=True))
    assert last_line(capsys).startswith("error: the job was stopped")
    setup = SetupResult("make", exits={"n1": 0, "n2": 7})
    show_setup_failed(display, setup)
    assert last_line(capsys) == "error: no rank started: the setup failed on n2 (exit 3)"


def test_jobs_exits_4_for_a_node_it_could_not_reach_and_1_for_an_answer_it_could_not_read():
    assert Listing([]).exit_code == 0
    unread = Listing([], {"n2": "its answer was not JSON"})
    assert unread.exit_code == 1
    gone = Listing([], {"n2": "its answer was not JSON", "n3": "timed out"}, ["n3"])
    assert gone.exit_code == 4


def test_collect_exits_4_only_when_every_failed_copy_could_not_reach_its_node():
    def collected(**copies: NodeCopy) -> Collected:
        return Collected("out", "/tmp/x", dict(copies))

    assert collected(n1=NodeCopy(True), n2=NodeCopy(True, missing=True)).exit_code == 0
    unreached = NodeCopy(False, error="rsync exited 255: ...", reached=False)
    assert collected(n1=NodeCopy(True), n2=unreached).exit_code == 4
    refused = NodeCopy(False, error="rsync exited 23: Permission denied")
    assert collected(n1=refused, n2=unreached).exit_code == 1
