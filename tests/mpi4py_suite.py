"""mpi4py's own test suite on the cluster, run as its authors run it: `test/main.py`
(unittest) on every rank of one job, here through `mpicluster run`.

The suite comes from the stack's own pinned mpi4py sdist (its sha256 in the lockfile), from
the source cache, never from the repository. Three of its modules need one filesystem under
every rank, which the cluster's nodes do not share (ONE_NODE_MODULES says why for each):
they run in a second job with every rank on one node. Each rank's JUnit XML (main.py's
--xml writes one file per test class) is merged into one file per rank and kept like
Horovod's suite's (tests/peer_suites.py).
"""

from __future__ import annotations

import re
import shutil
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

from mpicluster.cluster.lockfile import resolve
from mpicluster.stack.cache import SourceCache
from tests.peer_suites import LeftOut, Outcome, read_junit

#: The modules that need one filesystem under every rank, and what was seen across nodes.
ONE_NODE_MODULES = {
    "test_io": "MPI-IO: rank 0 makes a file in its node's /tmp and every rank opens it "
    "(across nodes every rank waits in MPI.File.Open, test_io.py:60, until the hang watch)",
    "test_file": "MPI-IO: the same file made by rank 0 and opened by every rank",
    "test_spawn": "the parent writes the children's script into its node's /tmp, and the "
    "children need slots beyond the job's own (Open MPI: 'lacked permissions to execute "
    "/tmp/mpi4py-....py' on another node); mpi4py's own CI leaves it out beyond one "
    "rank (-e spawn)",
}

#: `mpicluster run` arguments of the one-node job: every rank on the first node, and
#: Open MPI free to place spawned children beyond the node's slots.
ONE_NODE_RUN = ("--per-node", "3", "--map-by", "slot:OVERSUBSCRIBE")

#: Tests of the suite left out here, each with its reason (none yet: mpi4py's own skips,
#: `skipMPI`, already name the Open MPI releases they do not apply to).
MPI4PY_LEFT_OUT: tuple[LeftOut, ...] = ()

#: What main.py needs beyond the stack: its XML reports (main.py --xml) and the packages
#: of the sdist's conf/requirements-test.txt the stack lacks (numpy is the stack's).
REQUIREMENTS = "unittest-xml-reporting\ncffi\npyyaml\n"


def stage(cache: SourceCache, version: str, into: Path, progress=lambda line: None) -> Path:
    """The sdist's test/ folder (main.py and the test modules) at the top of `into`, with the
    job's requirements; main.py discovers the tests from the folder it runs in."""
    if into.exists():
        shutil.rmtree(into)
    into.mkdir(parents=True)
    found = cache.ensure(resolve("mpi4py", version, None, None), progress)
    prefix = f"mpi4py-{version}/test/"
    with tarfile.open(found.path) as tar:
        for member in tar.getmembers():
            if member.isfile() and member.name.startswith(prefix):
                name = member.name[len(prefix) :]
                if "/" in name:
                    continue
                source = tar.extractfile(member)
                assert source is not None
                (into / name).write_bytes(source.read())
    if not (into / "main.py").exists():
        raise FileNotFoundError(f"{found.path} has no {prefix}main.py")
    (into / "requirements.txt").write_text(REQUIREMENTS)
    return into


def command(one_node: bool) -> list[str]:
    """What every rank runs: main.py with per-rank XML into results/; the one-node modules
    alone (one_node) or everything but them."""
    which = ["-i" if one_node else "-e", "|".join(ONE_NODE_MODULES)]
    leave_out = [arg for entry in MPI4PY_LEFT_OUT for arg in ("-x", f"*{entry.test}")]
    return ["python", "main.py", "--xml", "results", *which, *leave_out]


_RANK = re.compile(r"-([0-9]+)\.xml$")


def keep(results: Path, store: Path) -> dict[str, Outcome]:
    """Merge each rank's XML files (main.py writes one per test class, named ...-RANK.xml)
    from a job's collected folder into `store`/rank-N.xml, and read them."""
    store.mkdir(parents=True, exist_ok=True)
    by_rank: dict[str, list[Path]] = {}
    for xml in sorted(results.glob("*/results/*.xml")):
        found = _RANK.search(xml.name)
        if found:
            by_rank.setdefault(found.group(1), []).append(xml)
    outcomes = {}
    for rank, files in sorted(by_rank.items(), key=lambda item: int(item[0])):
        merged = ET.Element("testsuites")
        for xml in files:
            root = ET.parse(xml).getroot()  # noqa: S314 (what the suite's own run wrote)
            merged.extend(root.iter("testsuite") if root.tag == "testsuites" else [root])
        target = store / f"rank-{rank}.xml"
        ET.ElementTree(merged).write(target, encoding="utf-8", xml_declaration=True)
        outcomes[f"rank-{rank}"] = read_junit(target)
    return outcomes
