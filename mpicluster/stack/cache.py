"""The source cache on the control machine: every download verified, nothing half-written.

Files live under the cache folder by their own name (`openmpi-5.0.8.tar.bz2`), so a
user can pre-seed it with files brought by hand. A file is used only when its sha256
matches the pin; a download whose checksum does not match is deleted and refused.

Each file is fetched the way its lockfile entry says (see mpicluster.cluster.lockfile):
a URL with urllib; a PyPI sdist with `pip download`, so pip's configuration (pip.conf,
PIP_INDEX_URL) decides the index; a Debian source package's file with `apt-get source`
from the Debian mirror this machine's apt uses, with a private source list and state
under the cache's `.apt` folder (the rest of apt's configuration, a proxy included,
still applies). `sources.mirror`, when set, is tried first for every file by its name.
Everything lands in a temporary file or folder inside the cache and is renamed into
place once verified.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mpicluster.cluster.lockfile import Debian, Origin, Pypi, Source, Url
from mpicluster.util import debian_archive, proc
from mpicluster.util.errors import CommandError, MpiclusterError, ToolMissingError
from mpicluster.util.text import telling_line

Progress = Callable[[str], None]
CHUNK = 1 << 20
#: How long one pip or apt-get command may take (a slow proxy, a large index).
TOOL_TIMEOUT = 900


class ChecksumMismatch(MpiclusterError):
    pass


class FetchFailed(MpiclusterError):
    """One way of fetching a file did not work; the next one is tried."""


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
    value = file_sha256(path)
    with contextlib.suppress(OSError):  # a read-only cache still works, just slower
        memo.write_text(f"{value} {key}\n")
    return value


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


class SourceCache:
    def __init__(self, root: Path, mirror: str | None = None):
        self.root = root.expanduser()
        self.mirror = mirror.rstrip("/") if mirror else None
        #: Files are fetched at once (prepare.fetch); `apt-get source` runs share one
        #: private apt state (its source list, lists and lock), so they take turns.
        self._apt_turn = threading.Lock()

    def path_for(self, source: Source) -> Path:
        return self.root / source.filename

    def lookup(self, source: Source) -> Path | None:
        """The cached file for `source` if present and verified."""
        path = self.path_for(source)
        if path.is_file() and sha256_of(path) == source.sha256:
            return path
        return None

    def ensure(self, source: Source, progress: Progress, *, offline: bool = False) -> CachedFile:
        """Return a verified file for `source` (or one of its alternates), fetching it if
        needed: from the mirror first (each file by name), then from each file's origin."""
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
                hint=f"run `mpicluster fetch`, or copy the file there ({source.origin.describe()})",
            )
        attempts: list[tuple[Source, Origin]] = []
        if self.mirror:
            attempts += [(v, Url(f"{self.mirror}/{v.filename}")) for v in variants]
        attempts += [(v, v.origin) for v in variants]
        errors = []
        for variant, origin in attempts:
            try:
                self._fetch(variant, origin, progress)
            except ChecksumMismatch:
                raise
            except MpiclusterError as exc:
                errors.append(f"{origin.describe()}: {exc.message}")
                continue
            return CachedFile(variant, self.path_for(variant), fetched=True)
        raise MpiclusterError(
            f"could not download {source.component} {source.version}: {'; '.join(errors)}",
            hint=f"copy {source.filename} into {self.root} by hand, or set sources.mirror",
        )

    def _fetch(self, source: Source, origin: Origin, progress: Progress) -> None:
        """Fetch `source` from `origin` into the cache, verified; FetchFailed if it cannot."""
        what = f"{source.component} {source.version}"
        self.root.mkdir(parents=True, exist_ok=True)
        if isinstance(origin, Url):
            progress(f"Downloading {what} from {origin.url}")
            self._download(origin.url, source)
        elif isinstance(origin, Pypi):
            progress(f"Downloading {what} with `pip download {origin.requirement}`")
            self._pip_download(origin, source)
        else:
            with self._apt_turn:
                self._apt_source(origin, source, progress)

    def _download(self, url: str, source: Source) -> None:
        fd, tmp_name = tempfile.mkstemp(
            dir=self.root, prefix=f".{source.filename}.", suffix=".part"
        )
        tmp = Path(tmp_name)
        digest = hashlib.sha256()
        try:
            try:
                with os.fdopen(fd, "wb") as out, _open(url) as stream:
                    while chunk := stream.read(CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
            except (OSError, urllib.error.URLError, ValueError) as exc:
                raise FetchFailed(str(getattr(exc, "reason", None) or exc)) from None
            self._place(tmp, digest.hexdigest(), source, url)
        finally:
            tmp.unlink(missing_ok=True)

    def _pip_download(self, origin: Pypi, source: Source) -> None:
        """`pip download` the sdist into a scratch folder of the cache; pip's own
        configuration picks the index (and its proxy and certificates). The no-binary
        rule names the package alone: `:all:` would hold for its build requirements too,
        and pip would compile Cython from source only to read mpi4py's metadata (159 s
        of a cold `up` on 2 cores, against 3 s)."""
        with self._scratch(source) as scratch:
            _tool(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-input",
                    "--no-binary",
                    origin.name,
                    "--no-deps",
                    "--dest",
                    str(scratch),
                    origin.requirement,
                ],
                f"pip download {origin.requirement}",
            )
            got = _the_file(scratch, source.filename)
            self._place(got, file_sha256(got), source, f"pip download {origin.requirement}")

    def _apt_source(self, origin: Debian, source: Source, progress: Progress) -> None:
        """`apt-get source --download-only` with a private source list and state, keep
        the one file the pin names."""
        if shutil.which("apt-get") is None:
            raise FetchFailed("apt-get is not on this machine (it fetches Debian sources)")
        mirror = debian_archive.debian_mirror()
        progress(
            f"Downloading {source.component} {source.version} as Debian source package "
            f"{origin.package}={origin.version} from {mirror.uri}"
        )
        options = self._private_apt(origin, mirror)
        updated = _tool(["apt-get", *options, "-q", "update"], "apt-get update")
        wanted = f"{origin.package}={origin.version}"
        with self._scratch(source) as scratch:
            try:
                _tool(
                    ["apt-get", *options, "-q", "source", "--download-only", wanted],
                    f"apt-get source {wanted}",
                    cwd=scratch,
                )
            except FetchFailed as exc:
                # apt-get update succeeds when an index fails to download; say so here
                failed = [line for line in updated.splitlines() if "Failed to fetch" in line]
                if failed:
                    exc.message += f" (apt-get update: {failed[-1].strip()})"
                raise
            got = _the_file(scratch, source.filename)
            self._place(got, file_sha256(got), source, origin.describe())

    def _private_apt(self, origin: Debian, mirror: debian_archive.Mirror) -> list[str]:
        """apt options for a source list of one deb-src line, lists and cache of its own
        (kept under the cache's .apt folder, so the next update is incremental)."""
        state = self.root / ".apt"
        (state / "lists" / "partial").mkdir(parents=True, exist_ok=True)
        (state / "cache" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
        signed = f"[signed-by={mirror.signed_by}] " if mirror.signed_by else ""
        line = f"deb-src {signed}{mirror.uri} {origin.suite} {origin.component}\n"
        (state / "sources.list").write_text(
            f"# written by mpicluster for `apt-get source` (from {mirror.origin})\n{line}"
        )
        return [
            "-o",
            f"Dir::Etc::SourceList={state / 'sources.list'}",
            "-o",
            "Dir::Etc::SourceParts=/nonexistent",
            "-o",
            f"Dir::State::Lists={state / 'lists'}",
            "-o",
            f"Dir::Cache={state / 'cache'}",
        ]

    @contextlib.contextmanager
    def _scratch(self, source: Source):
        """A temporary folder inside the cache (same file system: the rename is atomic)."""
        scratch = Path(tempfile.mkdtemp(dir=self.root, prefix=f".{source.filename}.", suffix=".d"))
        try:
            yield scratch
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _place(self, tmp: Path, actual: str, source: Source, where: str) -> None:
        """Rename a fetched file into the cache if its sha256 is the pin's; else delete it
        and refuse."""
        if actual != source.sha256:
            tmp.unlink(missing_ok=True)
            raise ChecksumMismatch(
                f"{source.component} {source.version} from {where}: sha256 {actual} does not "
                f"match the pin {source.sha256}; the download was deleted and nothing was "
                "installed",
                hint="a corrupted or tampered file, or a wrong checksum in the inventory",
            )
        tmp.replace(self.path_for(source))


def _tool(argv: list[str], name: str, cwd: Path | None = None) -> str:
    """Run pip or apt-get and return its output; FetchFailed with its telling line when it
    fails (`name` is how the message calls the command)."""
    try:
        result = proc.run(argv, check=False, timeout=TOOL_TIMEOUT, cwd=cwd)
    except ToolMissingError as exc:
        raise FetchFailed(exc.message) from None
    except CommandError:  # proc.run's timeout
        raise FetchFailed(f"`{name}` took more than {TOOL_TIMEOUT} s") from None
    if not result.ok:
        raise FetchFailed(f"`{name}` failed ({result.returncode}): {telling_line(result.output)}")
    return result.output


def _the_file(folder: Path, filename: str) -> Path:
    """The file a tool left in `folder`: the expected name, else its only file."""
    expected = folder / filename
    if expected.is_file():
        return expected
    files = [p for p in folder.iterdir() if p.is_file()]
    if len(files) == 1 and files[0].name.endswith((".tar.gz", ".zip", ".tar.xz", ".tar.bz2")):
        return files[0]
    names = ", ".join(sorted(p.name for p in files)) or "nothing"
    raise FetchFailed(f"expected {filename}, got {names}")


def _open(url: str):
    if url.startswith("/"):
        return Path(url).open("rb")
    if url.startswith("file://"):
        return Path(urllib.request.url2pathname(url[len("file://") :])).open("rb")
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"unsupported URL {url}")
    request = urllib.request.Request(url, headers={"User-Agent": "mpicluster"})  # noqa: S310
    return urllib.request.urlopen(request, timeout=60)  # noqa: S310 (scheme checked above)
