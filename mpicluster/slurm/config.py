"""Slurm on the cluster (`scheduler: {type: slurm}`): what `up` installs and configures.

The slurm role installs the distribution's munge, Slurm and PMIx packages, gives every
node the cluster's munge key (made here, on the control machine, like the SSH key) and
one slurm.conf whose node lines come from each node's own `slurmd -C`, and starts the
daemons: with systemd where it runs, else as the distribution's init scripts did (each
daemon detaches itself and outlives `up`). What it installed is recorded on the node
(RECORD), so that `down` (or `up` of the inventory without `scheduler:`) purges exactly
those packages and the users they made.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

from mpicluster.cluster.layout import (
    HEALTH_PROLOG,
    HEALTH_SLURM,
    MUNGE_KEY,
    SLURM_CONF_DIR,
    SLURM_CONF_FILES,
)
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.cluster.state import cluster_dir
from mpicluster.util.errors import MpiclusterError
from mpicluster.util.files import write_secret

CONF_DIR = SLURM_CONF_DIR
SLURM_CONF = f"{CONF_DIR}/slurm.conf"
#: The files of CONF_DIR the role writes (gres.conf only on GPU nodes).
CONF_FILES = SLURM_CONF_FILES
#: What the slurm role installed on a node: {"packages": [...], "users": [...],
#: "groups": [...]}, the ones that were not there before (down takes back those).
RECORD = "/var/lib/mpicluster/slurm.json"
#: The first line of every file the role writes: a Slurm configuration without it was
#: not written by mpicluster, and `up` does not take it over.
MARKER = "# Written by mpicluster up (scheduler: slurm); edits are overwritten."
#: What the daemons fill beside the packages' own files; `down` removes them after the
#: purge (the preflight refuses nodes with a munge or Slurm that mpicluster did not install).
LEFTOVERS = (
    CONF_DIR,
    "/etc/munge",
    "/var/lib/slurm",
    "/var/log/slurm",
    "/var/lib/munge",
    "/var/log/munge",
    "/run/munge",
    "/run/slurmctld.pid",
    "/run/slurmd.pid",
)
#: Users and groups the packages make.
USERS = ("munge", "slurm")
#: munge's default: a credential older than this (or made on a node whose clock is this
#: far ahead) is refused.
MUNGE_TTL = 300
#: PMIx's client in Open MPI's bundled PMIx picks the munge security component when the
#: server offers it, and aborts (4.1) or warns on every rank (5.x); native is the
#: server's own uid check over its local socket. Slurm sets it in every pmix job (mpi.conf).
PMIX_ENV = "PMIX_MCA_psec=native"


def munge_key_path(cluster: str) -> Path:
    return cluster_dir(cluster) / "munge.key"


def ensure_munge_key(cluster: str) -> Path:
    """The cluster's munge key (1024 random bytes, 0600), made on first use."""
    path = munge_key_path(cluster)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_secret(path, secrets.token_bytes(1024))
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise MpiclusterError(
            f"the cluster's munge key {path} is readable by others (mode {mode:04o})",
            hint=f"chmod 600 {path}",
        )
    if path.stat().st_size < 32:
        raise MpiclusterError(
            f"the cluster's munge key {path} is too short", hint="remove it to make a new one"
        )
    return path


def scheduler_vars(plan: ClusterPlan, munge_key: Path | None = None) -> dict[str, Any]:
    """The slurm role's input (`mpicluster_scheduler`): None without a scheduler.
    `munge_key`: the cluster's key on this machine (ensure_munge_key, which the command
    calls: computing these inputs writes no file)."""
    if plan.scheduler is None:
        return {"mpicluster_scheduler": None}
    controller = plan.controller or plan.nodes[0]
    present = plan.stack.gpus_present
    partitions = [
        {
            "name": p.name,
            "nodes": p.nodes,
            "default": p.default,
            "max_time": p.max_time or "UNLIMITED",
            "default_time": p.default_time or "",
        }
        for p in plan.partitions()
    ]
    return {
        "mpicluster_scheduler": {
            "type": "slurm",
            "controller": controller.name,
            "partitions": partitions,
            "munge_key": str(munge_key or munge_key_path(plan.cluster)),
            "marker": MARKER,
            "record": RECORD,
            "conf_dir": CONF_DIR,
            "munge_key_path": MUNGE_KEY,
            "pmix_env": PMIX_ENV,
            "users": list(USERS),
            # GPUs Slurm hands out (gres), where they are there to hand out
            "gres": {n.name: n.gpus for n in plan.nodes if n.gpus and present},
            # the node's health check, every interval and before every job
            "health": {
                "program": HEALTH_SLURM,
                "prolog": HEALTH_PROLOG,
                "interval": plan.health.interval,
            },
        }
    }


def teardown_vars() -> dict[str, Any]:
    """The slurm role's `remove` input (down, and up of an inventory without a
    scheduler): from the record on each node, whatever the inventory says now."""
    files = [f"{CONF_DIR}/{name}" for name in CONF_FILES] + [MUNGE_KEY]
    return {"mpicluster_slurm": {"record": RECORD, "files": files, "leftovers": list(LEFTOVERS)}}
