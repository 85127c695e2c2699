"""Where mpicluster keeps its files on the control machine, and where its data ships."""

from __future__ import annotations

import os
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1]  # the mpicluster package


def state_dir() -> Path:
    """Keys, logs and local-cluster state: $MPICLUSTER_HOME, else $XDG_STATE_HOME/mpicluster."""
    explicit = os.environ.get("MPICLUSTER_HOME")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return base / "mpicluster"


def display_path(path: Path) -> str:
    """`path` with the home directory written as ~, as inventories show it."""
    try:
        return "~/" + str(path.relative_to(Path.home()))
    except ValueError:
        return str(path)


def data_path(name: str) -> Path:
    """A file or folder shipped with mpicluster (playbooks, Vagrantfile).

    In a wheel they live in mpicluster/_data; in a source checkout, at the top level.
    """
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"mpicluster data file {name!r} is missing from this installation")


def package_data(name: str) -> Path:
    """A file in mpicluster/data (lockfile and the like), part of the package itself."""
    return _PACKAGE / "data" / name
