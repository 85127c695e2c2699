"""Which MPI `mpirun --version` names: the one parser for the smoke test (which flags
its mpirun gets), `run` (the head's Open MPI series) and doctor (the versions check, and
the proof by launch, which launches only Open MPI's)."""

from __future__ import annotations

import re
from dataclasses import dataclass

_OPEN_MPI = (re.compile(r"\(Open MPI\)\s*([0-9][\w.]*)"), re.compile(r"Open MPI\D*([0-9][\w.]*)"))
_HYDRA_VERSION = re.compile(r"Version:\s*([0-9][\w.]*)")
_INTEL = re.compile(r"Intel\(R\) MPI Library[^0-9]*([0-9][\w.]*)")


@dataclass(frozen=True)
class MpiVersion:
    family: str  # "Open MPI", "MPICH", "Intel MPI" or "" (not recognised)
    version: str  # "5.0.7"; "?" when the family is known but not its version
    first_line: str  # what the output began with ("" when empty)

    @property
    def is_open_mpi(self) -> bool:
        return self.family == "Open MPI"

    @property
    def major(self) -> int | None:
        match = re.match(r"\d+", self.version)
        return int(match.group()) if match else None

    @property
    def numbers(self) -> tuple[int, ...]:
        """The version's first three numbers, to compare releases: (5, 0, 7); () unknown."""
        return tuple(int(n) for n in re.findall(r"\d+", self.version)[:3])

    @property
    def name(self) -> str:
        """ "Open MPI 4.1.4", "MPICH 4.0.2 (Hydra)", "Intel MPI 2021.10", or
        "unknown MPI (its first line)"."""
        if self.family == "MPICH":
            return f"MPICH {self.version} (Hydra)"
        if self.family:
            return f"{self.family} {self.version}"
        return f"unknown MPI ({self.first_line[:60]})"


def parse(text: str) -> MpiVersion:
    """What `mpirun --version` printed, read."""
    stripped = text.strip()
    first = stripped.splitlines()[0] if stripped else ""
    for pattern in _OPEN_MPI:
        if match := pattern.search(text):
            return MpiVersion("Open MPI", match.group(1), first)
    if "HYDRA" in text.upper():
        version = _HYDRA_VERSION.search(text)
        return MpiVersion("MPICH", version.group(1) if version else "?", first)
    if match := _INTEL.search(text):
        return MpiVersion("Intel MPI", match.group(1), first)
    return MpiVersion("", "", first)


def mpi_name(identity: dict | None) -> str | None:
    """The MPI a node's probe found (its versions.mpi facts: `mpirun --version`'s text
    and exit code), by name; None where the probe did not look."""
    if not identity:
        return None
    found = parse(identity.get("version_text") or "")
    if found.family or found.first_line:
        return found.name
    return f"unknown MPI (exit {identity.get('exit_code')})"
