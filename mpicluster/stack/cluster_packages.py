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
conflict. A package that comes only as source (an sdist) is downloaded (its sha256 in
the manifest) and built once, here, into a wheel the resolution then takes with its
dependencies; the built wheel must be pure Python (the same on every node): one that
compiles is refused, named, since this machine is not the nodes.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from mpicluster.stack import wheels
from mpicluster.stack.cache import sha256_of
from mpicluster.stack.fingerprint import Platform
from mpicluster.util import proc
from mpicluster.util.errors import MpiclusterError, UsageError
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
        sources = _download_building_sources(fresh, platform, lines, pins, index_url, progress)
        install = {}
        for wheel in sorted(fresh.glob("*.whl")):
            name, version = wheel_name_version(wheel.name) or ("", "")
            if name in pins:  # the stack has it (at this version, by the constraints)
                wheel.unlink()
            else:
                install[name] = version
        files = {p.name: sha256_of(p) for p in sorted(fresh.glob("*.whl"))}
        record = {"asked": asked, "files": files, "install": install, "sources": sources}
        (fresh / "manifest.json").write_text(json.dumps(record, indent=2) + "\n")
        shutil.rmtree(folder, ignore_errors=True)
        fresh.rename(folder)
    finally:
        shutil.rmtree(fresh, ignore_errors=True)
    return ClusterPackages(folder, tuple(lines), files, install)


#: The most packages that come only as source one resolution builds
MAX_SOURCES = 20


class _NoWheel(Exception):
    def __init__(self, requirement: str) -> None:
        super().__init__(requirement)
        self.requirement = requirement


def _download_building_sources(
    into: Path,
    platform: Platform,
    lines: list[str],
    pins: dict[str, str],
    index_url: str | None,
    progress: Progress,
) -> dict[str, str]:
    """pip download of `lines`' wheels into `into`; each package with no wheel built
    here from its sdist (pure Python only) and offered to pip beside the index. The
    sdists taken: file name -> sha256."""
    built = into / ".built"
    sources: dict[str, str] = {}
    for _ in range(MAX_SOURCES + 1):
        try:
            _download(into, platform, lines, pins, index_url, built)
            break
        except _NoWheel as missing:
            if len(sources) == MAX_SOURCES:
                raise UsageError(
                    f"python.requirements: more than {MAX_SOURCES} packages come only as "
                    "source; nothing was installed"
                ) from None
            progress(f"Building {missing.requirement} from its source (no wheel on the index)")
            name, digest = _build_source(into, missing.requirement, pins, index_url, built)
            sources[name] = digest
    shutil.rmtree(built, ignore_errors=True)
    return sources


def _build_source(
    into: Path, requirement: str, pins: dict[str, str], index_url: str | None, built: Path
) -> tuple[str, str]:
    """The sdist of `requirement` (the stack's pins held), built into a wheel in
    `built`; a wheel that is not pure Python is refused. (sdist's name, its sha256)."""
    source = into / ".source"
    shutil.rmtree(source, ignore_errors=True)
    extra = ["--extra-index-url", index_url] if index_url else []
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    constraints = _constraints(into, pins)
    download = [*pip, "download", "--no-deps", "--no-binary", ":all:", "--dest", str(source)]
    download += ["--constraint", str(constraints), "--progress-bar", "off", *extra]
    fetched = proc.run([*download, requirement], check=False)
    sdists = sorted(source.glob("*")) if fetched.returncode == 0 else []
    if not sdists:
        raise UsageError(
            f"python.requirements: {requirement} has neither a wheel for the nodes' Python "
            f"nor a source on the index ({telling_line(fetched.output)}); nothing was installed"
        )
    made = proc.run(
        [*pip, "wheel", "--no-deps", "--wheel-dir", str(source / "wheel"), *extra, str(sdists[0])],
        check=False,
    )
    wheel = next(iter(sorted((source / "wheel").glob("*.whl"))), None)
    if made.returncode != 0 or wheel is None:
        raise UsageError(
            f"python.requirements: {sdists[0].name} (no wheel on the index) did not build: "
            f"{telling_line(made.output)}; nothing was installed"
        )
    if not wheel.name.endswith("-none-any.whl"):
        raise UsageError(
            f"python.requirements: {requirement} comes only as source and compiles "
            f"({wheel.name}); mpicluster builds only pure-Python sources (on this machine, "
            "not the nodes): pin a version with a wheel for the nodes; nothing was installed"
        )
    built.mkdir(exist_ok=True)
    shutil.move(str(wheel), built / wheel.name)
    taken = (sdists[0].name, sha256_of(sdists[0]))
    shutil.rmtree(source)
    return taken


def _constraints(into: Path, pins: dict[str, str]) -> Path:
    constraints = into / ".constraints.txt"
    constraints.write_text("".join(f"{name}=={version}\n" for name, version in pins.items()))
    return constraints


def _download(
    into: Path,
    platform: Platform,
    lines: list[str],
    pins: dict[str, str],
    index_url: str | None,
    built: Path,
) -> None:
    """pip download of `lines` for the nodes' platform, the stack's packages pinned (pip
    fails on a conflict; its words say which), the wheels built from source in `built`
    offered beside the index (_NoWheel names a package with neither)."""
    constraints = _constraints(into, pins)
    wanted = into / ".requirements.txt"
    wanted.write_text("".join(f"{line}\n" for line in lines))
    argv = wheels.download_argv(into, platform, index_url)
    argv += ["--constraint", str(constraints), "--requirement", str(wanted)]
    if built.is_dir():
        argv += ["--find-links", str(built)]
    done = proc.run(argv, check=False)
    constraints.unlink()
    wanted.unlink()
    if done.returncode != 0:
        missing = re.search(r"No matching distribution found for (\S+)", done.output)
        if missing and "ResolutionImpossible" not in done.output:
            raise _NoWheel(missing.group(1))
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
