"""The MPI and NCCL settings that follow from the inventory's network: one definition
for the /etc/environment block `up` writes, the block doctor expects and the
command line the smoke test launches with."""

from __future__ import annotations

from collections.abc import Mapping

from mpicluster.cluster.inventory import Inventory, Network


def mpi_environment(network: Network, mca: Mapping[str, str] | None = None) -> dict[str, str]:
    """Variables that keep MPI (and NCCL) traffic on the inventory's network, and the
    inventory's own Open MPI parameters (its `mpi.mca`).

    Both Open MPI series read them from the environment of every daemon and rank:
    4.x's runtime takes OMPI_MCA_oob_*, 5.x's PRRTE takes PRTE_MCA_oob_*; the one a
    series does not know is ignored, so a node keeps working across an upgrade.
    """
    selector = network.selector
    variables: dict[str, str] = {}
    if selector:
        variables["OMPI_MCA_btl_tcp_if_include"] = selector
        variables["OMPI_MCA_oob_tcp_if_include"] = selector  # Open MPI 4.x
        variables["PRTE_MCA_oob_tcp_if_include"] = selector  # Open MPI 5.x (PRRTE)
    if network.interface:
        variables["NCCL_SOCKET_IFNAME"] = network.interface
    for name, value in (mca or {}).items():
        variables[f"OMPI_MCA_{name}"] = value
    return variables


#: Open MPI 5's runtime (PRRTE 3.0.x, 5.0.7's included) without the launch threads of
#: the remote daemons (prted): every prted starts 16 (it counts itself a persistent
#: DVM) and a rank that exits at once can be reaped before its thread has recorded it
#: running, so the job never completes and mpirun waits for ever (PRRTE master's
#: 78df6ec2 and openpmix/prrte#2713, in no 3.0.x release). Measured on the local
#: cluster (benchmarks/launch_exits.py): `mpicluster run ... -- true` hung 4 times in 300
#: runs with the threads, never in 500 without. The daemons fork on their own event
#: loop instead, as mpirun's own node always does. Open MPI 4.x ignores it.
RUNTIME = {"PRTE_MCA_odls_base_max_threads": "0"}


def environment_of(inventory: Inventory) -> dict[str, str]:
    """Every variable of the /etc/environment block besides PATH and LD_LIBRARY_PATH:
    the network's, the inventory's `mpi.mca`, the runtime's, and the cycle time of a
    Horovod it builds."""
    variables = {**mpi_environment(inventory.network, inventory.mpi.mca), **RUNTIME}
    horovod = inventory.stack.horovod
    if inventory.stack.install == "source" and horovod.enabled and horovod.cycle_time_ms:
        variables["HOROVOD_CYCLE_TIME"] = f"{horovod.cycle_time_ms:g}"
    return variables


def mpirun_network_args(network: Network, mpi_major: int) -> list[str]:
    """The same settings as mpirun options, for the Open MPI series that runs them."""
    selector = network.selector
    if not selector:
        return []
    args = ["--mca", "btl_tcp_if_include", selector]
    if mpi_major >= 5:
        return [*args, "--prtemca", "oob_tcp_if_include", selector]
    return [*args, "--mca", "oob_tcp_if_include", selector]


#: Every variable mpi_environment may set (an interface selects them all); doctor's
#: probe reads these from a login's environment on every node.
VARIABLES = tuple(mpi_environment(Network(interface="eth0")))
