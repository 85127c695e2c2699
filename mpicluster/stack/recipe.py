"""How each component is built: the commands' arguments, decided here and unit-tested.

The build roles (playbooks/roles/stack_build) run what this module decides.
"""

from __future__ import annotations

from mpicluster.cluster.layout import CUDA_ALLREDUCE, SYSTEM_UCX_PREFIX
from mpicluster.cluster.lockfile import Source


def _major(source: Source) -> int:
    """The Open MPI series' major version (5 for a source whose version names none)."""
    return source.series[0] if source.series else 5


def release(version: str) -> tuple[int, ...]:
    """A version's release numbers, for comparing NCCL's: "2.29.7-1" -> (2, 29, 7)."""
    numbers = []
    for part in version.split("-")[0].split("+")[0].split("."):
        if not part.isdigit():
            break
        numbers.append(int(part))
    return tuple(numbers)


#: PRRTE's defaults the stack's Open MPI 5 starts with ($prefix/etc/prte-mca-params.conf;
#: a user's --bind-to, or their own setting, still wins). PRRTE binds each rank to one
#: core when a node's ranks fit its cores (4.x bound to the socket past 2 ranks): a
#: Horovod rank pinned to one core, with its background thread polling MPI beside the
#: main thread, hung in hvd.init()'s first MPI_Comm_dup with two ranks on each of two
#: nodes (local cluster, 5.0.7; --bind-to none or the socket: 5 s). Horovod's own
#: guidance is `mpirun -bind-to none`; PyTorch's launchers bind nothing either.
PRTE_DEFAULTS = {"hwloc_default_binding_policy": "none"}


def prte_defaults(source: Source) -> dict[str, str]:
    """PRRTE's settings written into the stack (Open MPI 5 and later; 4.x has no PRRTE
    and its default binding, the socket past two ranks, does not hang)."""
    return dict(PRTE_DEFAULTS) if _major(source) >= 5 else {}


def openmpi_configure_args(
    source: Source,
    prefix: str,
    *,
    cuda_home: str | None,
    fortran: bool,
    extra: list[str],
    ucx: str | None = None,
    ucc: bool = False,
) -> list[str]:
    """`ucx`: where the UCX Open MPI is built against is installed (the stack's `prefix`,
    where it was built before Open MPI, or the site's own: stack.ucx.prefix); None: no
    UCX. `ucc`: the stack has UCC, installed into `prefix` before Open MPI."""
    major = _major(source)
    # a one-time build: no dependency files for a rebuild that never comes (Spack's
    # default for autotools packages too)
    args = [f"--prefix={prefix}", "--disable-dependency-tracking"]
    # mpirun passes --prefix to remote daemons, so a node finds Open MPI even when a
    # user's shell setup hides /etc/environment (4.x name, then 5.x's PRRTE name).
    args.append(
        "--enable-mpirun-prefix-by-default" if major < 5 else "--enable-prte-prefix-by-default"
    )
    if not fortran:
        args.append("--disable-mpi-fortran")
    if cuda_home:
        # 5.x also needs --with-cuda-libdir (where libcuda.so is): the build role finds
        # it on the builder (openmpi_cuda() says where to look) and appends it.
        args.append(f"--with-cuda={cuda_home}")
    else:
        args.append("--without-cuda")
    # spelled out both ways: configure picks up a UCX it finds on the builder by itself
    # (a libucx-dev installed for something else), which the fingerprint would not know
    args.append(_with_ucx(ucx))
    if major >= 5:  # coll/ucc, likewise found by itself where a builder has a UCC
        args.append(f"--with-ucc={prefix}" if ucc else "--without-ucc")
    # The runtime Open MPI bundles, spelled out: its configure prefers an external PMIx,
    # hwloc or libevent it finds on the builder (libpmix-dev, which Slurm's PMIx plugin
    # needs on Debian bookworm, pulls in all three), and that build would then need the
    # distribution's libraries at run time on every node, unknown to the fingerprint.
    args += [f"--with-{part}=internal" for part in BUNDLED_RUNTIME[major >= 5]]
    # what no job here loads is left unbuilt (OPENMPI_CUTS); the inventory's own
    # arguments come last, and configure takes the last of an option given twice
    args += openmpi_cuts(source)
    return [*args, *extra]


def _with_ucx(ucx: str | None) -> str:
    """Open MPI's UCX option. The distribution's UCX (/usr) is asked for without a folder:
    given --with-ucx=/usr, 5.x's configure looks for ucx.pc and libucp only in /usr/lib
    and /usr/lib64 (config/oac/oac_check_package.m4), not in Debian's multiarch
    /usr/lib/x86_64-linux-gnu, and stops; without one it asks pkg-config (its ucx.pc is
    on pkg-config's own path) or the compiler's default folders, as 4.1 does too
    (config/ompi_check_ucx.m4)."""
    if ucx is None:
        return "--without-ucx"
    return "--with-ucx" if ucx == SYSTEM_UCX_PREFIX else f"--with-ucx={ucx}"


