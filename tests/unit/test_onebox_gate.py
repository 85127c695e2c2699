"""The one-box GPU proof (tests/gpu/prove_on_one_gpu.sh) on a machine without a GPU:
one line saying so, exit 3, nothing done. Its nvidia-smi is one that finds no driver
(exit 9 and NVIDIA's words, as on a node whose driver is not loaded), put first on
PATH so that the gate is what is tested on any machine, a GPU machine too."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "gpu" / "prove_on_one_gpu.sh"
DRIVER = ROOT / "tests" / "gpu" / "onebox.py"
NO_DRIVER = (
    "#!/bin/sh\n"
    "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    'Make sure that the latest NVIDIA driver is installed and running."\n'
    "exit 9\n"
)


@pytest.fixture
def gpu_less_path(tmp_path) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(NO_DRIVER)
    smi.chmod(0o755)
    return f"{bin_dir}:/usr/bin:/bin"


def gpu_less(argv: list[str], path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": path},
        check=False,
        timeout=60,
    )


def test_the_script_says_in_one_line_that_it_needs_a_gpu(tmp_path, gpu_less_path):
    out = tmp_path / "out"
    done = gpu_less(["bash", str(SCRIPT), str(out)], gpu_less_path)
    assert done.returncode == 3, done
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert "no NVIDIA GPU here" in done.stderr and "needs one" in done.stderr
    assert not out.exists()  # nothing done


def test_the_driver_run_alone_stops_the_same_way(tmp_path, gpu_less_path):
    out = tmp_path / "out"
    done = gpu_less([sys.executable, str(DRIVER), "--out", str(out)], gpu_less_path)
    assert done.returncode == 3, done
    assert done.stderr.count("\n") == 1 and "no NVIDIA GPU here" in done.stderr
    assert not out.exists()


@pytest.mark.parametrize("argv", [[], ["a", "b"]])
def test_wrong_arguments_are_a_usage_line(argv, gpu_less_path):
    done = gpu_less(["bash", str(SCRIPT), *argv], gpu_less_path)
    assert done.returncode == 2
    assert done.stderr.startswith("usage: tests/gpu/prove_on_one_gpu.sh OUT_FOLDER")
