"""The GPU smoke test's CUDA-aware allreduce (playbooks/roles/stack_build/files/
cuda_allreduce.c), built and run without a GPU: linked against a host-memory stand-in
for libcudart (data/fake_cudart.c) and run by a plain MPI on 3 ranks of this machine.
That proves the program's own logic (arguments, device choice, the check, its JSON and
its CUDA error path), not CUDA-awareness, which only GPUs can show.

Skipped where CUDA's headers are missing (make test installs no CUDA); cc, mpicc and
mpirun are Debian's, which make test installs (tests/host_packages.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "playbooks" / "roles" / "stack_build" / "files" / "cuda_allreduce.c"
FAKE = Path(__file__).parent / "data" / "fake_cudart.c"
CUDA_INCLUDE = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "include"

pytestmark = pytest.mark.skipif(
    not (CUDA_INCLUDE / "cuda_runtime.h").is_file(),
    reason=f"needs CUDA's headers ({CUDA_INCLUDE}), which make test does not install",
)


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    missing = [tool for tool in ("cc", "mpicc", "mpirun") if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: make test installs them (host_packages.py)")
    where = tmp_path_factory.mktemp("cuda_allreduce")
    fake = where / "lib"
    fake.mkdir()
    # linked against the stand-in, the program needs it (its soname) and no real libcudart
    build = ["cc", "-shared", "-fPIC", f"-I{CUDA_INCLUDE}", "-o", str(fake / "libcudart.so")]
    subprocess.run([*build, str(FAKE)], check=True)
    binary = where / "cuda_allreduce"
    subprocess.run(
        [
            "mpicc",
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-Werror",
            f"-I{CUDA_INCLUDE}",
            "-o",
            str(binary),
            str(SOURCE),
            f"-L{fake}",
            "-lcudart",
        ],
        check=True,
    )
    return binary


def run(program: Path, *args: str, ranks: int = 3, **env: str) -> subprocess.CompletedProcess:
    command = ["mpirun", "--oversubscribe", "-np", str(ranks)]
    if os.geteuid() == 0:
        command.append("--allow-run-as-root")
    environ = os.environ | {"LD_LIBRARY_PATH": str(program.parent / "lib")} | env
    return subprocess.run(
        [*command, str(program), *args], capture_output=True, text=True, env=environ, timeout=120
    )


def test_every_rank_sums_rank_plus_one_on_its_device(program):
    done = run(program, "1", "1024", "70000")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["ranks"] == 3 and len(report["hosts"]) == 3
    assert report["library"] and "\n" not in report["library"]
    # local ranks 0, 1, 2 on 2 GPUs: devices 0, 1, 0
    assert report["devices"] == ['Fake "GPU" 0', 'Fake "GPU" 1', 'Fake "GPU" 0']
    assert [r["elements"] for r in report["results"]] == [1, 1024, 70000]
    for result in report["results"]:
        assert result["exact"] and result["wrong_ranks"] == []
        assert result["bytes"] == 4 * result["elements"] and result["seconds"] > 0
        assert result["busbw_gbs"] == pytest.approx(result["algbw_gbs"] * 4 / 3, rel=1e-4)
    assert [r["iterations"] for r in report["results"]] == [100, 100, 59]


def test_a_wrong_sum_names_the_rank(program):
    done = run(program, "1", "2048", FAKE_CORRUPT_RANK="1")
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout.strip().splitlines()[-1])["results"]
    assert [(r["exact"], r["wrong_ranks"]) for r in results] == [(True, []), (False, [1])]


def test_a_cuda_error_names_host_rank_and_call_and_exits_2(program):
    done = run(program, ranks=1, FAKE_NDEV="0")
    assert done.returncode == 2
    assert "rank 0: cudaGetDeviceCount(&ndev) failed: no CUDA-capable device" in done.stderr
    assert run(program, "12x", ranks=1).returncode == 1
