"""The Debian mirror this machine's apt uses, found in its apt sources.

mpicluster fetches from Debian's archive in two places: debootstrap (the local node
image) and `apt-get source` (a source package the lockfile pins). Both use the mirror
the control machine's own apt is set up with, so a proxy or internal mirror configured
once for apt is followed; MPICLUSTER_DEBIAN_MIRROR overrides it.

The parsers are pure (text in, entries out); `read_entries` reads the files apt reads
by default: /etc/apt/sources.list (one-line format) and, in /etc/apt/sources.list.d,
`*.list` (one-line) and `*.sources` (deb822) files. apt ignores other names there
(`foo.list.disabled`), and so does this module.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

from mpicluster.util.errors import MpiclusterError

ENV = "MPICLUSTER_DEBIAN_MIRROR"
SOURCES_LIST = PurePosixPath("etc/apt/sources.list")
SOURCES_PARTS = PurePosixPath("etc/apt/sources.list.d")

#: Debian's release code names and suite aliases, as the main archive names its suites.
DEBIAN_SUITES = frozenset(
    {
        *("buzz", "rex", "bo", "hamm", "slink", "potato", "woody", "sarge", "etch", "lenny"),
        *("squeeze", "wheezy", "jessie", "stretch", "buster", "bullseye", "bookworm"),
        *("trixie", "forky", "duke", "sid"),
        *("stable", "testing", "unstable", "oldstable", "oldoldstable", "experimental"),
    }
)
#: Suffixes the main archive adds to a suite (not -security: that is another archive).
DEBIAN_SUFFIXES = ("", "-updates", "-backports", "-backports-sloppy", "-proposed-updates")
#: Schemes both debootstrap and `apt-get source` can fetch from.
SCHEMES = ("http", "https", "file", "ftp")

_PART_NAME = re.compile(r"[A-Za-z0-9_.-]+\.(list|sources)")


@dataclass(frozen=True)
class Entry:
    """One apt source: a one-line entry, or a deb822 stanza."""

    types: tuple[str, ...]
    uris: tuple[str, ...]
    suites: tuple[str, ...]
    components: tuple[str, ...] = ()
    #: Options by lower-case name: signed-by, arch, trusted... (deb822 fields included).
    options: Mapping[str, str] = field(default_factory=dict)
    enabled: bool = True
    #: Where it was read: "file:line".
    origin: str = ""

    @property
    def signed_by(self) -> str | None:
        return self.options.get("signed-by") or None


@dataclass(frozen=True)
class Mirror:
    uri: str
    #: The keyring the entry names (a path), carried into a private source list.
    signed_by: str | None = None
    #: Where it came from: an apt source ("file:line") or the environment variable.
    origin: str = ""


def parse_one_line(text: str, origin: str = "") -> list[Entry]:
    """Entries of a sources.list in the one-line format (`deb [opts] uri suite comps`)."""
    entries = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        kind, _, rest = line.partition(" ")
        if kind not in ("deb", "deb-src"):
            continue
        options: dict[str, str] = {}
        rest = rest.strip()
        if rest.startswith("["):
            inside, closed, rest = rest[1:].partition("]")
            if not closed:
                continue  # apt refuses such a line
            for option in inside.split():
                key, _, value = option.partition("=")
                options[key.rstrip("+-").lower()] = value
        words = rest.split()
        if len(words) < 2:
            continue
        entries.append(
            Entry(
                (kind,),
                (words[0],),
                (words[1],),
                tuple(words[2:]),
                options,
                origin=f"{origin}:{number}",
            )
        )
    return entries


def parse_deb822(text: str, origin: str = "") -> list[Entry]:
    """Entries of a `.sources` file: deb822 stanzas separated by blank lines, `#` lines
    being comments (inside a stanza too), continuation lines starting with a space."""
    entries = []
    fields: dict[str, str] = {}
    start = 0
    last: str | None = None

    def flush() -> None:
        if fields:
            entry = _stanza(fields, f"{origin}:{start}")
            if entry is not None:
                entries.append(entry)
        fields.clear()

    for number, line in enumerate([*text.splitlines(), ""], start=1):
        if line.startswith("#"):
            continue
        if not line.strip():
            flush()
            last = None
            continue
        if line[0] in " \t":
            if last is not None:
                fields[last] += "\n" + line.strip()
            continue
        key, colon, value = line.partition(":")
        if not colon:
            continue
        if not fields:
            start = number
        last = key.strip().lower()
        fields[last] = value.strip()
    return entries


def _stanza(fields: Mapping[str, str], origin: str) -> Entry | None:
    types = tuple(t for t in fields.get("types", "").split() if t in ("deb", "deb-src"))
    uris = tuple(fields.get("uris", "").split())
    suites = tuple(fields.get("suites", "").split())
    if not types or not uris or not suites:
        return None
    enabled = fields.get("enabled", "yes").strip().lower() not in ("no", "false", "0")
    options = {
        key: value.strip()
        for key, value in fields.items()
        if key not in ("types", "uris", "suites", "components", "enabled")
    }
    return Entry(
        types,
        uris,
        suites,
        tuple(fields.get("components", "").split()),
        options,
        enabled,
        origin,
    )


def read_entries(root: Path = Path("/")) -> list[Entry]:
    """Every entry of this machine's apt sources, in the order apt reads them."""
    entries = []
    main = root / SOURCES_LIST
    entries += parse_one_line(_read(main), str(main))
    parts = root / SOURCES_PARTS
    names = sorted(p.name for p in parts.iterdir()) if parts.is_dir() else []
    for name in names:
        match = _PART_NAME.fullmatch(name)
        if not match:
            continue
        path = parts / name
        parse = parse_one_line if match[1] == "list" else parse_deb822
        entries += parse(_read(path), str(path))
    return entries


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:  # absent or unreadable: apt would complain, this just looks elsewhere
        return ""


