"""The MPI a bench run measured, in one phrase: "Open MPI 5.0.7, UCX" or "Open MPI
4.1.4 (Debian's package), TCP (ob1)".

From the first line of `MPI_Get_library_version` (bench's MPI program reports it:
"Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4, repo rev: v4.1.4, May 26,
2022") and the PML its ranks selected (`--mca pml_base_verbose 10`'s lines, as the smoke
test reads them): what carried the pairs between nodes.
"""

from __future__ import annotations

import re

_OPEN_MPI = re.compile(r"\bOpen MPI v?(\d[\w.]*)")
_PACKAGE = re.compile(r"\bpackage:\s*([^,]*)")

#: Open MPI's PMLs as a person names them (ob1: Open MPI's own byte transfer layers,
#: TCP between nodes, as bench's ranks are one per node; cm: a libfabric or PSM2 MTL).
TRANSPORTS = {"ucx": "UCX", "ob1": "TCP (ob1)", "cm": "an MTL (cm)"}


def library_words(line: str, pml: str = "") -> str:
    """The MPI and its transport in one phrase ("" where the run reported neither);
    `pml`: the PMLs the ranks selected, comma-separated ("" when they did not say)."""
    name = _name(line.strip())
    transport = _transport(pml)
    return ", ".join(part for part in (name, transport) if part)


def _name(line: str) -> str:
    found = _OPEN_MPI.search(line)
    if found is None:  # another MPI: its own words up to the first comma
        return " ".join(line.split(",")[0].split())[:60]
    package = _PACKAGE.search(line)
    debian = package is not None and "debian" in package.group(1).lower()
    return f"Open MPI {found.group(1)}" + (" (Debian's package)" if debian else "")


def _transport(pml: str) -> str:
    chosen = [p for p in pml.split(",") if p]
    if not chosen:
        return ""
    if len(chosen) > 1:
        return f"ranks selected different PMLs ({', '.join(chosen)})"
    return TRANSPORTS.get(chosen[0], f"pml {chosen[0]}")
