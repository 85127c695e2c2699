"""The lockfile: every release mpicluster knows, where its file comes from and its sha256.

This module reads mpicluster/data/stack.lock.yaml and nothing else of mpicluster's
(the inventory imports it to check versions, so it must not import the inventory).

Each pinned file names where it comes from in one of three ways:

* `url:` an upstream release file (download.open-mpi.org, a GitHub tag archive);
* `pypi: NAME==VERSION`: an sdist fetched with `pip download`, so pip's own
  configuration (pip.conf, PIP_INDEX_URL: a devpi or Artifactory proxy) decides
  the index it comes from;
* `debian: {package, version, suite}`: a file of a Debian source package fetched
  with `apt-get source` from the Debian mirror this machine's apt uses.

`pypi` and `debian` entries give `filename` (the file kept in the cache) beside
`sha256`; a `url` entry may give it when the URL's own name is not telling.
`alternates` lists other files of the same release, tried when the first cannot
be fetched (Debian's copy of an upstream tree, for instance).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import unquote, urlparse

import yaml

from mpicluster.util.errors import MpiclusterError, UsageError
from mpicluster.util.paths import data_path

COMPONENTS = ("openmpi", "ucx", "ucc", "nccl", "nccl_tests", "mpi4py", "horovod")
#: The components whose build applies the lockfile's patches (stack_build's horovod.yml).
PATCHED = ("horovod",)


class LockfileError(UsageError):
    """A version or source that cannot be resolved; `field` is the inventory field to
    fix (`stack.openmpi.version`) and `reason` says what is wrong with it."""

    def __init__(self, field: str, reason: str, *, hint: str | None = None):
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}", hint=hint)


@dataclass(frozen=True)
class Url:
    """A file at a URL (http, https, file://) or an absolute path."""

    url: str

    def describe(self) -> str:
        return self.url


@dataclass(frozen=True)
class Pypi:
    """An sdist on the Python package index pip is configured to use."""

    name: str
    version: str

    @property
    def requirement(self) -> str:
        return f"{self.name}=={self.version}"

    def describe(self) -> str:
        return f"pip download {self.requirement}"


@dataclass(frozen=True)
class Debian:
    """A file of a Debian source package, fetched with `apt-get source`."""

    package: str
    version: str
    suite: str
    component: str = "main"

    def describe(self) -> str:
        return f"Debian source package {self.package}={self.version} ({self.suite})"


Origin = Url | Pypi | Debian


@dataclass(frozen=True)
class Patch:
    """A change mpicluster makes to a pinned release's tree before building it: a file
    in mpicluster/data/patches (why it is needed is written at its top), with its sha256."""

    file: str
    sha256: str

    @property
    def path(self) -> Path:
        return data_path(f"patches/{self.file}")

    def verified(self) -> Path:
        """The patch file, after checking it is the one the lockfile pins."""
        digest = hashlib.sha256(self.path.read_bytes()).hexdigest()
        if digest != self.sha256:
            raise MpiclusterError(
                f"{self.path}: sha256 {digest} is not the lockfile's {self.sha256}",
                hint="the patch was changed after it was pinned: restore it, or pin the new one",
            )
        return self.path


@dataclass(frozen=True)
class Source:
    """One file of one component's release, and where to fetch it."""

    component: str
    version: str
    origin: Origin
    sha256: str
    #: The file's name in the source cache ("" for a URL: the URL's own file name).
    cache_name: str = ""
    #: Other files of the same release (each a Source of its own, without alternates),
    #: tried when this one cannot be fetched.
    alternates: tuple[Source, ...] = ()
    #: Applied to the unpacked tree, in order, before the build.
    patches: tuple[Patch, ...] = ()

    def variants(self) -> list[Source]:
        """This source, then each alternate."""
        return [self, *self.alternates]

    @property
    def filename(self) -> str:
        """The file's name in the source cache."""
        if self.cache_name:
            return self.cache_name
        if isinstance(self.origin, Url):
            return PurePosixPath(unquote(urlparse(self.origin.url).path)).name
        raise ValueError(f"{self.component} {self.version}: no file name for {self.origin}")

    @property
    def url(self) -> str:
        """The URL for a `url` source; "" for one fetched through a package tool."""
        return self.origin.url if isinstance(self.origin, Url) else ""

    @property
    def series(self) -> tuple[int, ...]:
        return tuple(int(p) for p in re.findall(r"\d+", self.version)[:2])


@cache
def lockfile() -> dict[str, Any]:
    return yaml.safe_load(data_path("stack.lock.yaml").read_text())


def releases(component: str) -> dict[str, Source]:
    """Every pinned release of `component`, by version."""
    entry = lockfile()[component]
    return {
        str(version): _pinned(component, str(version), pin)
        for version, pin in entry["releases"].items()
    }


def default_version(component: str) -> str:
    return str(lockfile()[component]["default"])


def oldest_version(component: str) -> str | None:
    """The oldest release of a component pip installs (`oldest`), None where none is given."""
    oldest = lockfile()[component].get("oldest")
    return None if oldest is None else str(oldest)


def resolve(component: str, version: str | None, url: str | None, sha256: str | None) -> Source:
    """One component's source; raises LockfileError naming the field when it cannot."""
    where = f"stack.{component}"
    if url:
        if not version or version.endswith(".x"):
            raise LockfileError(f"{where}.version", "give the exact version of the file at url")
        return Source(component, version, Url(url), sha256 or "")
    pinned = releases(component)
    known = ", ".join(sorted(pinned, key=_version_key))
    wanted = version or default_version(component)
    if wanted.endswith(".x"):
        series = wanted[:-1]
        matching = [v for v in pinned if v.startswith(series)]
        if not matching:
            raise LockfileError(
                f"{where}.version",
                f"no pinned {component} release in {wanted} (pinned: {known}); "
                "give url and sha256 for another",
            )
        wanted = max(matching, key=_version_key)
    if wanted not in pinned:
        raise LockfileError(
            f"{where}.version",
            f"{component} {wanted} is not pinned (pinned: {known}); give url and sha256 beside it",
        )
    return pinned[wanted]


def suite_files(project: str, version: str) -> dict[str, Source]:
    """The pinned files of a peer's own test suite (`suites:` in the lockfile), by their
    path in the project's tree."""
    pins = lockfile().get("suites", {}).get(project, {}).get(version)
    if not pins:
        raise LockfileError(f"suites.{project}", f"no pinned test suite for {project} {version}")
    return {path: _file(f"{project} tests", version, pin) for path, pin in pins.items()}


def _pinned(component: str, version: str, pin: dict[str, Any]) -> Source:
    # every file of a release is the same tree: each gets the release's patches
    patches = tuple(Patch(str(p["file"]), str(p["sha256"])) for p in pin.get("patches", []))
    if patches and component not in PATCHED:
        raise ValueError(f"lockfile {component} {version}: only {PATCHED} builds apply patches")
    alternates = tuple(
        replace(_file(component, version, alt), patches=patches)
        for alt in pin.get("alternates", [])
    )
    first = _file(component, version, pin)
    return Source(
        component, version, first.origin, first.sha256, first.cache_name, alternates, patches
    )


def _file(component: str, version: str, pin: dict[str, Any]) -> Source:
    """One pinned file: exactly one of url, pypi, debian, plus sha256 (and filename)."""
    where = f"lockfile {component} {version}"
    kinds = [kind for kind in ("url", "pypi", "debian") if kind in pin]
    if len(kinds) != 1:
        raise ValueError(f"{where}: give exactly one of url, pypi, debian (got {kinds})")
    sha256 = str(pin["sha256"])
    filename = str(pin.get("filename", ""))
    origin: Origin
    if "url" in pin:
        origin = Url(str(pin["url"]))
    elif "pypi" in pin:
        match = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*(\S+)\s*", str(pin["pypi"]))
        if not match:
            raise ValueError(f"{where}: pypi must read NAME==VERSION (got {pin['pypi']!r})")
        origin = Pypi(match[1], match[2])
    else:
        deb = pin["debian"]
        origin = Debian(
            str(deb["package"]),
            str(deb["version"]),
            str(deb["suite"]),
            str(deb.get("component", "main")),
        )
    if not isinstance(origin, Url) and not filename:
        raise ValueError(f"{where}: a pypi or debian file needs `filename`")
    return Source(component, version, origin, sha256, filename)


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))
