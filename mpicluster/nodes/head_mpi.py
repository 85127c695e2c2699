"""The head node's MPI, asked the one way every feature asks it (the smoke test, bench,
`run`): the stack's own mpirun's `--version`, its exit status and the managed hostfile,
in one command, read by one parser. Anything but Open MPI is refused here, once.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from mpicluster.cluster import hostfiles, layout
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.nodes import mpi_version, transport
from mpicluster.nodes.mpi_version import MpiVersion
from mpicluster.util.errors import MpiclusterError
from mpicluster.util.text import last_line

_EXIT = "@@mpirun-exit"
_SLOTS = "@@slots"
_EXIT_LINE = re.compile(rf"^{_EXIT} (\d+)$", re.M)


@dataclass(frozen=True)
class HeadMpi:
    node: str
    version: MpiVersion
    #: The Open MPI series (4, 5): which options its mpirun takes.
    major: int
    #: The head's hostfile: node name -> slots, in order ({} when it has none).
    slots: dict[str, int]


class HeadMpiError(MpiclusterError):
    """The head's mpirun did not answer, or is not Open MPI's."""

    def __init__(self, node: str, problem: str, cause: str):
        super().__init__(f"{problem} ({node}): {cause}", hint="run `mpicluster doctor INVENTORY`")
        self.node, self.problem, self.cause = node, problem, cause


def command(mpi_bin: str) -> str:
    """What the head runs; every line of its answer is read by `parse`."""
    mpirun = shlex.quote(f"{mpi_bin}/mpirun")
    return (
        f'{mpirun} --version 2>&1; echo "{_EXIT} $?"; '
        f"echo {_SLOTS}; cat {layout.HOSTFILE} 2>/dev/null; true"
    )


def parse(node: str, text: str) -> HeadMpi:
    said, _, rest = text.partition(_SLOTS)
    status = _EXIT_LINE.search(said)
    said = _EXIT_LINE.sub("", said).strip()
    if status is None or status.group(1) != "0":
        cause = last_line(said, "no output")
        raise HeadMpiError(node, "`mpirun --version` failed on the head", cause)
    version = mpi_version.parse(said)
    if not version.is_open_mpi or version.major is None:
        raise HeadMpiError(
            node,
            "the head's mpirun is not Open MPI",
            f"`mpirun --version` said: {version.first_line or 'nothing'}",
        )
    return HeadMpi(node, version, version.major, hostfiles.parse(rest))


def slots(text: str) -> dict[str, int]:
    """The hostfile part of the answer alone (a head never `up`-made has none)."""
    return hostfiles.parse(text.partition(_SLOTS)[2])


def ask(plan: ClusterPlan, timeout: float = 30) -> HeadMpi:
    """The plan's head (its first node) asked over the inventory's ssh."""
    head = plan.nodes[0]
    done = transport.run_on(plan, head, command(plan.layout.mpi_bin), timeout=timeout)
    if not done.ok:
        cause = done.error or last_line(done.stdout + done.stderr)
        raise HeadMpiError(head.name, "`mpirun --version` failed on the head", cause)
    return parse(head.name, done.stdout)
