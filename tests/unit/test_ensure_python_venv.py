"""scripts/ensure-python-venv.sh, which `make demo` and `make test` run before they make
.venv: a Python that can make a venv passes silently, an older one or one without venv's
ensurepip is named in one line with what to install. Its apt-get install runs for real in
CI, whose starting point (README.md) has python3 without its venv package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "ensure-python-venv.sh"
VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"


def ensure(python: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["/bin/bash", str(SCRIPT), python],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_a_python_that_can_make_a_venv_passes_silently():
    done = ensure(sys.executable)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_a_missing_python_is_one_line():
    done = ensure("no-such-python3")
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "make: no no-such-python3 here: install Python 3.11 or newer "
        "(Debian/Ubuntu: apt-get install python3)"
    ]


def older_python() -> str | None:
    """A real Python older than 3.11 on this machine, if there is one."""
    places = {
        Path("/usr/bin"): "python3.*",
        Path("/usr/local/bin"): "python3.*",
        Path.home() / ".pyenv" / "versions": "3.*/bin/python3.*",
    }
    found = {str(p) for place, pattern in places.items() for p in place.glob(pattern)}
    for path in sorted(found):
        if not Path(path).name.replace("python", "").replace(".", "").isdigit():
            continue  # python3.11-config and the like
        done = subprocess.run(
            [path, "-c", "import sys; sys.exit(sys.version_info >= (3, 11))"],
            capture_output=True,
            timeout=30,
            check=False,
        )
        if done.returncode == 0:
            return path
    return None


def test_a_python_older_than_3_11_is_refused_in_one_line():
    python = older_python()
    if python is None:
        pytest.skip("no Python older than 3.11 on this machine")
    done = ensure(python)
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"make: mpicluster needs Python 3.11 or newer, and {python} is 3.")
    assert line.endswith("run make PYTHON=python3.11 (or newer)")


def test_without_ensurepip_and_no_apt_get_it_names_the_package(tmp_path):
    """Debian's python3.X without python3.X-venv: `import ensurepip` fails as it does
    there (the module is not found); with no apt-get on PATH, one line says what to do."""
    shadow = tmp_path / "no-venv-package" / "ensurepip"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'ensurepip'\", name='ensurepip')\n"
    )
    env = {"PATH": str(tmp_path / "empty"), "PYTHONPATH": str(shadow.parent)}
    done = ensure(sys.executable, env)
    assert done.returncode == 1
    package = f"python{VERSION}-venv"
    assert done.stderr.splitlines() == [
        f"make: {sys.executable} {VERSION} cannot make a virtual environment (no ensurepip): "
        f"install {package} (as root: apt-get install {package}) and run make again"
    ]
    assert done.stdout == ""


def test_make_runs_it_before_each_venv():
    makefile = (REPO / "Makefile").read_text()
    rules = [rule for rule in makefile.split("\n\n") if "-m venv $(VENV)" in rule]
    assert len(rules) == 2
    for rule in rules:
        steps = [line.strip() for line in rule.splitlines() if line.startswith("\t")]
        assert steps[:2] == [
            "bash scripts/ensure-python-venv.sh $(PYTHON)",
            "$(PYTHON) -m venv $(VENV)",
        ]
