"""The cluster's own SSH identity: one ed25519 key pair per cluster, made on the control
machine, installed for the MPI user on every node so every node can reach every node.

The private key is written 0600 from the start (never world-readable, not even for a
moment) and is never printed or logged.
"""

from __future__ import annotations

import fcntl
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mpicluster.util.errors import MpiclusterError
from mpicluster.util.files import write_secret
from mpicluster.util.paths import state_dir


@dataclass(frozen=True)
class ClusterKey:
    private_path: Path
    public_line: str  # "ssh-ed25519 AAAA... mpicluster:<cluster>"

    @property
    def comment(self) -> str:
        return self.public_line.split()[-1]


def cluster_dir(cluster: str) -> Path:
    return state_dir() / "clusters" / cluster


def existing_cluster_key(cluster: str) -> ClusterKey | None:
    """The cluster's key pair if it was made (None: not yet), nothing made or checked."""
    public = cluster_dir(cluster) / "id_ed25519.pub"
    private = cluster_dir(cluster) / "id_ed25519"
    if not (private.exists() and public.exists()):
        return None
    return ClusterKey(private, public.read_text().strip())


def ensure_cluster_key(cluster: str) -> ClusterKey:
    """Load the cluster's key pair, making it on first use."""
    directory = cluster_dir(cluster)
    private = directory / "id_ed25519"
    public = directory / "id_ed25519.pub"
    comment = f"mpicluster:{cluster}"
    if not private.exists():
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        key = Ed25519PrivateKey.generate()
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        )
        line = (
            key.public_key()
            .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
            .decode()
        )
        public.write_text(f"{line} {comment}\n")
        write_secret(private, pem)
    mode = private.stat().st_mode & 0o777
    if mode & 0o077:
        raise MpiclusterError(
            f"the cluster key {private} is readable by others (mode {mode:04o})",
            hint=f"chmod 600 {private}",
        )
    if not public.exists():
        raise MpiclusterError(
            f"{public} is missing beside {private}",
            hint="remove the private key to make a new pair",
        )
    return ClusterKey(private, public.read_text().strip())


#: Clusters whose lock this process holds: taking it again (`down --node` provisions the
#: other nodes under its own lock) is a no-op, not a refusal.
_HELD: set[str] = set()


@contextmanager
def cluster_lock(cluster: str) -> Iterator[None]:
    """One `up` or `down` per cluster at a time on this control machine: a second one
    refuses at once. The lock is the kernel's (flock): a killed mpicluster leaves none."""
    if cluster in _HELD:
        yield
        return
    directory = cluster_dir(cluster)
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / "up.lock").open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise MpiclusterError(
                f"another mpicluster up or down is running for cluster {cluster} ({holder})",
                hint="wait for it to finish; nothing was changed",
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}: mpicluster {' '.join(sys.argv[1:2])}\n")
        handle.flush()
        _HELD.add(cluster)
        try:
            yield
        finally:
            _HELD.discard(cluster)
