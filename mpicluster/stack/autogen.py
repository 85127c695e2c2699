"""A tag archive's configure, made on this machine (`sources.autogen: control`).

UCX's and UCC's tag archives are their git trees: no generated `configure`. A builder
runs their autogen.sh (autoconf, automake and libtool are among the build dependencies).
A builder that cannot install those (an offline GPU box, a locked-down image) is given
the tree with configure already made: this machine unpacks the verified archive, runs
autogen.sh in it and packs the result beside it in the source cache, once per archive
(named by the archive's sha256, so a changed pin makes another). The stack's
fingerprint still names the verified archive: the same sources, built the same way.
"""

from __future__ import annotations

import shutil
import tarfile
import tempfile
from pathlib import Path

from mpicluster.cluster.lockfile import Source
from mpicluster.util import proc
from mpicluster.util.errors import MpiclusterError

#: The components whose archives may lack configure (their build runs autogen.sh).
COMPONENTS = ("ucx", "ucc")
#: What autogen.sh calls.
TOOLS = ("autoreconf", "autoconf", "automake", "libtoolize")
#: autogen.sh's time, measured at 20-40 s for UCX on one core: far more is a hang.
TIMEOUT = 600


def top_folder(source: Source) -> str:
    """The folder the archive unpacks into (the build role's <name>-<version>)."""
    return f"{source.component}-{source.version}"


def generated_name(source: Source) -> str:
    return f"{top_folder(source)}-configure-{source.sha256[:12]}.tar.gz"


def has_configure(path: Path, source: Source) -> bool:
    """Whether the archive carries a generated configure at its top."""
    wanted = f"{top_folder(source)}/configure"
    with tarfile.open(path) as archive:
        return any(member.name.lstrip("./") == wanted for member in archive)


def missing_tools() -> list[str]:
    return [tool for tool in TOOLS if shutil.which(tool) is None]


def generated(path: Path, source: Source, *, make: bool = True) -> Path | None:
    """The archive with configure made from `path` (verified), in the same folder: made
    now unless it is there already, or None where it is not and `make` is false."""
    target = path.parent / generated_name(source)
    if target.is_file() or not make:
        return target if target.is_file() else None
    missing = missing_tools()
    if missing:
        raise MpiclusterError(
            f"sources.autogen: control: this machine has no {', '.join(missing)} to make "
            f"{source.component} {source.version}'s configure",
            hint="install autoconf, automake and libtool here (apt-get install autoconf "
            "automake libtool), or let the builder make it (sources.autogen: builder)",
        )
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".autogen-") as scratch:
        work = Path(scratch)
        with tarfile.open(path) as archive:
            archive.extractall(work, filter="data")
        tree = work / top_folder(source)
        _run_autogen(tree, source)
        partial = work / target.name
        with tarfile.open(partial, "w:gz") as packed:
            packed.add(tree, arcname=tree.name)
        partial.replace(target)  # whole or not at all: an interrupted run leaves none
    return target


def _run_autogen(tree: Path, source: Source) -> None:
    done = proc.run(["./autogen.sh"], cwd=tree, timeout=TIMEOUT, check=False)
    if done.returncode != 0 or not (tree / "configure").is_file():
        last = done.output.strip().splitlines()[-3:]
        raise MpiclusterError(
            f"autogen.sh of {source.component} {source.version} failed here "
            f"(exit {done.returncode}): {' / '.join(last) or 'no configure was made'}"
        )


def apply(files: dict[str, Path], needed: list[Source], *, make: bool = True) -> dict[str, Path]:
    """`files` with each UCX/UCC archive that lacks configure replaced by the one made
    here (`make` false: only where it was made before, as a dry run reads it)."""
    by_name = {source.component: source for source in needed}
    result = dict(files)
    for name in COMPONENTS:
        source = by_name.get(name)
        if source is None or name not in files or has_configure(files[name], source):
            continue
        made = generated(files[name], source, make=make)
        if made is not None:
            result[name] = made
    return result
