"""Whether the PyTorch release an inventory names can be installed, told without any
network.

PyTorch is not built from a pinned file: `fetch` asks pip for `torch==V` (with "+cpu"
or "!=V+cpu" for the build: stack/sources.py), from PyPI and, beside it,
stack.pytorch.index_url. What is known here: V must be one release (`==V`, not a
series) and not older than the lockfile's `oldest`, the first release with wheels for
the stack's Python. A local index (a folder, or a file:// URL) lists what it holds:
those releases are named beside the choices, but a release it lacks is not refused,
since pip asks PyPI too.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlparse

from packaging.version import InvalidVersion, Version

from mpicluster.cluster.lockfile import default_version, oldest_version

#: A wheel or sdist of torch: torch-2.13.0+cpu-cp311-...whl, torch-2.13.0.tar.gz.
_TORCH_FILE = re.compile(r"torch-([0-9][^-]*?)(?:-.*\.whl|\.tar\.gz|\.zip)$")
_HREF = re.compile(r"""href\s*=\s*["']([^"'#?]+)""", re.IGNORECASE)
#: Bigger than any index page of one project: something else.
_PAGE_LIMIT = 8 << 20


def problem_of(version: str, index_url: str | None) -> str | None:
    """Why pip cannot install PyTorch `version` into the stack's Python (None: it may)."""
    choices = _choices(index_url)
    if version.endswith(".x"):
        return f"{version} is a series: pip is asked for one release of PyTorch; {choices}"
    try:
        wanted = Version(version)
    except InvalidVersion:
        return f"{version} is not a release pip knows (PEP 440); {choices}"
    oldest = oldest_version("pytorch")
    if oldest and wanted < Version(oldest):
        return (
            f"PyTorch {version} cannot be installed: it has no wheels for the stack's Python "
            f"(3.10 or newer); {choices}"
        )
    return None


def _choices(index_url: str | None) -> str:
    """The releases an inventory can name, in words."""
    oldest = oldest_version("pytorch")
    given = f"give {oldest} or newer" if oldest else "give a release"
    words = f"{given} (the lockfile's default: {default_version('pytorch')})"
    folder = local_index(index_url)
    if folder is not None:
        found = index_releases(folder)
        held = ", ".join(found) if found else "no PyTorch"
        words += f"; the local index {index_url} holds {held}"
    return words


def local_index(index_url: str | None) -> Path | None:
    """The folder of an index on this machine (an absolute path or a file:// URL)."""
    if not index_url:
        return None
    if index_url.startswith("/"):
        return Path(index_url)
    parsed = urlparse(index_url)
    if parsed.scheme == "file" and parsed.netloc in ("", "localhost"):
        return Path(unquote(parsed.path))
    return None


def index_releases(folder: Path) -> list[str]:
    """The PyTorch releases a local index holds, oldest first: the torch files in its
    project folder (`torch/`, as pip reads an index; its index.html's links too) or at
    its top (a folder of wheels)."""
    names: set[str] = set()
    for place in (folder / "torch", folder):
        try:
            names.update(p.name for p in place.iterdir())
            page = place / "index.html"
            if page.is_file() and page.stat().st_size < _PAGE_LIMIT:
                text = page.read_text(encoding="utf-8", errors="replace")
                names.update(unquote(href).rsplit("/", 1)[-1] for href in _HREF.findall(text))
        except OSError:
            continue
    releases = set()
    for name in names:
        match = _TORCH_FILE.match(name)
        if match:
            try:
                releases.add(Version(match.group(1)).public)
            except InvalidVersion:
                continue
    return sorted(releases, key=Version)
