"""Where things live on the nodes: the one source of truth for paths and markers.

`up` passes `Layout.as_vars()` to the playbooks (as `mpicluster_layout`), doctor's
probe and the smoke test read the same object; no role or check writes these paths
itself.

Source installs go under one mpicluster-owned tree, the same path on every node:

    <prefix>/stacks/<fingerprint>/      one complete build: Open MPI, NCCL, venv
    <prefix>/current -> stacks/<fp>     the active build (switched atomically)
    <prefix>/current/bin                mpirun, mpicc, ...
    <prefix>/current/lib                libmpi, libnccl
    <prefix>/current/venv               Python with mpi4py, Horovod, PyTorch
    <prefix>/current/libexec/mpicluster mpicluster's own programs (the CUDA-aware allreduce)
    <prefix>/current/FINGERPRINT.json   what was built, and from what

`install: packages` uses the distribution's Open MPI and mpi4py instead.
Files every install gets:

    /etc/mpicluster/hostfile            Open MPI (`host slots=N`)
    /etc/mpicluster/hostfile.mpich      MPICH/Hydra (`host:N`)
    /etc/mpicluster/horovod.hosts       Horovod (`host:N,host:N`)
    /etc/mpicluster/hostfile.deepspeed  DeepSpeed (`host slots=N`)
    /etc/mpicluster/env                 the cluster's environment as shell exports
    /etc/mpicluster/cluster.json        the cluster as the nodes know it
    /etc/mpicluster/applied.json        what the last `up` applied, as digests
    /etc/mpicluster/smoke/              the smoke-test programs
    /etc/environment                    a managed block: PATH, LD_LIBRARY_PATH, MPI settings
    /etc/ld.so.conf.d/mpicluster.conf   the MPI (and CUDA) library directories
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the node's health check ships this module: stdlib only at its top
    from mpicluster.cluster.inventory import Inventory

CONFIG_DIR = "/etc/mpicluster"
HOSTFILE = f"{CONFIG_DIR}/hostfile"
HOSTFILE_MPICH = f"{CONFIG_DIR}/hostfile.mpich"
HOSTFILE_HOROVOD = f"{CONFIG_DIR}/horovod.hosts"
HOSTFILE_DEEPSPEED = f"{CONFIG_DIR}/hostfile.deepspeed"
#: The cluster's environment as shell exports, for users' own scripts (`. FILE`).
ENV_FILE = f"{CONFIG_DIR}/env"
CLUSTER_JSON = f"{CONFIG_DIR}/cluster.json"
#: What the last successful `up` applied, as digests (its fast path proves from it).
APPLIED = f"{CONFIG_DIR}/applied.json"
SMOKE_DIR = f"{CONFIG_DIR}/smoke"
#: The node's own health check (remote/health.py), and its record of the cluster.
HEALTH_PROGRAM = "/usr/local/sbin/mpicluster-health"
HEALTH_RECORD = f"{CONFIG_DIR}/health.json"
#: The last result of the health check run as root (what `mpicluster nodes` shows).
HEALTH_LAST = "/var/lib/mpicluster/health-last.json"
#: With Slurm, slurmd's health program and prolog: the check in its two modes.
HEALTH_SLURM = "/usr/local/sbin/mpicluster-health-slurm"
HEALTH_PROLOG = "/usr/local/sbin/mpicluster-prolog"
#: The check's record of the drain it made (remote/slurmnode.py), and its lock.
SLURM_DRAIN = "/var/lib/mpicluster/slurm-drain.json"
#: Written by `up` on every node while it changes them: the checks drain nothing.
HEALTH_CHANGING = "/var/lib/mpicluster/changing.json"
#: The cluster's users as `up` made them (name: uid, gid, adopted): their ids are kept.
USERS_RECORD = f"{CONFIG_DIR}/users.json"
#: The sudo the users given `sudo: true` get (the users role writes it).
USERS_SUDOERS = "/etc/sudoers.d/mpicluster-users"
#: The cordoned nodes (cluster/cordons.py), the same newest state on every node.
CORDONS = f"{CONFIG_DIR}/cordons.json"
#: Every file `up` writes into CONFIG_DIR (what doctor's hostfile check reads back).
CONFIG_FILES = (HOSTFILE, HOSTFILE_MPICH, HOSTFILE_HOROVOD, HOSTFILE_DEEPSPEED, CLUSTER_JSON)
#: The markers of mpicluster's blocks in /etc/environment and /etc/hosts.
BLOCK_BEGIN = "# BEGIN mpicluster (managed: edits inside this block are overwritten)"
BLOCK_END = "# END mpicluster"
ENVIRONMENT_FILE = "/etc/environment"
LD_CONF = "/etc/ld.so.conf.d/mpicluster.conf"
#: Loads nvidia-peermem at boot on GPU nodes with RDMA that need it (the base role).
PEERMEM_CONF = "/etc/modules-load.d/mpicluster-nvidia-peermem.conf"
FINGERPRINT_NAME = "FINGERPRINT.json"
#: The CUDA-aware MPI allreduce the GPU smoke test runs, inside a stack folder (built
#: by the stack_build role when Open MPI is CUDA-aware).
CUDA_ALLREDUCE = "libexec/mpicluster/cuda_allreduce"
#: Where `up` records, before its first change, how every path it touches was (for `down`).
JOURNAL = "/var/lib/mpicluster/journal.json"
#: The builder's scratch space (stack_build_scratch): removed after a build, and by `down`.
BUILD_SCRATCH = "/var/tmp/mpicluster"  # noqa: S108 (a node folder only root writes)
#: Where a packed stack arrives from a peer (the MPI user's, 0700; emptied by the install).
#: A detached job's folder on its head (`run --detach`), in the MPI user's home: JOB/
DETACHED_JOBS = ".local/state/mpicluster/jobs"
RELAY_DIR = "/var/tmp/mpicluster-relay"  # noqa: S108 (made by root for the MPI user)
#: The directories a plain non-interactive PATH must keep (Debian's login default).
SYSTEM_PATH = ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]
#: Slurm's configuration (scheduler: slurm; the slurm room writes it).
SLURM_CONF_DIR = "/etc/slurm"
#: The files of SLURM_CONF_DIR the slurm role writes (gres.conf only on GPU nodes).
SLURM_CONF_FILES = ("slurm.conf", "cgroup.conf", "mpi.conf", "gres.conf")
MUNGE_KEY = "/etc/munge/munge.key"
#: Where a distribution installs its UCX (DOCA's and MLNX_OFED's packages, Debian's
#: libucx0): its libraries are in the dynamic linker's own folders (lib64, or Debian's
#: multiarch lib/x86_64-linux-gnu), which nothing needs to name.
SYSTEM_UCX_PREFIX = "/usr"


def site_ucx_lib(prefix: str | None) -> str | None:
    """The library folder of a site's UCX (stack.ucx.prefix) that LD_LIBRARY_PATH and the
    dynamic linker must be told of: <prefix>/lib, where UCX's own install puts it (HPC-X
    too); None for none, or for the distribution's. /usr/local/lib is named: Red Hat's
    dynamic linker does not look there by itself (Debian's looks there first anyway)."""
    if prefix is None or prefix == SYSTEM_UCX_PREFIX:
        return None
    return f"{prefix}/lib"


@dataclass(frozen=True)
class Layout:
    prefix: str
    install: str  # "source" or "packages"
    cuda_home: str | None
    #: The cluster runs Slurm (scheduler: slurm): its files are part of the footprint.
    slurm: bool = False
    #: The cluster has packages of its own (python.requirements) beside the stack's.
    packages: bool = False
    #: The site's own UCX the stack's Open MPI is built against (stack.ucx.prefix), or None.
    site_ucx: str | None = None

    @classmethod
    def of(cls, inventory: Inventory) -> Layout:
        stack = inventory.stack
        cuda_home = stack.cuda_home if inventory.has_gpus else None
        source = stack.install == "source"
        packages = bool(inventory.python.requirements) and source
        return cls(
            stack.prefix,
            stack.install,
            cuda_home,
            inventory.scheduler is not None,
            packages,
            stack.ucx.prefix if source else None,
        )

    @property
    def current(self) -> str:
        return f"{self.prefix}/current"

    @property
    def stacks(self) -> str:
        return f"{self.prefix}/stacks"

    def stack_dir(self, fingerprint: str) -> str:
        """Where the build of one fingerprint lives."""
        return f"{self.stacks}/{fingerprint}"

    @property
    def fingerprint_file(self) -> str:
        return f"{self.current}/{FINGERPRINT_NAME}"

    @property
    def mpi_bin(self) -> str:
        """The directory mpirun must resolve to."""
        return f"{self.current}/bin" if self.install == "source" else "/usr/bin"

    @property
    def mpi_prefix(self) -> str | None:
        """mpirun's --prefix (cluster/mpirun.py): the source stack's `current`, the same
        path on every node whichever build it links to; None for the distribution's."""
        return self.current if self.install == "source" else None

    @property
    def cuda_allreduce(self) -> str:
        return f"{self.current}/{CUDA_ALLREDUCE}"

    @property
    def mpi_lib(self) -> str | None:
        """The MPI library directory LD_LIBRARY_PATH must hold (packages: the system's)."""
        return f"{self.current}/lib" if self.install == "source" else None

    @property
    def python(self) -> str:
        """The Python that has mpi4py (and Horovod)."""
        return f"{self.current}/venv/bin/python" if self.install == "source" else "/usr/bin/python3"

    @property
    def pyspy(self) -> str | None:
        """py-spy (the hang report's stack reader): in the source stack's Python."""
        return f"{self.current}/venv/bin/py-spy" if self.install == "source" else None

    @property
    def cluster_packages(self) -> str:
        """Where the cluster's own packages live (python.requirements): one folder per
        resolution, `current` the active one, on the stack's Python's path."""
        return f"{self.prefix}/python"

    @property
    def path_dirs(self) -> list[str]:
        """PATH entries mpicluster puts in front of the system's."""
        if self.install != "source":
            return []
        dirs = [f"{self.current}/bin", f"{self.current}/venv/bin"]
        if self.packages:  # the programs the cluster's packages bring (after the stack's)
            dirs.append(f"{self.cluster_packages}/current/bin")
        return dirs

    @property
    def ucx_info(self) -> str:
        """The ucx_info that goes with the stack's UCX: the site's (stack.ucx.prefix), the
        one built into the stack, or the distribution's (its ucx-utils package) beside
        the distribution's Open MPI. It may be absent: a stack without UCX has none."""
        if self.site_ucx:
            return f"{self.site_ucx}/bin/ucx_info"
        return f"{self.current}/bin/ucx_info" if self.install == "source" else "/usr/bin/ucx_info"

    @property
    def library_dirs(self) -> list[str]:
        dirs = [self.mpi_lib] if self.mpi_lib else []
        if self.cuda_home:
            dirs.append(f"{self.cuda_home}/lib64")
        ucx_lib = site_ucx_lib(self.site_ucx)
        if ucx_lib:  # Open MPI's pml ucx links the site's libucp
            dirs.append(ucx_lib)
        return dirs

    def shell_exports(self, variables: dict[str, str]) -> str:
        """The environment `up` writes into /etc/environment, for `. /etc/mpicluster/env`
        in a user's own scripts (which an interactive shell's profile may have changed)."""
        from mpicluster.util import templates  # the control machine's alone

        return templates.render(
            "env.sh.j2",
            path_dirs=self.path_dirs,
            library_dirs=self.library_dirs,
            variables=variables,
        )

    def missing_dirs(
        self, path: str | None, library_path: str | None
    ) -> tuple[list[str], list[str]]:
        """(PATH entries, LD_LIBRARY_PATH entries) a login's environment lacks: what the
        smoke test and doctor both judge a node's non-interactive environment by."""
        wanted_path = [self.mpi_bin, *[d for d in self.path_dirs if d != self.mpi_bin]]
        have_path = (path or "").split(":")
        have_libs = (library_path or "").split(":")
        return (
            [d for d in wanted_path if d not in have_path],
            [d for d in self.library_dirs if d not in have_libs],
        )

    def footprint(self, cluster: str) -> list[dict[str, Any]]:
        """Every path `up` touches on a node and how (see module_utils/mpicluster_journal):
        what `up` records before its first change and `down` takes back. `~/` is the MPI
        user's home. The markers are the ones the ssh_mesh and node_environment roles
        write."""
        key = f"~/.ssh/mpicluster_{cluster}"
        entries: list[dict[str, Any]] = [
            {"path": "~/.ssh", "kind": "dir"},
            {"path": key, "kind": "file"},
            {"path": f"{key}.pub", "kind": "file"},
            {
                "path": "~/.ssh/authorized_keys",
                "kind": "line",
                "regexp": f" mpicluster:{re.escape(cluster)}$",
            },
            {
                "path": "~/.ssh/config",
                "kind": "block",
                "begin": f"# BEGIN mpicluster {cluster}",
                "end": f"# END mpicluster {cluster}",
            },
            {"path": "~/.ssh/mpicluster-*", "kind": "glob"},
            {
                "path": "/etc/ssh/ssh_known_hosts",
                "kind": "block",
                "begin": f"# BEGIN mpicluster {cluster} host keys",
                "end": f"# END mpicluster {cluster} host keys",
            },
            {"path": ENVIRONMENT_FILE, "kind": "block", "begin": BLOCK_BEGIN, "end": BLOCK_END},
            {
                "path": "/etc/hosts",
                "kind": "block",
                "begin": BLOCK_BEGIN,
                "end": BLOCK_END,
                "in_place": True,  # container runtimes bind-mount it: no rename onto it
            },
            {"path": LD_CONF, "kind": "file"},
            {"path": PEERMEM_CONF, "kind": "file"},
            {"path": CONFIG_DIR, "kind": "tree"},
            {"path": HEALTH_PROGRAM, "kind": "file"},
            {"path": USERS_SUDOERS, "kind": "file"},
            {"path": HEALTH_SLURM, "kind": "file"},
            {"path": HEALTH_PROLOG, "kind": "file"},
            # up's own marker while it runs, and the check's drain record
            {"path": HEALTH_CHANGING, "kind": "file", "unwatched": True},
            {"path": SLURM_DRAIN, "kind": "file", "unwatched": True},
            {"path": f"{SLURM_DRAIN}.lock", "kind": "file", "unwatched": True},
            # written by each run of the check, not by up: the fast path does not watch it
            {"path": HEALTH_LAST, "kind": "file", "unwatched": True},
            {"path": BUILD_SCRATCH, "kind": "tree"},
            {"path": RELAY_DIR, "kind": "tree"},
            # Also for install = packages: a cluster that was once built from source.
            {"path": self.current, "kind": "tree", "stack": True},
            {"path": self.stacks, "kind": "tree", "stack": True},
            {"path": self.cluster_packages, "kind": "tree", "stack": True},
            {"path": self.prefix, "kind": "dir"},
        ]
        if self.slurm:
            # Each file the slurm role writes (no Slurm that mpicluster did not install is
            # taken over). The munge key is not watched: the fast path's probe reads as the
            # MPI user, who cannot read it (the smoke test's credential decoded on every
            # node proves the keys match).
            entries += [
                {"path": f"{SLURM_CONF_DIR}/{name}", "kind": "file"} for name in SLURM_CONF_FILES
            ]
            entries.append({"path": MUNGE_KEY, "kind": "file", "unwatched": True})
        return entries

    def as_vars(self) -> dict[str, Any]:
        """Everything above as plain data: the playbooks' `mpicluster_layout` and the
        layout doctor's probe reads."""
        return {
            "prefix": self.prefix,
            "install": self.install,
            "current": self.current,
            "stacks": self.stacks,
            "fingerprint_name": FINGERPRINT_NAME,
            "mpi_bin": self.mpi_bin,
            "mpi_lib": self.mpi_lib or "",
            "python": self.python,
            "path_dirs": self.path_dirs,
            "library_dirs": self.library_dirs,
            "system_path": list(SYSTEM_PATH),
            "config_dir": CONFIG_DIR,
            "smoke_dir": SMOKE_DIR,
            "cluster_json": CLUSTER_JSON,
            "env_file": ENV_FILE,
            "ld_conf": LD_CONF,
            "peermem_conf": PEERMEM_CONF,
            "environment_file": ENVIRONMENT_FILE,
            "block_begin": BLOCK_BEGIN,
            "block_end": BLOCK_END,
            "journal": JOURNAL,
            "health_changing": HEALTH_CHANGING,
            "applied": APPLIED,
            "relay_dir": RELAY_DIR,
            "cluster_packages": self.cluster_packages,
        }
