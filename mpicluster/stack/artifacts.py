"""The artifact cache: one packed stack per fingerprint, with the sha256 recorded when it
was filed (`stack-<fp>.tar.gz.sha256` beside it, written by the stack_build role).

An artifact is checked against that record before any node gets it: a pack corrupted or
truncated in the cache is refused with its path, never installed. The nodes check the
copy they receive against the same sha256 (stack_install) before unpacking it.
"""

from __future__ import annotations

import tarfile
import zlib
from pathlib import Path

from mpicluster.stack.cache import file_sha256
from mpicluster.util.errors import MpiclusterError
from mpicluster.util.files import write_atomic


def checksum_path(artifact: Path) -> Path:
    return artifact.with_name(artifact.name + ".sha256")


def recorded(artifact: Path) -> str | None:
    try:
        text = checksum_path(artifact).read_text()
    except FileNotFoundError:
        return None
    return (text.split() or [""])[0]


def verify(artifact: Path) -> str:
    """The artifact's sha256, checked against the one recorded when it was filed.

    A pack from before records were kept is read through (gzip stream and tar index)
    and its sha256 recorded if it is whole."""
    hint = (
        f"remove it and run `up` again to build the stack anew: rm {artifact} "
        f"{checksum_path(artifact)}"
    )
    try:
        actual = file_sha256(artifact)
    except OSError as exc:
        raise MpiclusterError(f"artifact cache: cannot read {artifact}: {exc.strerror}") from None
    expected = recorded(artifact)
    if expected is not None:
        if actual != expected:
            raise MpiclusterError(
                f"artifact cache: {artifact} does not match the sha256 recorded when it was "
                f"packed ({expected[:16]}..., now {actual[:16]}...): corrupted or truncated; "
                "nothing was installed",
                hint=hint,
            )
        return actual
    try:
        with tarfile.open(artifact, "r:gz") as tar:
            for _ in tar:
                pass
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise MpiclusterError(
            f"artifact cache: {artifact} is not a whole packed stack ({exc}); nothing was "
            "installed",
            hint=hint,
        ) from None
    write_atomic(checksum_path(artifact), f"{actual}  {artifact.name}\n")
    return actual