#: Open MPI's components the stack leaves unbuilt: none is loaded by the smoke test, the
#: seed workloads, mpi4py's test suite or Horovod. docs/stack.md's table says what each
#: takes from a user and how an inventory gets it back (stack.openmpi.configure_args).
OPENMPI_NO_BUILD = (
    # MPI-level traffic monitoring (pml_monitoring_enable): a profiling tool, off by default
    "coll-monitoring",
    "osc-monitoring",
    "pml-monitoring",
    "common-monitoring",
    # topology-aware rank reordering of MPI_Dist_graph_create(reorder=1); topo basic still
    # makes every topology
    "topo-treematch",
    # sender-based message logging (vprotocol pessimist, through pml v), fault-tolerance
    # research that a job turns on with --mca vprotocol pessimist
    "pml-v",
    "vprotocol-pessimist",
)

#: Each cut: the configure option and the first Open MPI series that has it.
OPENMPI_CUTS = (
    # ROMIO, the second MPI-IO implementation (its own configure and 385 C files): OMPIO
    # stays, 5.x's MPI-IO everywhere (4.1's everywhere but Lustre)
    ("--disable-io-romio", 4),
    # OpenSHMEM (oshrun, shmem.h): built only beside UCX (its one spml), nowhere used
    ("--disable-oshmem", 4),
    ("--enable-mca-no-build=" + ",".join(OPENMPI_NO_BUILD), 4),
    # the TreeMatch library 5.x bundles beside topo treematch (built without the component)
    ("--without-treematch", 5),
    # static archives: Open MPI builds none by default, the libevent it bundles builds
    # both kinds (every object compiled twice); the option reaches libevent's configure
    ("--disable-static", 5),
    # PMIx's command-line tools (pmix_info, pattrs, pps, pquery, ...): mpirun needs none
    ("--disable-pmix-binaries", 5),
    # the manuals come prebuilt in the tarball: a builder with Sphinx would build them
    # again (minutes), unknown to the fingerprint
    ("--disable-sphinx", 5),
)


def openmpi_cuts(source: Source) -> list[str]:
    """The configure options of OPENMPI_CUTS this Open MPI series has."""
    major = _major(source)
    return [option for option, since in OPENMPI_CUTS if major >= since]


#: The HTML manuals Open MPI 5 installs with its bundled PMIx, PRRTE and hwloc (76 MB in
#: 2,066 files of a 103 MB install): the same pages as docs.open-mpi.org for the release.
#: The stack leaves them out of its tree, so every pack, copy and manifest is smaller;
#: the man pages stay (man mpirun, man MPI_Allreduce).
OPENMPI_DOCS_LEFT_OUT = (
    "share/doc/openmpi",
    "share/doc/pmix",
    "share/doc/prrte",
    "share/doc/hwloc",
)


#: What Open MPI bundles of its runtime: 4.x (ORTE), 5.x (PRRTE, a separate project).
BUNDLED_RUNTIME = {
    False: ("pmix", "hwloc", "libevent"),
    True: ("pmix", "prrte", "hwloc", "libevent"),
}


def ucx_configure_args(prefix: str, cuda_home: str | None = None) -> list[str]:
    """UCX's configure (run as contrib/configure-release: no logging, debug, assertions
    or parameter checks, as UCX's own release builds). Verbs and rdmacm are built
    against rdma-core's headers (the build role installs them), so the InfiniBand and
    RoCE transports are there for nodes that have the hardware; TCP, shared memory and
    self always are. Thread support on (what MPI_THREAD_MULTIPLE needs). No NUMA library
    (UCX 1.15 dropped it too), no Go or Java bindings, no BFD backtraces, no static
    libraries. `cuda_home`: beside a CUDA-aware Open MPI, UCX's CUDA transports
    (cuda_copy, cuda_ipc) and memory hooks, so pml ucx can be handed GPU buffers; they
    link libcuda and NVML (ucx_cuda)."""
    args = [
        f"--prefix={prefix}",
        "--disable-dependency-tracking",
        "--without-go",
        "--without-java",
        "--disable-doxygen-doc",
        "--without-bfd",
        "--disable-numa",
        "--without-knem",
        "--without-xpmem",
        # shared libraries only: Open MPI links them, and libtool would compile every
        # object twice for static archives that are 29 MB of a 48 MB install
        "--disable-static",
        # thread support: mpi4py (and PyTorch's launchers) ask for MPI_THREAD_MULTIPLE,
        # and Open MPI's pml ucx declines a UCP worker without it ("UCP worker does not
        # support MPI_THREAD_MULTIPLE. PML UCX could not be selected"); measured here
        "--enable-mt",
        "--with-verbs",
        "--with-rdmacm",
    ]
    if not cuda_home:
        return [*args, "--without-cuda"]
    return [
        *args,
        f"--with-cuda={cuda_home}",
        # GPU-initiated InfiniBand (GDA-KI, 1.20 on, with CUDA): it compiles DOCA
        # GPUNetIO's headers from a git submodule that no release archive carries, and
        # only device-side communication libraries (NVSHMEM, NCCL's GIN) use it
        "--without-gda",
        # nor UCX's device code (nvcc: ucx_perftest's GPU-initiated kernels, which include
        # those headers wherever rdma-core's mlx5dv.h is): an empty answer for configure's
        # nvcc lookup. The CUDA transports (cuda_copy, cuda_ipc) are plain C and stay.
        "ac_cv_path_NVCC=",
    ]


