"""Fill the folder the one-box GPU proof takes to a machine without network (.onebox/ at
the repository's root, which git ignores): run here, where PyPI and Debian's archive are
reachable, before tests/gpu/prove_on_one_gpu.sh runs there.

    python tests/gpu/carry.py [FOLDER [FACTS]]

FOLDER/cache: mpicluster's source cache, filled the way `up` fills it for the box's own
plan (tests/gpu/onebox.py's box_plan, planned with FACTS: the node facts mpicluster's
probe read on the first round's H200, tests/unit/data/gpu-h200/node-facts.json, unless
given): Open MPI's tree as Debian ships it, mpi4py's sdist, NCCL, nccl-tests, UCX and UCC
from ../shared/sources beside the checkout (each verified against the lockfile), the
wheelhouse of the stack's Python for the box's Python 3.12 with NVML's header wheel for
its CUDA (UCX's CUDA support reads it where the toolkit lacks nvml.h), and UCX's and UCC's
trees with configure made here (`sources.autogen: control`: the box has no autotools;
autotools must be installed here). Then the box's plan is made again offline from the
folder, as the box will make it: a dry run that fails here, not there, when something is
missing. FOLDER/site.tar.xz: what the driver itself needs on a box that has Python and
PyTorch but no Ansible (ansible-core, pydantic, fabric and their needs), their wheels
unpacked into one tree (a wheel's install is its unpacking; ansible-test, which nothing
here runs, left out) and packed with xz: 12.4 MB of wheels make 8.6 MB so.

Size matters: what travels to a lent GPU machine (the checkout and the carried folder)
must fit 64 MiB. The wheelhouse's tar (wheels.archive, as big as the wheelhouse) is
removed: the box's plan makes it again from the folder. Nothing here is ever committed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).parent))

import onebox  # noqa: E402

from mpicluster.stack import wheels  # noqa: E402
from mpicluster.stack.prepare import prepare  # noqa: E402
from tests import seed  # noqa: E402

#: The box's facts as mpicluster's probe read them there (Python 3.12 on x86-64, CUDA 13.0).
FACTS = REPO / "tests" / "unit" / "data" / "gpu-h200" / "node-facts.json"
#: What may travel beside the checkout (about 3 MiB) within a lent machine's 64 MiB.
LIMIT = 61 * 2**20
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


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def fill_cache(folder: Path, facts: dict) -> dict:
    """The sources seeded, then the box's plan made online (downloads the wheelhouse,
    makes UCX's and UCC's configure) and offline (what the box does); the offline plan's
    sources, by component."""
    cache = folder / "cache"
    shutil.rmtree(cache, ignore_errors=True)  # made afresh: an older carry's files would travel
    cache.mkdir(parents=True)
    seed.seed_gpu_sources(cache)
    mpi4py = seed.pypi_sdist("mpi4py", "4.1.2")
    _, orig = seed.openmpi_orig("5.0.7")  # found by its name, as `up` looks it up
    for path in (mpi4py, orig):
        shutil.copyfile(path, cache / path.name)
    with tempfile.TemporaryDirectory(prefix="onebox-carry-") as scratch:
        args = onebox.parse_args(["--out", scratch, "--carry", str(folder)])
        args.cuda_archs = []  # from the facts, as on the box
        plan = onebox.box_plan(Path(scratch), folder, 1, args)
        prepare(plan, {"box": facts}, say)
        planned = prepare(plan, {"box": facts}, say, offline=True)
    fingerprint = planned.host_vars["box"]["mpicluster_stack_fingerprint"]
    spec = planned.variables["mpicluster_stack_groups"][fingerprint]
    return {name: Path(source["path"]).name for name, source in spec["sources"].items()}


def fill_site(folder: Path, python: str, arch: str) -> None:
    """The driver's needs for the box's Python, unpacked into site/ and packed as
    FOLDER/site.tar.xz (prove_on_one_gpu.sh unpacks it there)."""
    shutil.rmtree(folder / "site-wheels", ignore_errors=True)  # an older carry's
    with tempfile.TemporaryDirectory(prefix="onebox-site-") as scratch:
        downloads, tree = Path(scratch) / "wheels", Path(scratch) / "site"
        argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        argv += ["--python-version", python, "--implementation", "cp", "-d", str(downloads)]
        for tag in wheels.MANYLINUX:
            argv += ["--platform", f"{tag}_{arch}"]
        subprocess.run([*argv, "--platform", "any", *DRIVER_NEEDS], check=True)
        for wheel in sorted(downloads.glob("*.whl")):
            with zipfile.ZipFile(wheel) as unpacked:
                unpacked.extractall(tree)  # noqa: S202 zipfile drops ".." and absolute names
        shutil.rmtree(tree / "ansible_test")
        with tarfile.open(folder / "site.tar.xz", "w:xz") as packed:
            packed.add(tree, arcname="site")


def drop_wheelhouse_tars(folder: Path) -> None:
    """The wheelhouse's tars (and their kept sha256): the box's plan makes its own."""
    for tar in (folder / "cache" / "wheels").glob(".*.tar*"):
        tar.unlink()


def main(folder: Path, facts_file: Path = FACTS) -> None:
    facts = json.loads(facts_file.read_text())
    sources = fill_cache(folder, facts)
    drop_wheelhouse_tars(folder)
    fill_site(folder, facts["python"], facts["arch"])
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    say(f"the box's offline plan takes: {json.dumps(sources)}")
    say(f"{folder}: {size / 2**20:.1f} MiB")
    if size > LIMIT:
        say(f"warning: over {LIMIT / 2**20:.0f} MiB: with the checkout, over what a call takes")


if __name__ == "__main__":
    main(
        Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / ".onebox",
        *(Path(arg) for arg in sys.argv[2:3]),
    )
