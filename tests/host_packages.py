"""What `make test` installs on this machine before its tests: the local cluster's
packages (as `make demo` installs them) and the system tools a few tests run for real.

    python -m tests.host_packages     # install what is missing (root), else say what

README.md's starting point (git, make, Python 3.11+) is all a fresh machine needs
before `make test`, which installs Python's venv package first when it is missing;
.ci/run installs that and nothing more (tests/unit/test_ci_setup.py).
"""

from __future__ import annotations

import sys
import sysconfig

from mpicluster.local.host import DOCKER_PROVIDER_PACKAGES, ensure_packages
from mpicluster.util.errors import MpiclusterError

MULTIARCH = sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu"

#: Debian package: a file it provides, and the tests that need it.
TEST_PACKAGES = {
    # `run --sync` and `collect` through the real rsync (test_command_lines, cluster tests)
    "rsync": "/usr/bin/rsync",
    # the GPU smoke's allreduce program built against a stand-in libcudart
    # (test_cuda_allreduce_program) and doctor's rank check loading a real libmpi
    # (test_rank_env)
    "gcc": "/usr/bin/gcc",
    "libopenmpi-dev": "/usr/bin/mpicc",
    "openmpi-bin": "/usr/bin/mpirun",
    # mpicluster's Horovod patches applied to the pinned sdist, and CMake running the
    # lines one of them adds (test_patches)
    "patch": "/usr/bin/patch",
    "cmake": "/usr/bin/cmake",
    # UCX's configure made on this machine (sources.autogen: control; test_autogen)
    "autoconf": "/usr/bin/autoconf",
    "automake": "/usr/bin/automake",
    "libtool": "/usr/bin/libtoolize",
}

#: Everything `make test` needs beyond README.md's starting point.
PACKAGES = {**DOCKER_PROVIDER_PACKAGES, **TEST_PACKAGES}


def system_libmpi() -> str:
    """Debian's Open MPI library (libopenmpi-dev's), which test_rank_env loads."""
    return f"/usr/lib/{MULTIARCH}/libmpi.so.40"


def main() -> int:
    try:
        ensure_packages(PACKAGES, lambda line: sys.stdout.write(f"{line}\n"))
    except MpiclusterError as exc:
        hint = f"; {exc.hint}" if exc.hint else ""
        sys.stderr.write(f"make test: {exc.message}{hint}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
