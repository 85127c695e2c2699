"""The one `mpirun` command line. The smoke test, `mpicluster run` and doctor's proof by
launch each start theirs here: the same placement spelling, the same root rule and the
same Open MPI series-dependent options, written once."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mpicluster.cluster.layout import Layout


def hosts(counts: Mapping[str, int]) -> list[str]:
    """`count` ranks on each named host, in this order: --host a:2,b:2 -np 4."""
    spec = ",".join(f"{name}:{count}" for name, count in counts.items())
    return ["--host", spec, "-np", str(sum(counts.values()))]


def exports(names: Iterable[str]) -> list[str]:
    """Pass these variables of mpirun's own environment on to every rank."""
    return [word for name in names for word in ("-x", name)]


@dataclass(frozen=True)
class Mpirun:
    path: str = "mpirun"
    #: The Open MPI series: 5 (PRRTE) or 4 (ORTE) spell some options differently.
    major: int = 5
    #: The MPI user is root: Open MPI refuses to start without --allow-run-as-root.
    root: bool = False
    #: Where every node's Open MPI is (`--prefix`): the remote daemons (prted) and the
    #: libraries are found there. A source stack names its `current` link, the same path
    #: on every node: a cluster of two OS releases has two builds in two folders, and a
    #: build's own default (configure's --enable-prte-prefix-by-default) is its folder on
    #: the head. None: the launcher's own default (a distribution's Open MPI).
    prefix: str | None = None

    @classmethod
    def of(cls, layout: Layout, major: int, root: bool) -> Mpirun:
        """The cluster's own mpirun, where the layout puts it, with the prefix every node
        shares (a source stack's `current`)."""
        return cls(f"{layout.mpi_bin}/mpirun", major, root, layout.mpi_prefix)

    def argv(
        self, placement: Sequence[str], options: Sequence[str] = (), program: Sequence[str] = ()
    ) -> list[str]:
        """mpirun, where the ranks go, the root rule, the prefix, the caller's options,
        the program."""
        root = ["--allow-run-as-root"] if self.root else []
        prefix = ["--prefix", self.prefix] if self.prefix else []
        return [self.path, *placement, *root, *prefix, *options, *program]

    def tag_output(self) -> list[str]:
        """Each output line prefixed with its rank ([1,0]<stdout>: on 5, [1,0]: on 4)."""
        return ["--output", "tag"] if self.major >= 5 else ["--tag-output"]

    def launcher_ssh(self, ssh_args: str) -> list[str]:
        """Options for the ssh the launcher starts remote daemons with (PRRTE's plm_ssh,
        ORTE's plm_rsh)."""
        if self.major >= 5:
            return ["--prtemca", "plm_ssh_args", ssh_args]
        return ["--mca", "plm_rsh_args", ssh_args]
