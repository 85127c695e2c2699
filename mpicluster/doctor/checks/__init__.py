"""The checks, one module per family, in the order doctor reports them.

Each check is a pure function of what the runner gathered (`Gathered`): no check
does I/O, so they are cheap, and testable from recorded facts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mpicluster.doctor.checks import (
    basics,
    consistency,
    disk,
    environment,
    fabric,
    gpus,
    launch,
    limits,
    mesh,
    names,
    network,
    rank_env,
    slurm,
    ssh_access,
    stack_files,
    users,
)
from mpicluster.doctor.model import CheckReport
from mpicluster.doctor.runner import Gathered


@dataclass(frozen=True)
class Check:
    name: str
    title: str
    run: Callable[[Gathered], CheckReport]


CHECKS = [
    Check(ssh_access.NAME, ssh_access.TITLE, ssh_access.check),
    Check(mesh.NAME, mesh.TITLE, mesh.check),
    Check(environment.NAME, environment.TITLE, environment.check),
    Check(rank_env.NAME, rank_env.TITLE, rank_env.check),
    Check(names.NAME, names.TITLE, names.check),
    Check(network.PORTS, network.PORTS_TITLE, network.check_ports),
    Check(network.INTERFACES, network.INTERFACES_TITLE, network.check_interfaces),
    Check(fabric.NAME, fabric.TITLE, fabric.check),
    Check(consistency.NAME, consistency.TITLE, consistency.check),
    Check(stack_files.NAME, stack_files.TITLE, stack_files.check),
    Check(gpus.NAME, gpus.TITLE, gpus.check),
    Check(basics.CLOCK, basics.CLOCK_TITLE, basics.check_clock),
    Check(disk.DISK, disk.DISK_TITLE, disk.check_disk),
    Check(limits.NAME, limits.TITLE, limits.check),
    Check(basics.HOSTFILE, basics.HOSTFILE_TITLE, basics.check_hostfile),
    Check(users.NAME, users.TITLE, users.check),
    Check(launch.NAME, launch.TITLE, launch.check),
    Check(slurm.NAME, slurm.TITLE, slurm.check),
]
NAMES = [check.name for check in CHECKS]