#: What the build role compiles and installs of UCX's tree: its libraries, transports and
#: tools (ucx_info, ucx_perftest), not the Makefile's other folders: test/apps does not
#: compile against CUDA 13 (cuCtxCreate took a fourth argument), and examples, bindings
#: and tests are not installed anyway. Then the top folder's data (ucx.pc, perftest files).
UCX_SUBDIRS = (
    "src/ucm",
    "src/ucs",
    "src/uct",
    "src/ucp",
    "src/tools/vfs",
    "src/tools/info",
    "src/tools/perf",
    "src/tools/profile",
    "cmake",
)


def ucc_configure_args(
    prefix: str, cuda_home: str | None = None, archs: tuple[str, ...] = (), nccl: bool = False
) -> list[str]:
    """UCC's configure, against the stack's UCX (its UCP transport layer, for host and
    device buffers alike). `cuda_home`: its CUDA memory and executor components (device
    buffers reduced on the GPU) and the CUDA transport layer (CUDA IPC between a node's
    GPUs), their kernels compiled for `archs` only ("9.0": sm_90, as NCCL's); `nccl`: its
    NCCL transport layer, against the stack's NCCL. Nothing a node here cannot load:
    no SHARP, ROCm, RCCL or DOCA UROM; no static libraries, no tests, no docs."""
    args = [
        f"--prefix={prefix}",
        "--disable-dependency-tracking",
        "--disable-static",
        f"--with-ucx={prefix}",
        "--without-sharp",
        "--without-rocm",
        "--without-rccl",
        "--without-doca_urom",
    ]
    if not cuda_home:
        return [*args, "--without-cuda", "--without-nccl"]
    args.append(f"--with-cuda={cuda_home}")
    if archs:
        args.append(f"--with-nvcc-gencode={nvcc_gencode(archs)}")
    args.append(f"--with-nccl={prefix}" if nccl else "--without-nccl")
    return args


#: The stack's Open MPI defaults where it has UCC ($prefix/etc/openmpi-mca-params.conf;
#: users' own settings still win). Open MPI ships coll/ucc turned off: on, it takes the
#: collectives it has a UCC algorithm for (on device buffers: reduced on the GPU by UCC's
#: CUDA executor, moved by CUDA IPC, NCCL or UCX's CUDA transports), at a priority above
#: coll/tuned and coll/cuda; the others stay with Open MPI's own components.
UCC_DEFAULTS = {"coll_ucc_enable": "1", "coll_ucc_priority": "100"}


def _cuda_libdirs(cuda_home: str) -> list[str]:
    """Where a builder may have libcuda.so and libnvidia-ml.so to link against: the
    toolkit's driver stubs, then the driver's own libraries."""
    return [
        f"{cuda_home}/lib64/stubs",
        f"{cuda_home}/lib/stubs",
        f"{cuda_home}/targets/x86_64-linux/lib/stubs",
        f"{cuda_home}/targets/sbsa-linux/lib/stubs",
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
    ]


def nvml_requirement(cuda_version: str) -> str:
    """The PyPI wheel with NVML's header for this CUDA release (nvidia-nvml-dev 13.x,
    nvidia-nvml-dev-cu12 before): what a UCX build with CUDA reads when the toolkit lacks
    nvml.h (a toolkit installed without cuda-nvml-dev, as on these machines)."""
    major, minor = [*cuda_version.split("."), "0"][:2]
    name = "nvidia-nvml-dev" if int(major) >= 13 else f"nvidia-nvml-dev-cu{major}"
    return f"{name}=={major}.{minor}.*"


