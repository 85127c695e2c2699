"""The source cache on the control machine: every download verified, nothing half-written.

Files live under the cache folder by their upstream name (`openmpi-5.0.8.tar.bz2`),
so a user can pre-seed it with files brought by hand. A file is used only when its
sha256 matches the pin; a download whose checksum does not match is deleted and
refused. Downloads go to a temporary file and are renamed into place when verified.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mpicluster.errors import MpiclusterError
from mpicluster.stack.sources import Source

Progress = Callable[[str], None]
CHUNK = 1 << 20


class ChecksumMismatch(MpiclusterError):
    pass


@dataclass(frozen=True)
class CachedFile:
    source: Source
    path: Path
    fetched: bool  # False: it was already in the cache


def sha256_of(path: Path) -> str:
    """The file's sha256, remembered beside it (keyed by size and mtime) to skip rehashing."""
    stat = path.stat()
    memo = path.with_name(f".{path.name}.sha256")
    key = f"{stat.st_size} {stat.st_mtime_ns}"
    if memo.exists():
        digest, _, remembered = memo.read_text().strip().partition(" ")
        if remembered == key:
            return digest
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    value = digest.hexdigest()
    with contextlib.suppress(OSError):  # a read-only cache still works, just slower
        memo.write_text(f"{value} {key}\n")
    return value


class SourceCache:
    def __init__(self, root: Path, mirror: str | None = None):
        self.root = root.expanduser()
        self.mirror = mirror.rstrip("/") if mirror else None

    def path_for(self, source: Source) -> Path:
        return self.root / source.filename

    def lookup(self, source: Source) -> Path | None:
        """The cached file for `source` if present and verified."""
        path = self.path_for(source)
        if path.is_file() and sha256_of(path) == source.sha256:
            return path
        return None

    def ensure(self, source: Source, progress: Progress, *, offline: bool = False) -> CachedFile:
        """Return a verified file for `source` (or one of its alternates), downloading it
        if needed: the mirror first, then the upstream URL, then the alternates."""
        variants = source.variants()
        for variant in variants:
            found = self.lookup(variant)
            if found is not None:
                return CachedFile(variant, found, fetched=False)
        target = self.path_for(source)
        if target.is_file():
            actual = sha256_of(target)
            raise ChecksumMismatch(
                f"{target}: sha256 {actual} does not match the pin {source.sha256} for "
                f"{source.component} {source.version}",
                hint="remove the file, or fix the checksum in the inventory",
            )
        if offline:
            raise MpiclusterError(
                f"{source.component} {source.version}: {source.filename} is not in the source "
                f"cache {self.root}",
                hint=f"run `mpicluster fetch`, or copy the file there ({source.url})",
            )
        attempts = [(f"{self.mirror}/{source.filename}", source)] if self.mirror else []
        attempts += [(variant.url, variant) for variant in variants]
        errors = []
        for url, variant in attempts:
            progress(f"Downloading {source.component} {source.version} from {url}")
            try:
                self._download(url, variant, self.path_for(variant))
            except ChecksumMismatch:
                raise
            except (OSError, urllib.error.URLError, ValueError) as exc:
                errors.append(f"{url}: {getattr(exc, 'reason', None) or exc}")
                continue
            return CachedFile(variant, self.path_for(variant), fetched=True)
        raise MpiclusterError(
            f"could not download {source.component} {source.version}: {'; '.join(errors)}",
            hint=f"copy {source.filename} into {self.root} by hand, or set sources.mirror",
        )

    def _download(self, url: str, source: Source, target: Path) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(
            dir=self.root, prefix=f".{source.filename}.", suffix=".part"
        )
        tmp = Path(tmp_name)
        digest = hashlib.sha256()
        try:
            with os.fdopen(fd, "wb") as out, _open(url) as stream:
                while chunk := stream.read(CHUNK):
                    digest.update(chunk)
                    out.write(chunk)
            actual = digest.hexdigest()
            if actual != source.sha256:
                raise ChecksumMismatch(
                    f"{source.component} {source.version} from {url}: sha256 {actual} does not "
                    f"match the pin {source.sha256}; the download was deleted and nothing was "
                    "installed",
                    hint="a corrupted or tampered file, or a wrong checksum in the inventory",
                )
            tmp.replace(target)
        finally:
            tmp.unlink(missing_ok=True)


def _open(url: str):
    if url.startswith("/"):
        return Path(url).open("rb")
    if url.startswith("file://"):
        return Path(urllib.request.url2pathname(url[len("file://") :])).open("rb")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"unsupported URL {url}")
    request = urllib.request.Request(url, headers={"User-Agent": "mpicluster"})  # noqa: S310
    return urllib.request.urlopen(request, timeout=60)  # noqa: S310 (scheme checked above)


def copy_into(cache: SourceCache, path: Path) -> Path:
    """Seed the cache with a file brought by hand (its name kept)."""
    cache.root.mkdir(parents=True, exist_ok=True)
    target = cache.root / path.name
    if target.resolve() != path.resolve():
        shutil.copyfile(path, target)
    return target
