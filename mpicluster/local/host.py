"""Make this machine able to run the local cluster: tools, Podman settings, a docker shim."""

from __future__ import annotations

import os
import resource
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

from mpicluster.nodes import arp_table as neighbour
from mpicluster.util import proc
from mpicluster.util.errors import ToolMissingError, UsageError
from mpicluster.util.paths import state_dir

Progress = Callable[[str], None]

#: Debian packages the docker (Podman) provider needs, and a file each one provides.
DOCKER_PROVIDER_PACKAGES = {
    "podman": "/usr/bin/podman",
    "runc": "/usr/sbin/runc",
    "netavark": "/usr/lib/podman/netavark",
    "aardvark-dns": "/usr/lib/podman/aardvark-dns",
    "uidmap": "/usr/bin/newuidmap",
    "iptables": "/usr/sbin/iptables",
    "vagrant": "/usr/bin/vagrant",
    "debootstrap": "/usr/sbin/debootstrap",
    "openssh-client": "/usr/bin/ssh",
}

# crun fails on these machines ("cgroups in hybrid mode not supported") and the
# default rlimits are refused, so the local cluster runs with its own settings.
_CONTAINERS_CONF = """\
# Written by mpicluster for its local cluster; used through CONTAINERS_CONF.
[containers]
default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]
{runtime}
"""


def provider_packages(provider: str) -> dict[str, str]:
    """The Debian packages `provider` needs on this machine, each with a file it provides."""
    if provider != "docker":
        return {"vagrant": "vagrant"}  # libvirt, virtualbox: any vagrant on PATH
    return dict(DOCKER_PROVIDER_PACKAGES)


def missing_packages(packages: Mapping[str, str]) -> list[str]:
    """The packages whose file is not on this machine."""
    return [pkg for pkg, path in packages.items() if not _present(path)]


def _present(path: str) -> bool:
    """A file, or a bare command name looked up on PATH (vagrant may live elsewhere)."""
    return shutil.which(path) is not None if "/" not in path else Path(path).exists()


def ensure_tools(provider: str, progress: Progress) -> None:
    """Install what the provider needs with apt-get when possible, else say what to install."""
    ensure_packages(provider_packages(provider), progress)


def ensure_packages(packages: Mapping[str, str], progress: Progress) -> None:
    """Install the missing ones of `packages` (name: a file it provides) with apt-get as
    root, else raise naming them and the command that installs them."""
    missing = missing_packages(packages)
    if not missing:
        return
    command = f"apt-get install -y --no-install-recommends {' '.join(missing)}"
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise ToolMissingError(
            f"missing on this machine: {', '.join(missing)}",
            hint=f"install them (as root: {command}) and run again",
        )
    progress(f"Installing {', '.join(missing)} with apt-get")
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    result = proc.run(
        ["apt-get", "install", "-y", "--no-install-recommends", *missing], env=env, check=False
    )
    if not result.ok:  # stale package lists are the usual cause on a fresh machine
        proc.run(["apt-get", "update"], env=env, hint="apt-get update failed")
        proc.run(
            ["apt-get", "install", "-y", "--no-install-recommends", *missing],
            env=env,
            hint=f"could not install {', '.join(missing)}",
        )
    still = missing_packages(packages)
    if still:
        raise ToolMissingError(f"still missing after apt-get install: {', '.join(still)}")


def require_root(provider: str) -> None:
    if provider == "docker" and os.geteuid() != 0:
        raise UsageError(
            "the local cluster needs root: rootful Podman gives each node its own reachable "
            "address",
            hint="run it with sudo, or use --provider libvirt/virtualbox on a workstation",
        )


#: The kernel's ARP (neighbour) table is one table for all network namespaces: every
#: node container, and this machine, count against its limits together.
NEIGHBOUR_DIR = Path("/proc/sys/net/ipv4/neigh/default")
NEIGHBOUR_HEADROOM = 256


def neighbour_limits(nodes: int, current: dict[str, int]) -> dict[str, int]:
    """The limits a local cluster of `nodes` containers needs; never lower than now.

    Each node learns every other node and the gateway: about (nodes + 1) ** 2 entries
    in the one shared table; 32 nodes overflow the default gc_thresh3 of 1024, and
    doctor then rightly reports node pairs that time out.
    """
    entries = (nodes + 1) ** 2 + NEIGHBOUR_HEADROOM
    return dict(current) if neighbour.fits(entries, current) else neighbour.raised(entries, current)


def ensure_neighbour_table(nodes: int, progress: Progress, root: Path = NEIGHBOUR_DIR) -> None:
    """Raise the kernel's neighbour table limits when they are too small for `nodes`.

    Only raises (another workload may need more); says what it changed, and what to run
    when it may not change them.
    """
    try:
        current = {key: int((root / key).read_text()) for key in neighbour.KEYS}
    except (OSError, ValueError):
        return  # not Linux, or a network namespace that does not own the table
    wanted = neighbour_limits(nodes, current)
    if wanted == current:
        return
    before = "/".join(str(current[key]) for key in neighbour.KEYS)
    after = "/".join(str(wanted[key]) for key in neighbour.KEYS)
    changed = [key for key in reversed(neighbour.KEYS) if wanted[key] != current[key]]
    try:
        if not all(os.access(root / key, os.W_OK) for key in changed):
            raise PermissionError(13, "permission denied")  # change all or none
        for key in changed:  # gc_thresh3 first: 1 <= 2 <= 3 at every step
            (root / key).write_text(f"{wanted[key]}\n")
    except OSError as exc:
        progress(
            f"Warning: the kernel's ARP table limits ({before}) are too small for {nodes} "
            f"nodes and could not be raised ({exc.strerror}); node pairs may time out. "
            f"Run: {neighbour.sysctl_command(wanted)}"
        )
        return
    progress(
        f"Raised the kernel's ARP table limits (net.ipv4.neigh.default.gc_thresh1/2/3) "
        f"from {before} to {after} for {nodes} nodes"
    )


def podman_env() -> dict[str, str]:
    """Environment for podman and for Vagrant's docker provider (through the shim)."""
    base = state_dir() / "local"
    base.mkdir(parents=True, exist_ok=True)
    conf = base / "containers.conf"
    runtime = 'runtime = "runc"' if shutil.which("runc") else ""
    runtime_section = f"[engine]\n{runtime}\n" if runtime else ""
    text = _CONTAINERS_CONF.format(
        runtime=runtime_section,
        nofile=_limit(resource.RLIMIT_NOFILE),
        nproc=_limit(resource.RLIMIT_NPROC, 16384),
    )
    if not conf.exists() or conf.read_text() != text:
        conf.write_text(text)
    shim_dir = base / "bin"
    shim = shim_dir / "docker"
    podman = shutil.which("podman") or "/usr/bin/podman"
    shim_text = (
        f'#!/bin/sh\n# mpicluster: Vagrant\'s docker provider, run by Podman\nexec {podman} "$@"\n'
    )
    if not shim.exists() or shim.read_text() != shim_text:
        shim_dir.mkdir(parents=True, exist_ok=True)
        shim.write_text(shim_text)
        shim.chmod(0o755)
    path = os.pathsep.join(
        [str(shim_dir), "/usr/sbin", "/usr/bin", "/sbin", "/bin", os.environ.get("PATH", "")]
    )
    return {"CONTAINERS_CONF": str(conf), "PATH": path}


def _limit(kind: int, wanted: int = 65536) -> int:
    """`wanted`, capped by this machine's hard limit (containers may not exceed it)."""
    _, hard = resource.getrlimit(kind)
    return wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
