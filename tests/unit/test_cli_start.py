"""A command's start loads only what that command uses: `mpicluster --help` and every
command's help load none of the core (no inventory model, no SSH, no Ansible, no
terminal tables; a command's own help loads pydantic, which typer converts options
with), and `doctor` none of up, down, run, bench or the playbooks.

Read from real processes (`python -X importtime`), not timed: which modules a start
imports is what makes it fast, and that does not depend on the machine's load."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mpicluster.render import RENDERERS

REPO = Path(__file__).resolve().parents[2]

#: What no help needs: the core's heavy libraries and the render layer's.
HEAVY = (
    "paramiko",
    "fabric",
    "invoke",
    "rich",
    "jinja2",
    "yaml",
    "ansible",
    "mpicluster.cluster.inventory",
    "mpicluster.render",
)
#: What doctor has no use for.
NOT_DOCTORS = (
    "jinja2",
    "ansible",
    "mpicluster.up",
    "mpicluster.down",
    "mpicluster.run",
    "mpicluster.bench",
    "mpicluster.smoke",
    "mpicluster.nodes.ansible_run",
    "mpicluster.render.playbook",
    "mpicluster.render.up",
)


def imported(code: str) -> set[str]:
    """Every module a fresh interpreter imports running `code` (-X importtime's list)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "80"},
    )
    found = set(re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", done.stderr, re.M))
    assert found, done.stderr[-2000:]
    return found


def loaded(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


def help_of(*words: str) -> str:
    """A command line's help, run as `mpicluster` runs (SystemExit 0 after printing)."""
    argv = ["mpicluster", *words, "--help"]
    return (
        f"import sys\nsys.argv = {argv!r}\nfrom mpicluster.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
    )


@pytest.mark.parametrize(
    "words", [(), ("doctor",), ("up",), ("run",), ("local", "up")], ids=" ".join
)
def test_help_loads_none_of_the_core(words):
    modules = imported(help_of(*words))
    assert loaded(modules, HEAVY) == []
    if not words:
        assert loaded(modules, ("pydantic",)) == []


def test_doctor_loads_only_what_it_uses():
    """Everything `mpicluster doctor` imports to gather, judge and show its table."""
    code = (
        "from mpicluster.cli import doctor\n"
        "from mpicluster.cli.nodes import follow_findings\n"
        "from mpicluster.cluster.plan import ClusterPlan\n"
        "from mpicluster.doctor import cordon_findings, run_doctor\n"
        "from mpicluster.doctor import gpu_diag\n"
        "from mpicluster.doctor.checks import CHECKS\n"
        "from mpicluster.doctor.runner import gather\n"
        "from mpicluster.render import Display\n"
        "from mpicluster.render import doctor\n"
    )
    modules = imported(code)
    assert "mpicluster.doctor.runner" in modules and "paramiko" in modules
    assert loaded(modules, NOT_DOCTORS) == []


def test_every_renderer_is_found_by_its_result_type():
    """render.show finds a renderer by its result type's module and name: each one names
    a class that exists, and a function of the renderer module."""
    from importlib import import_module

    for kind, where in RENDERERS.items():
        module, _, name = kind.rpartition(".")
        assert isinstance(getattr(import_module(module), name), type), kind
        renderer, function = where.split(":")
        assert callable(getattr(import_module(renderer), function)), where
