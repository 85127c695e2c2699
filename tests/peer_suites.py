"""The peers' own test suites on the cluster: Horovod's parallel suite for PyTorch, run
under `mpicluster run` as a user runs a job, one pytest per rank.

The suite's files come like the stack's sources: pinned by sha256 in the lockfile
(`suites:`), from the source cache or a mirror, never from the repository. Tests the
suite gets wrong at this shape of cluster are left out here, by `--deselect`, each with
its reason and the world sizes it applies to; nothing is installed on the cluster that a
user's job would inherit. Each rank writes its own JUnit XML, which is kept in the
cluster's state beside the stack's fingerprint, so a later stack build names the tests
it broke (`regressions`).
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mpicluster.cluster.lockfile import suite_files
from mpicluster.stack.cache import SourceCache

HOROVOD_TORCH = "test/parallel/test_torch.py"
CASE = f"{HOROVOD_TORCH}::TorchTests::"


@dataclass(frozen=True)
class LeftOut:
    """A test of the suite left out, why, and at which world sizes."""

    test: str
    why: str
    applies: Callable[[int], bool] = lambda size: True

    def argument(self) -> str:
        """pytest's own --deselect takes every test whose id starts with the one given
        (test_broadcast_state would take test_broadcast_state_no_grad too): the
        runner's plugin leaves out exactly the test named."""
        return f"--leave-out={CASE}{self.test}"


def _odd(size: int) -> bool:
    return size % 2 == 1


def _more_than_two(size: int) -> bool:
    return size > 2


def _three(size: int) -> bool:
    """The suite compares float results with threshold 0 up to 3 ranks, exact only at 2."""
    return size == 3


# Horovod's CI ran this file on 2 ranks of one host (Dockerfile.test.cpu's mpirun -np 2);
# each of these is wrong elsewhere for the reason given, shown on the local cluster.
HOROVOD_LEFT_OUT = (
    LeftOut(
        "test_broadcast_state",
        "builds every torch.optim.Optimizer subclass on a model with 1-D biases; PyTorch "
        "2.9+'s Muon refuses those ('Muon only supports 2D parameters'), on every rank",
    ),
    LeftOut("test_broadcast_state_options", "the same Muon refusal as test_broadcast_state"),
    LeftOut("test_force_allreduce", "the same Muon refusal as test_broadcast_state"),
    LeftOut(
        "test_horovod_allreduce_prescale",
        "wants float16 sums of 3 ranks equal to 3x the value with threshold 0 (size <= 3); "
        "three rounded half additions are not one rounded product (43.0938 vs 43.1016); "
        "at 6 ranks its 1e-4 threshold fails the same way",
        _more_than_two,
    ),
    LeftOut(
        "test_horovod_reducescatter_prescale",
        "the same float16 threshold as test_horovod_allreduce_prescale (at 6 ranks it "
        "fails on 5 of them: the sixth goes on to its next reducescatter and waits there)",
        _more_than_two,
    ),
    LeftOut(
        "test_horovod_grouped_reducescatter_prescale",
        "the same float16 threshold as test_horovod_allreduce_prescale, at 3 and 6 ranks",
        _more_than_two,
    ),
    LeftOut(
        "test_horovod_broadcast_grad_process_sets",
        "loops once per rank of the caller's process set: at an odd world size the even set "
        "is larger, its ranks make more unnamed ops, and Horovod names an unnamed op by a "
        "per-process handle counter, so every later unnamed op has a different name on "
        "different ranks (test_horovod_broadcast_inplace then hangs on all ranks)",
        _odd,
    ),
    LeftOut(
        "test_horovod_broadcast_process_sets",
        "the same per-set loop and handle drift as test_horovod_broadcast_grad_process_sets",
        _odd,
    ),
    LeftOut(
        "test_horovod_join_allreduce",
        "wants a float average over 3 ranks, (a + b) / 3, equal with threshold 0 to "
        "a * 2 / 3 (size <= 3); they differ in the last bit (47.3333), on the 2 ranks that "
        "did not join first, which then leave the third waiting in the next round",
        _three,
    ),
    LeftOut(
        "test_horovod_join_allgather",
        "the rank that joined first made one op fewer, so at 3+ ranks the unnamed "
        "allgathers of the ranks still in differ in name and never meet (hangs); at 2 ranks "
        "one rank is left and its allgather fails as the test expects",
        _more_than_two,
    ),
)


#: Skips the suite makes without a reason of their own, and the reason its source gives.
HOROVOD_BARE_SKIPS = {
    "test_broadcast_state_gpu": "the suite's own @unittest.skip, under its comment "
    "'TODO: investigate why this hangs on K80s'",
}


def skip_reasons(outcome: Outcome) -> dict[str, str]:
    """Each skipped test's reason; a bare "Skipped" is replaced by the one the suite's
    source gives (HOROVOD_BARE_SKIPS), or left empty where none is known."""
    reasons = {}
    for name, why in outcome.skipped.items():
        if why.strip() in ("", "Skipped"):
            why = HOROVOD_BARE_SKIPS.get(name.rsplit(".", 1)[-1], "")
        reasons[name] = why
    return reasons


