"""How each component is built: the commands' arguments, decided here and unit-tested.

The build roles (playbooks/roles/stack_build) run what this module decides.
"""

from __future__ import annotations

from mpicluster.stack.lockfile import Source


def openmpi_configure_args(
    source: Source,
    prefix: str,
    *,
    cuda_home: str | None,
    fortran: bool,
    extra: list[str],
) -> list[str]:
    major = source.series[0] if source.series else 5
    args = [f"--prefix={prefix}"]
    # mpirun passes --prefix to remote daemons, so a node finds Open MPI even when a
    # user's shell setup hides /etc/environment (4.x name, then 5.x's PRRTE name).
    args.append(
        "--enable-mpirun-prefix-by-default" if major < 5 else "--enable-prte-prefix-by-default"
    )
    if not fortran:
        args.append("--disable-mpi-fortran")
    if cuda_home:
        args.append(f"--with-cuda={cuda_home}")
        if major >= 5:
            args.append(f"--with-cuda-libdir={cuda_home}/lib64/stubs")
    else:
        args.append("--without-cuda")
    return [*args, *extra]


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


def horovod_env(*, cuda_home: str | None, nccl_home: str | None) -> dict[str, str]:
    env = {
        "HOROVOD_WITH_PYTORCH": "1",
        "HOROVOD_WITH_MPI": "1",
        "HOROVOD_WITHOUT_TENSORFLOW": "1",
        "HOROVOD_WITHOUT_MXNET": "1",
        "HOROVOD_WITHOUT_GLOO": "1",
    }
    if cuda_home and nccl_home:
        env |= {
            "HOROVOD_GPU_OPERATIONS": "NCCL",
            "HOROVOD_NCCL_HOME": nccl_home,
            "HOROVOD_CUDA_HOME": cuda_home,
        }
    return env