def ucx_cuda(cuda_home: str, *, gpus_present: bool) -> dict:
    """How the build role gives UCX's CUDA support what it links: libcuda.so and
    libnvidia-ml.so from the toolkit's stubs or the driver (`libdir_candidates`), else,
    on nodes without GPUs (stack.gpus_present: false), link-time stubs made from cuda.h
    and nvml.h (never installed: on GPU nodes the driver's libraries are what load);
    nvml.h from the toolkit, else from the wheelhouse's nvidia-nvml-dev wheel."""
    return {
        "home": cuda_home,
        "libdir_candidates": _cuda_libdirs(cuda_home),
        "link_stub": not gpus_present,
    }


#: Open MPI 5.x's components that link libcuda (DSOs; ompi's config/opal_mca.m4): on a
#: node without a GPU driver each fails to load, and the null accelerator is used.
OPENMPI_CUDA_DSOS = ("accelerator/cuda", "btl/smcuda", "rcache/gpusm", "rcache/rgpusm")


def openmpi_cuda(source: Source, cuda_home: str, *, gpus_present: bool) -> dict:
    """How the build role links Open MPI's CUDA support on the builder.

    5.x links its CUDA components against libcuda.so: the toolkit's driver stubs, else
    the driver's own library. Where neither exists and the nodes have no GPUs
    (stack.gpus_present: false), the role makes a link-time stub from cuda.h (what
    NVIDIA's stubs are) and the stack's MCA defaults stop every rank from reporting
    that those components cannot load. With GPUs present a missing libcuda is an error.
    4.x opens libcuda at run time and needs none of this.

    A CUDA-aware build also gets the GPU smoke test's MPI_Allreduce on device memory,
    compiled with the stack's mpicc into `allreduce_program` (inside the stack folder).
    """
    major = _major(source)
    return {
        "home": cuda_home,
        "libdir": major >= 5,
        "libdir_candidates": _cuda_libdirs(cuda_home),
        "link_stub": major >= 5 and not gpus_present,
        "quiet_load_errors": "^" + ",".join(OPENMPI_CUDA_DSOS),
        "allreduce_program": CUDA_ALLREDUCE,
    }


def nvcc_gencode(archs: tuple[str, ...] | list[str]) -> str:
    """NVCC_GENCODE for NCCL: real code for each architecture present, plus PTX for the
    newest one so a newer GPU can still JIT it."""
    flags = []
    numbers = sorted({a.replace(".", "") for a in archs}, key=lambda a: (int(a.rstrip("a")), a))
    for number in numbers:
        flags.append(f"-gencode=arch=compute_{number},code=sm_{number}")
    if numbers:
        newest = numbers[-1]
        flags.append(f"-gencode=arch=compute_{newest},code=compute_{newest}")
    return " ".join(flags)


#: The programs nccl-tests builds (its src/Makefile's BIN_FILES_LIST, each `<name>_perf`);
#: the stack installs them into its bin/.
NCCL_TESTS = tuple(
    f"{name}_perf"
    for name in (
        "all_reduce",
        "all_gather",
        "broadcast",
        "reduce_scatter",
        "reduce",
        "alltoall",
        "alltoallv",
        "scatter",
        "gather",
        "sendrecv",
        "hypercube",
    )
)


def horovod_env(
    *, cuda_home: str | None, nccl_home: str | None, cuda_archs: tuple[str, ...] = ()
) -> dict[str, str]:
    """Horovod's build switches: MPI and PyTorch always; NCCL GPU operations when a
    CUDA home and a NCCL are given (the caller passes them only for a CUDA PyTorch:
    Horovod's torch extension refuses a CPU build of PyTorch with GPU operations)."""
    env = {
        "HOROVOD_WITH_PYTORCH": "1",
        "HOROVOD_WITH_MPI": "1",
        "HOROVOD_WITHOUT_TENSORFLOW": "1",
        "HOROVOD_WITHOUT_MXNET": "1",
        "HOROVOD_WITHOUT_GLOO": "1",
    }
    if cuda_home and nccl_home:
        env |= {
            "CUDA_HOME": cuda_home,
            "HOROVOD_NCCL_LINK": "SHARED",  # the stack's libnccl.so, not a private copy
            "HOROVOD_BUILD_CUDA_CC_LIST": ",".join(a.replace(".", "") for a in cuda_archs),
            "HOROVOD_GPU_OPERATIONS": "NCCL",
            "HOROVOD_NCCL_HOME": nccl_home,
            "HOROVOD_CUDA_HOME": cuda_home,
        }
    return env