def is_debian_suite(suite: str) -> bool:
    """`bookworm`, `bookworm-updates`, `stable-backports`: a suite of Debian's main
    archive (not bookworm-security, nor a third party's `bookworm-pgdg`)."""
    return any(
        suite.endswith(suffix) and suite[: len(suite) - len(suffix)] in DEBIAN_SUITES
        for suffix in DEBIAN_SUFFIXES
    )


def _debian_keyring(signed_by: str | None) -> bool | None:
    """True: Debian's archive keyring; False: another keyring; None: cannot tell (none
    named, so apt's trusted keys apply, or a key written inline)."""
    if not signed_by or signed_by.lstrip().startswith("-----BEGIN"):
        return None
    return all("debian-archive" in PurePosixPath(p).name for p in re.split(r"[\s,]+", signed_by))


def choose_debian_mirror(entries: Iterable[Entry]) -> Mirror | None:
    """The URI among `entries` that looks like Debian's main archive, or None.

    An entry counts when it is enabled, fetchable (http, https, file, ftp), has a suite
    of Debian's main archive with the `main` component, and is not signed by another
    keyring than Debian's (nodesource, docker, pgdg, a vendor's `bookworm main` repo).
    Among those: entries whose path ends in /debian first, then apt's order."""
    found: list[tuple[tuple[int, int, int], Mirror]] = []
    for index, entry in enumerate(entries):
        keyring = _debian_keyring(entry.signed_by)
        if not entry.enabled or keyring is False or "main" not in entry.components:
            continue
        if not any(is_debian_suite(suite) for suite in entry.suites):
            continue
        for uri in entry.uris:
            if urlparse(uri).scheme not in SCHEMES:
                continue
            named_debian = PurePosixPath(urlparse(uri).path).name == "debian"
            rank = (0 if named_debian else 1, 0 if keyring else 1, index)
            found.append(
                (rank, Mirror(uri.rstrip("/"), entry.signed_by if keyring else None, entry.origin))
            )
    return min(found, key=lambda pair: pair[0])[1] if found else None


def debian_mirror(environ: Mapping[str, str] = os.environ, root: Path = Path("/")) -> Mirror:
    """The Debian mirror to fetch from: $MPICLUSTER_DEBIAN_MIRROR, else the one this
    machine's apt sources use; a clear error when there is neither."""
    explicit = environ.get(ENV, "").strip()
    if explicit:
        return Mirror(explicit.rstrip("/"), None, ENV)
    mirror = choose_debian_mirror(read_entries(root))
    if mirror is not None:
        return mirror
    raise MpiclusterError(
        f"no Debian mirror found in this machine's apt sources ({root / SOURCES_LIST}, "
        f"{root / SOURCES_PARTS}/*.list and *.sources)",
        hint=f"set {ENV} to the URL of a Debian mirror (the base a sources.list line names, "
        "ending in /debian)",
    )


def debootstrap_mirror(environ: Mapping[str, str] = os.environ, root: Path = Path("/")) -> str:
    """The mirror argument for debootstrap."""
    return debian_mirror(environ, root).uri
