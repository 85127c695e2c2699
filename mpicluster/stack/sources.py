"""Which sources a cluster needs: the lockfile's pins, overridden by the inventory.

The lockfile (mpicluster/data/stack.lock.yaml) pins, for every component, the
upstream URL and sha256 of each release mpicluster knows; `default` is what an
inventory gets when it names no version. A version like `5.0.x` means the newest
pinned release of that series. An inventory may give `url` and `sha256` (and an
exact `version`) for anything else, a local file included.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import PurePosixPath
from urllib.parse import unquote, urlparse

import yaml

from mpicluster.errors import UsageError
from mpicluster.inventory import Inventory
from mpicluster.paths import package_data

COMPONENTS = ("openmpi", "nccl", "mpi4py", "horovod")


@dataclass(frozen=True)
class Source:
    component: str
    version: str
    url: str
    sha256: str
    cache_name: str = ""
    #: Other files of the same release (url, sha256, cache name), e.g. a distribution's
    #: copy of the upstream tree, tried when the upstream URL cannot be reached.
    alternates: tuple[tuple[str, str, str], ...] = ()

    def variants(self) -> list[Source]:
        """This source, then each alternate as a source of its own."""
        others = [
            Source(self.component, self.version, url, sha, name)
            for url, sha, name in self.alternates
        ]
        return [self, *others]

    @property
    def filename(self) -> str:
        """The file's name in the source cache."""
        return self.cache_name or PurePosixPath(unquote(urlparse(self.url).path)).name

    @property
    def series(self) -> tuple[int, ...]:
        return tuple(int(p) for p in re.findall(r"\d+", self.version)[:2])


@cache
def lockfile() -> dict:
    return yaml.safe_load(package_data("stack.lock.yaml").read_text())


def resolve(component: str, version: str | None, url: str | None, sha256: str | None) -> Source:
    """One component's source; raises UsageError naming the field when it cannot."""
    entry = lockfile()[component]
    releases: dict[str, dict] = {str(k): v for k, v in entry["releases"].items()}
    where = f"stack.{component}"
    if url:
        if not version or version.endswith(".x"):
            raise UsageError(f"{where}.version: give the exact version of the file at url")
        return Source(component, version, url, sha256 or "")
    wanted = version or str(entry["default"])
    if wanted.endswith(".x"):
        series = wanted[:-1]
        matching = [v for v in releases if v.startswith(series)]
        if not matching:
            known = ", ".join(sorted(releases, key=_version_key))
            raise UsageError(
                f"{where}.version: no pinned {component} release in {wanted} "
                f"(pinned: {known}); give url and sha256 for another"
            )
        wanted = max(matching, key=_version_key)
    if wanted not in releases:
        known = ", ".join(sorted(releases, key=_version_key))
        raise UsageError(
            f"{where}.version: {component} {wanted} is not pinned (pinned: {known}); "
            "give url and sha256 beside it"
        )
    pin = releases[wanted]
    alternates = tuple(
        (a["url"], a["sha256"], a.get("filename", "")) for a in pin.get("alternates", [])
    )
    return Source(component, wanted, pin["url"], pin["sha256"], pin.get("filename", ""), alternates)


def needed(inventory: Inventory) -> list[Source]:
    """The sources `up` needs for this inventory (none for `install: packages`)."""
    stack = inventory.stack
    if stack.install != "source":
        return []
    wanted = ["openmpi", "mpi4py"]
    if inventory.has_gpus:
        wanted.append("nccl")
    if stack.horovod.enabled:
        wanted.append("horovod")
    return [
        resolve(
            name,
            getattr(stack, name).version,
            getattr(stack, name).url,
            getattr(stack, name).sha256,
        )
        for name in wanted
    ]


def pytorch_version(inventory: Inventory) -> str:
    return inventory.stack.pytorch.version or str(lockfile()["pytorch"]["default"])


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version))
