"""Fill the folder the one-box GPU proof takes to a machine without network (.onebox/ at
the repository's root, which git ignores): run here, where PyPI and Debian's archive are
reachable, before tests/gpu/prove_on_one_gpu.sh runs there.

    python tests/gpu/carry.py [FOLDER [PYTHON]]

FOLDER/cache: mpicluster's source cache (Open MPI's tree as Debian ships it, mpi4py's
sdist, NCCL and nccl-tests from ../shared/sources beside the checkout), each verified
against the lockfile by mpicluster's own cache code, and the wheelhouse the stack's
Python installs from (for the box's Python 3.12). FOLDER/site-wheels: what the driver
itself needs on a box that has Python and PyTorch but no Ansible (ansible-core,
pydantic, fabric and their needs). Nothing here is ever committed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from mpicluster.stack import wheels  # noqa: E402
from mpicluster.stack.fingerprint import Platform  # noqa: E402
from tests import seed  # noqa: E402

#: The box's Python (the GPU machines' image: 3.12 on x86-64).
PYTHON, ARCH = "3.12", "x86_64"
#: What the driver imports that the box lacks (it has Jinja2, PyYAML, packaging, rich,
#: typer), pinned to what this checkout's tests run with.
DRIVER_NEEDS = [
    "ansible-core==2.19.14",
    "resolvelib==1.2.1",
    "cryptography==50.0.2",
    "cffi==2.1.1",
    "pycparser",
    "pydantic==2.14.4",
    "pydantic-core==2.50.5",
    "annotated-types==0.8.0",
    "typing-inspection==0.4.5",
    "fabric==3.2.3",
    "invoke==2.2.1",
    "paramiko==5.1.0",
    "bcrypt==5.0.0",
    "pynacl==1.6.2",
    "decorator==5.3.1",
    "deprecated==1.3.1",
]


def main(folder: Path, python: str = PYTHON) -> None:
    cache = folder / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    seed.seed_gpu_sources(cache)
    mpi4py = seed.pypi_sdist("mpi4py", "4.1.2")
    _, orig = seed.openmpi_orig("5.0.7")  # found by its name, as `up` looks it up
    for path in (mpi4py, orig):
        shutil.copyfile(path, cache / path.name)
    platform = Platform.for_wheels(python, ARCH)
    wanted = wheels.requirements(False, None)
    wheels.ensure_wheelhouse(cache, platform, wanted, print)
    site = folder / "site-wheels"
    site.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
    argv += ["--python-version", python, "--implementation", "cp", "-d", str(site)]
    for tag in wheels.MANYLINUX:
        argv += ["--platform", f"{tag}_{ARCH}"]
    subprocess.run([*argv, "--platform", "any", *DRIVER_NEEDS], check=True)
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    sys.stdout.write(f"{folder}: {size / 2**20:.1f} MiB\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / ".onebox", *sys.argv[2:3])
