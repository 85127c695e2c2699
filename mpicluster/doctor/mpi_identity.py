"""Which MPI a node's `mpirun --version` names (the probe's versions.mpi facts): read by
the versions check and by the proof by launch, which launches only Open MPI's."""

from __future__ import annotations

import re


def mpi_name(identity: dict | None) -> str | None:
    """ "Open MPI 4.1.4", "MPICH 4.0.2 (Hydra)", ... from `mpirun --version`."""
    if not identity:
        return None
    text = identity.get("version_text") or ""
    match = re.search(r"\(Open MPI\)\s*([0-9][\w.]*)", text) or re.search(
        r"Open MPI\D*([0-9][\w.]*)", text
    )
    if match:
        return f"Open MPI {match.group(1)}"
    if "HYDRA" in text.upper():
        version = re.search(r"Version:\s*([0-9][\w.]*)", text)
        return f"MPICH {version.group(1) if version else '?'} (Hydra)"
    match = re.search(r"Intel\(R\) MPI Library[^0-9]*([0-9][\w.]*)", text)
    if match:
        return f"Intel MPI {match.group(1)}"
    first = text.strip().splitlines()[0] if text.strip() else f"exit {identity.get('exit_code')}"
    return f"unknown MPI ({first[:60]})"
