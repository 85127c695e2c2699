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
    """A file or folder shipped with mpicluster, all in one folder: mpicluster/data.

    The lockfile and the patches live there in the source tree too; the playbooks, the
    templates and the Vagrantfile sit at the top of a source checkout, where users read
    them, and a wheel carries them into mpicluster/data (pyproject.toml).
    """
    for candidate in (_PACKAGE / "data" / name, _PACKAGE.parent / name):
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"mpicluster data file {name!r} is missing from this installation")
