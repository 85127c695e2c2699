"""The cluster's own Python packages (the inventory's `python.requirements`).

Resolved once, on this machine, for the nodes' Python and platform, with every package
the stack's Python has pinned to the version it has (its wheelhouse's wheels, and
mpi4py and Horovod as built), into a wheelhouse of their own beside the stack's: each
file's sha256 in its manifest, the digest of requirements, pins and files naming it.
The nodes install what it holds offline, into a Python environment layered on the
stack's (its packages visible, the cluster's on top): no node downloads anything.

A requirement that asks for another version of one of the stack's packages is refused
before anything is downloaded or installed, naming both; one whose dependencies do
(pandas asking for an older numpy, say) is refused with pip's own account of the
conflict. Only wheels are taken: a package that comes only as source is named.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from mpicluster.errors import MpiclusterError, UsageError
from mpicluster.stack import wheels
from mpicluster.stack.cache import sha256_of
from mpicluster.stack.fingerprint import Platform
from mpicluster.util import proc
from mpicluster.util.text import telling_line

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ClusterPackages:
    """One platform's resolution: what the nodes install (`install`: name -> version,
    the stack's own packages left out: the nodes have them) from `path`'s wheels."""

    path: Path
    requirements: tuple[str, ...]
    files: dict[str, str]  # wheel file name -> sha256
    install: dict[str, str]

    @property
    def digest(self) -> str:
        canonical = json.dumps(
            {"requirements": self.requirements, "files": self.files}, sort_keys=True
        )
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def to_dict(self) -> dict:
        return {
            "path": str(self.path),
            "requirements": list(self.requirements),
            "install": self.install,
            "files": len(self.files),
            "digest": self.digest,
        }


def wheel_name_version(filename: str) -> tuple[str, str] | None:
    try:
        name, version, _, _ = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return None
    return canonicalize_name(name), str(version)


def stack_pins(house: wheels.Wheelhouse, built: dict[str, str]) -> dict[str, str]:
    """Every package of the stack's Python, canonical name -> version: its wheelhouse's
    wheels, and what is built from source (mpi4py, Horovod)."""
    pins = {}
    for filename in house.files:
        found = wheel_name_version(filename)
        if found:
            pins[found[0]] = found[1]
    pins.update({canonicalize_name(name): version for name, version in built.items()})
    return dict(sorted(pins.items()))


def conflicts(lines: list[str], pins: dict[str, str]) -> list[str]:
    """The lines that ask for another version of one of the stack's packages, each
    said with both pins."""
    found = []
    for line in lines:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        have = pins.get(name)
        if have is not None and not requirement.specifier.contains(have, prereleases=True):
            found.append(f"{line!r} conflicts with the stack's {name}=={have}")
    return found


def refuse_conflicts(lines: list[str], pins: dict[str, str]) -> None:
    found = conflicts(lines, pins)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise UsageError(
            f"python.requirements: {found[0]}{more}; nothing was installed",
            hint="drop the pin, or pin what the stack has (stack.pytorch.version moves PyTorch)",
        )


def resolve(
    cache_root: Path,
    platform: Platform,
    lines: list[str],
    pins: dict[str, str],
    progress: Progress,
    *,
    offline: bool = False,
    index_url: str | None = None,
    kind: str = "cluster",
) -> ClusterPackages:
    """The wheels `lines` need on `platform` with the stack's packages at `pins`, in
    the cache (downloaded once: a manifest for the same lines and pins is reused);
    `kind` names the folder: the cluster's packages, or a job's (`job-<digest>`)."""
    refuse_conflicts(lines, pins)
    folder = cache_root / "wheels" / f"{wheels.house_name(platform, index_url)}-{kind}"
    manifest = folder / "manifest.json"
    asked = {"requirements": lines, "pins": pins}
    if manifest.exists():
        recorded = json.loads(manifest.read_text())
        files = recorded.get("files", {})
        if recorded.get("asked") == asked and all((folder / n).is_file() for n in files):
            return ClusterPackages(folder, tuple(lines), files, recorded["install"])
    if offline:
        raise MpiclusterError(
            f"the cluster's packages for {platform.wheel_target} are missing or stale in {folder}",
            hint="run `mpicluster fetch INVENTORY` where PyPI (or your index) is reachable",
        )
    progress(f"Resolving the cluster's packages for {platform.wheel_target}: {', '.join(lines)}")
    folder.parent.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix=".cluster-", dir=folder.parent))
    try:
        _download(fresh, platform, lines, pins, index_url)
        install = {}
        for wheel in sorted(fresh.glob("*.whl")):
            name, version = wheel_name_version(wheel.name) or ("", "")
            if name in pins:  # the stack has it (at this version, by the constraints)
                wheel.unlink()
            else:
                install[name] = version
        files = {p.name: sha256_of(p) for p in sorted(fresh.glob("*.whl"))}
        record = {"asked": asked, "files": files, "install": install}
        (fresh / "manifest.json").write_text(json.dumps(record, indent=2) + "\n")
        shutil.rmtree(folder, ignore_errors=True)
        fresh.rename(folder)
    finally:
        shutil.rmtree(fresh, ignore_errors=True)
    return ClusterPackages(folder, tuple(lines), files, install)


def _download(
    into: Path, platform: Platform, lines: list[str], pins: dict[str, str], index_url: str | None
) -> None:
    """pip download of `lines` for the nodes' platform, the stack's packages pinned (pip
    fails on a conflict; its words say which)."""
    constraints = into / ".constraints.txt"
    constraints.write_text("".join(f"{name}=={version}\n" for name, version in pins.items()))
    wanted = into / ".requirements.txt"
    wanted.write_text("".join(f"{line}\n" for line in lines))
    argv = wheels.download_argv(into, platform, index_url)
    argv += ["--constraint", str(constraints), "--requirement", str(wanted)]
    done = proc.run(argv, check=False)
    constraints.unlink()
    wanted.unlink()
    if done.returncode != 0:
        raise _refusal(done.output, platform)


def _refusal(output: str, platform: Platform) -> MpiclusterError:
    """pip's failure as one line: a conflict (UsageError), or what has no wheel."""
    lines = output.splitlines()
    if "ResolutionImpossible" in output or "conflict is caused by" in output:
        start = next((i for i, t in enumerate(lines) if "conflict is caused by" in t), None)
        causes = []
        if start is not None:
            for line in lines[start + 1 :]:
                if not line.strip():
                    break
                causes.append(line.strip())
        return UsageError(
            "python.requirements conflict with the stack's packages (pinned to what it has): "
            + ("; ".join(causes) or telling_line(output))
            + "; nothing was installed"
        )
    missing = re.search(r"No matching distribution found for (\S+)", output)
    if missing:
        return UsageError(
            f"python.requirements: {missing.group(1)} has no wheel for the nodes' Python "
            f"({platform.wheel_target}) on the index; packages that come only as source "
            "are not built yet: pin a version that has a wheel; nothing was installed"
        )
    return MpiclusterError(
        f"pip could not resolve the cluster's packages: {telling_line(output)}",
        hint="check your index (PIP_INDEX_URL)",
    )