def left_out(size: int) -> list[LeftOut]:
    return [entry for entry in HOROVOD_LEFT_OUT if entry.applies(size)]


# A pytest plugin the runner passes with `-p` (it lies in the synced folder, not on any
# node's Python): each rank writes its own JUnit XML and a line per test as it ends, so a
# hang still leaves each rank's last test behind; --leave-out deselects by exact id.
PLUGIN = """\
import os, time
import pytest

RANK = os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ.get("PMIX_RANK") or "0"
os.makedirs("results", exist_ok=True)
LOG = open(os.path.join("results", "rank-%s.log" % RANK), "w", buffering=1)


def pytest_addoption(parser):
    parser.addoption("--leave-out", action="append", default=[], help="a test id, exactly")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    config.option.xmlpath = os.path.join("results", "rank-%s.xml" % RANK)


def pytest_collection_modifyitems(config, items):
    names = set(config.getoption("leave_out"))
    out = [item for item in items if item.nodeid in names]
    if out:
        config.hook.pytest_deselected(items=out)
        items[:] = [item for item in items if item.nodeid not in names]


def pytest_runtest_logstart(nodeid, location):
    LOG.write("%.1f start %s\\n" % (time.time(), nodeid))


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        LOG.write("%.1f %s %s %s %.2fs\\n"
                  % (time.time(), report.when, report.outcome, report.nodeid, report.duration))
"""

REQUIREMENTS = "pytest\nmock\ncloudpickle\n"


def stage(cache: SourceCache, version: str, into: Path, progress=lambda line: None) -> Path:
    """The suite's files (verified, from the cache or fetched) laid out as in Horovod's
    tree, with the runner's plugin and the job's requirements."""
    if into.exists():
        shutil.rmtree(into)
    for path, source in suite_files("horovod", version).items():
        found = cache.ensure(source, progress)
        target = into / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(found.path, target)
    (into / "mpicluster_suite.py").write_text(PLUGIN)
    (into / "requirements.txt").write_text(REQUIREMENTS)
    return into


def pytest_command(size: int) -> list[str]:
    """What every rank runs, from the staged folder."""
    deselect = [entry.argument() for entry in left_out(size)]
    return [
        "python",
        "-m",
        "pytest",
        "-p",
        "mpicluster_suite",
        "-p",
        "no:cacheprovider",
        "-q",
        "-rs",
        HOROVOD_TORCH,
        *deselect,
    ]


@dataclass
class Outcome:
    """One rank's JUnit XML, read."""

    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0


def read_junit(path: Path) -> Outcome:
    outcome = Outcome()
    root = ET.parse(path).getroot()  # noqa: S314 (the XML our own pytest run wrote)
    for case in root.iter("testcase"):
        # the class too: mpi4py's suite has the same method name in many classes
        name = ".".join(filter(None, (case.get("classname"), case.get("name", ""))))
        outcome.seconds += float(case.get("time", 0) or 0)
        bad = case.find("failure") if case.find("failure") is not None else case.find("error")
        skip = case.find("skipped")
        if bad is not None:
            outcome.failed[name] = (bad.get("message") or "").splitlines()[0][:300]
        elif skip is not None:
            outcome.skipped[name] = skip.get("message") or ""
        else:
            outcome.passed.append(name)
    return outcome


def keep(results: Path, store: Path) -> dict[str, Outcome]:
    """Copy each rank's JUnit XML from a job's collected folder into `store` and read them."""
    store.mkdir(parents=True, exist_ok=True)
    outcomes = {}
    for xml in sorted(results.glob("*/results/rank-*.xml")):
        shutil.copyfile(xml, store / xml.name)
        outcomes[xml.stem] = read_junit(store / xml.name)
    return outcomes


def regressions(before: Path, now: Path) -> list[str]:
    """Tests that passed on every rank in `before` (an earlier stack's results of the same
    shape) and fail on some rank now."""
    if not before.is_dir():
        return []
    passed = set.intersection(
        *[set(read_junit(x).passed) for x in before.glob("rank-*.xml")] or [set()]
    )
    failing = {name for x in now.glob("rank-*.xml") for name in read_junit(x).failed}
    return sorted(passed & failing)


def earlier_regressions(store: Path) -> dict[str, list[str]]:
    """For a run kept in `store` (suites/<fingerprint>/<shape>), the tests that passed on
    every rank under each earlier stack's run of the same shape and fail now."""
    fingerprints = store.parent.parent
    found = {}
    for before in sorted(fingerprints.glob(f"*/{store.name}")):
        if before != store and (names := regressions(before, store)):
            found[before.parent.name] = names
    return found


def summary(outcomes: dict[str, Outcome]) -> str:
    return json.dumps(
        {
            rank: {
                "passed": len(o.passed),
                "failed": o.failed,
                "skipped": len(o.skipped),
                "seconds": round(o.seconds, 1),
            }
            for rank, o in outcomes.items()
        },
        indent=1,
    )
