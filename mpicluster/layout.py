"""Where things live on the nodes. Playbooks, the smoke test and doctor all read this.

Source installs go under one mpicluster-owned tree, the same path on every node:

    <prefix>/stacks/<fingerprint>/      one complete build: Open MPI, NCCL, venv
    <prefix>/current -> stacks/<fp>     the active build (switched atomically)
    <prefix>/current/bin                mpirun, mpicc, ...
    <prefix>/current/lib                libmpi, libnccl
    <prefix>/current/venv               Python with mpi4py, Horovod, PyTorch
    <prefix>/current/FINGERPRINT.json   what was built, and from what

`install: packages` uses the distribution's Open MPI and mpi4py instead.
Files every install gets:

    /etc/mpicluster/hostfile            Open MPI (`host slots=N`)
    /etc/mpicluster/hostfile.mpich      MPICH/Hydra (`host:N`)
    /etc/mpicluster/horovod.hosts       Horovod (`host:N,host:N`)
    /etc/mpicluster/cluster.json        the cluster as the nodes know it
    /etc/mpicluster/smoke/              the smoke-test programs
"""

from __future__ import annotations

from dataclasses import dataclass

from mpicluster.inventory import Inventory

CONFIG_DIR = "/etc/mpicluster"
HOSTFILE = f"{CONFIG_DIR}/hostfile"
HOSTFILE_MPICH = f"{CONFIG_DIR}/hostfile.mpich"
HOSTFILE_HOROVOD = f"{CONFIG_DIR}/horovod.hosts"
CLUSTER_JSON = f"{CONFIG_DIR}/cluster.json"
SMOKE_DIR = f"{CONFIG_DIR}/smoke"
ENV_BLOCK_BEGIN = "# BEGIN mpicluster (managed: edits inside this block are overwritten)"
ENV_BLOCK_END = "# END mpicluster"
ENVIRONMENT_FILE = "/etc/environment"
LD_CONF = "/etc/ld.so.conf.d/mpicluster.conf"
#: The directories a plain non-interactive PATH must keep (Debian's login default).
SYSTEM_PATH = ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]


@dataclass(frozen=True)
class Layout:
    prefix: str
    install: str  # "source" or "packages"
    cuda_home: str | None

    @classmethod
    def of(cls, inventory: Inventory) -> Layout:
        stack = inventory.stack
        return cls(stack.prefix, stack.install, stack.cuda_home if inventory.has_gpus else None)

    @property
    def current(self) -> str:
        return f"{self.prefix}/current"

    @property
    def stacks(self) -> str:
        return f"{self.prefix}/stacks"

    @property
    def fingerprint_file(self) -> str:
        return f"{self.current}/FINGERPRINT.json"

    @property
    def mpi_bin(self) -> str:
        """The directory mpirun must resolve to."""
        return f"{self.current}/bin" if self.install == "source" else "/usr/bin"

    @property
    def mpi_lib(self) -> str | None:
        """The MPI library directory LD_LIBRARY_PATH must hold (packages: the system's)."""
        return f"{self.current}/lib" if self.install == "source" else None

    @property
    def python(self) -> str:
        """The Python that has mpi4py (and Horovod)."""
        return f"{self.current}/venv/bin/python" if self.install == "source" else "/usr/bin/python3"

    @property
    def path_dirs(self) -> list[str]:
        """PATH entries mpicluster puts in front of the system's."""
        if self.install == "source":
            return [f"{self.current}/bin", f"{self.current}/venv/bin"]
        return []

    @property
    def library_dirs(self) -> list[str]:
        dirs = [self.mpi_lib] if self.mpi_lib else []
        if self.cuda_home:
            dirs.append(f"{self.cuda_home}/lib64")
        return dirs
