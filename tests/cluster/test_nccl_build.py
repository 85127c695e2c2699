"""The NCCL role, for real, whenever a NCCL source tarball is at hand.

No registry these machines reach carries NCCL's source: the tarball comes from
MPICLUSTER_NCCL_TARBALL, the default source cache, or ../shared/sources beside the
checkout (upstream's release archive, byte-identical, which these machines and CI
provide); with none the test is skipped and says why. It runs the stack_build role's NCCL tasks
on this machine, which has CUDA's compiler (/usr/local/cuda) but no GPU, and checks
the library and header it installs. MPICLUSTER_NCCL_ONLY_FUNCS (default "AllReduce
Sum f32 RING SIMPLE"; about 4 minutes on 2 cores) limits the device code, since every
collective for one architecture takes about 28 minutes on 2 cores; "" builds them all.
"""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from mpicluster.stack import recipe
from tests.conftest import REPO

# In CI the stack build (test_stack_build.py) builds NCCL with this role on a node and
# checks its fatbin the same way; this test of the role alone runs on demand.
pytestmark = [pytest.mark.cluster, pytest.mark.on_demand, pytest.mark.nccl_role]
CUDA_HOME = Path(os.environ.get("MPICLUSTER_TEST_CUDA_HOME", "/usr/local/cuda"))


def nccl_tarball() -> Path | None:
    explicit = os.environ.get("MPICLUSTER_NCCL_TARBALL")
    if explicit:
        return Path(explicit)
    for folder in (Path.home() / ".cache/mpicluster/sources", REPO.parent / "shared" / "sources"):
        found = sorted(folder.glob("nccl-[0-9]*.tar.gz"))
        if found:
            return found[-1]
    return None


def test_nccl_role_builds_from_the_cache(tmp_path):
    tarball = nccl_tarball()
    if tarball is None:
        pytest.skip(
            "no NCCL source tarball in the source cache or ../shared/sources: no registry "
            "reachable here carries it (set MPICLUSTER_NCCL_TARBALL to run this test)"
        )
    if not (CUDA_HOME / "bin" / "nvcc").exists():
        pytest.skip(f"no CUDA compiler at {CUDA_HOME}")
    version = re.search(r"nccl-(\d+\.\d+\.\d+-\d+)", tarball.name).group(1)
    work, stack = tmp_path / "work", tmp_path / "stack"
    (work / "src").mkdir(parents=True)
    (work / "nccl").mkdir()
    stack.mkdir()
    (work / "src" / tarball.name).symlink_to(tarball.resolve())
    archs = ["9.0"]
    spec = {
        "sources": {"nccl": {"filename": tarball.name, "version": version}},
        "nccl": {
            "archs": archs,
            "cuda_home": str(CUDA_HOME),
            "gencode": recipe.nvcc_gencode(archs),
            "only_funcs": os.environ.get(
                "MPICLUSTER_NCCL_ONLY_FUNCS", "AllReduce Sum f32 RING SIMPLE"
            ),
        },
    }
    extra = {
        "stack_build_spec": spec,
        "stack_build_work": str(work),
        "stack_build_tree": str(work / "nccl"),
        "stack_build_dir": str(stack),
        "mpicluster_stack_fingerprint": "nccl-test",
        # this machine's python with ansible, not whatever interpreter discovery finds
        "ansible_python_interpreter": sys.executable,
    }
    env = {
        **os.environ,
        "ANSIBLE_ROLES_PATH": str(REPO / "playbooks" / "roles"),
        "ANSIBLE_LIBRARY": str(REPO / "mpicluster/remote/plugins/modules"),
        "ANSIBLE_MODULE_UTILS": str(REPO / "mpicluster/remote/plugins/module_utils"),
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }

    def playbook() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                "ansible-playbook",
                "-i",
                "localhost,",
                "-e",
                json.dumps(extra),
                str(REPO / "tests" / "playbooks" / "nccl_build.yml"),
            ],
            capture_output=True,
            text=True,
            env=env,
            check=False,
            timeout=4 * 3600,
        )

    done = playbook()
    assert done.returncode == 0, done.stdout[-4000:]
    again = playbook()  # compiled once: a second run finds the library and compiles nothing
    assert again.returncode == 0, again.stdout[-4000:]
    compiled = re.search(r"TASK \[stack_build : Compile NCCL[^\n]*\n(\w+): ", again.stdout)
    assert compiled and compiled.group(1) == "ok", again.stdout[-4000:]
    library = stack / "lib" / "libnccl.so"
    assert library.exists()
    header = (stack / "include" / "nccl.h").read_text()
    found = ".".join(
        re.search(rf"#define NCCL_{part}\s+(\d+)", header).group(1)
        for part in ("MAJOR", "MINOR", "PATCH")
    )
    assert found == version.split("-")[0]
    # SASS for sm_90 and PTX for compute_90, as NVCC_GENCODE asked (read from the
    # library's fatbins: this CUDA install has no cuobjdump)
    assert {(ELF, 90), (PTX, 90)} <= fatbin_entries(library.resolve())


PTX, ELF = 1, 2
FATBIN_MAGIC = struct.pack("<I", 0xBA55ED50)


def fatbin_entries(path: Path) -> set[tuple[int, int]]:
    """(kind, SM architecture) of every entry of every fatbin in a CUDA binary.

    A fatbin is a header (magic, version, header size, size) followed by entries,
    each with a header (kind, _, header size, size, ..., arch at byte 28).
    """
    data = path.read_bytes()
    found: set[tuple[int, int]] = set()
    position = data.find(FATBIN_MAGIC)
    while position != -1:
        _, header_size, size = struct.unpack_from("<HHQ", data, position + 4)
        entry, end = position + header_size, position + header_size + size
        while entry < end:
            kind, _, entry_header, entry_size = struct.unpack_from("<HHIQ", data, entry)
            found.add((kind, struct.unpack_from("<I", data, entry + 28)[0]))
            entry += entry_header + entry_size
        position = data.find(FATBIN_MAGIC, end)
    return found
