"""How long filling a job's environment takes with pip and with uv, offline from a
folder of wheels (what `run --requirements` does on each node that lacks it), on this
machine: `pip install --no-index --no-deps --target` against `uv pip install
--no-index --no-deps --target`, each into a fresh folder, median of --repeat runs.

Two sets: a small job's (a handful of pure-Python and compiled wheels, resolved from
PyPI for this machine's Python into a scratch folder) and a big one (the stack's own
wheelhouse from the source cache: PyTorch and its dependencies). uv comes from its
wheel on PyPI (the binary inside it), into the scratch folder.

    .venv/bin/python benchmarks/job_env_install.py [--repeat 3] [--house PATH]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

SMALL = ["python-dateutil==2.9.0.post0", "msgpack==1.1.0", "toolz==1.0.0", "idna==3.10"]


def pins_of(folder: Path) -> list[str]:
    from packaging.utils import parse_wheel_filename

    found = []
    for wheel in sorted(folder.glob("*.whl")):
        name, version, _, _ = parse_wheel_filename(wheel.name)
        found.append(f"{name}=={version}")
    return found


def uv_binary(scratch: Path) -> Path:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--only-binary=:all:",
            "--no-deps",
            "-q",
            "--dest",
            str(scratch / "uvwheel"),
            "uv",
        ],
        check=True,
    )
    (wheel,) = (scratch / "uvwheel").glob("uv-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        member = next(n for n in archive.namelist() if n.endswith("/scripts/uv"))
        target = scratch / "uv"
        target.write_bytes(archive.read(member))
    target.chmod(0o755)
    return target


def timed(argv: list[str]) -> float:
    started = time.monotonic()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - started


def measure(name: str, wheels: Path, uv: Path, repeat: int, scratch: Path) -> None:
    pins = pins_of(wheels)
    size = sum(p.stat().st_size for p in wheels.glob("*.whl")) / 1e6
    results: dict[str, list[float]] = {"pip": [], "uv": []}
    for _ in range(repeat):
        for tool in ("pip", "uv"):
            target = scratch / f"env-{tool}"
            shutil.rmtree(target, ignore_errors=True)
            if tool == "pip":
                argv = [
                    sys.executable,
                    "-m",
                    "pip",
                    "install",
                    "--no-index",
                    "--no-deps",
                    "--no-compile",
                    "--disable-pip-version-check",
                    "-q",
                ]
            else:
                argv = [
                    str(uv),
                    "pip",
                    "install",
                    "--no-index",
                    "--no-deps",
                    "-q",
                    "--python",
                    sys.executable,
                    "--link-mode",
                    "copy",
                ]
            argv += ["--target", str(target), "--find-links", str(wheels), *pins]
            results[tool].append(timed(argv))
    pip, uv_s = statistics.median(results["pip"]), statistics.median(results["uv"])
    print(
        f"{name}: {len(pins)} wheels, {size:.0f} MB: pip {pip:.2f} s, uv {uv_s:.2f} s "
        f"(median of {repeat}; uv {pip / uv_s:.1f}x faster)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--house", type=Path, help="a folder of wheels for the big set")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="job-env-"))
    try:
        small = scratch / "small"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--only-binary=:all:",
                "-q",
                "--dest",
                str(small),
                *SMALL,
            ],
            check=True,
        )
        uv = uv_binary(scratch)
        measure("small job", small, uv, args.repeat, scratch)
        house = args.house or next(
            (
                p
                for p in (Path.home() / ".cache/mpicluster/sources/wheels").glob("cp*")
                if p.is_dir()
            ),
            None,
        )
        if house:
            measure(f"big ({house.name})", house, uv, args.repeat, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
