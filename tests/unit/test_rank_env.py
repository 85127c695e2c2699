"""doctor's rank check: what a rank gets. The probe's reader (remote/rankenv.py) runs
for real here, in a real venv standing in for the stack's, with an mpi4py stand-in whose
MPI module loads a real libmpi through the loader (the system's Open MPI, which make
test installs); the check judges what it read."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mpicluster.cluster.inventory import parse_inventory
from mpicluster.cluster.layout import Layout
from mpicluster.doctor.checks import rank_env
from mpicluster.doctor.model import Status
from mpicluster.remote import rankenv
from tests.host_packages import system_libmpi

SYSTEM_LIBMPI = Path(system_libmpi())
INVENTORY = "cluster: t\nnodes:\n  - {name: node1, address: 10.9.0.11}\n"
MPI4PY = "class rc:\n    initialize = True\n    finalize = True\n"


def stand_in(site: Path, library: Path) -> None:
    """An mpi4py whose MPI module loads `library` (as the real one loads libmpi)."""
    (site / "mpi4py").mkdir(parents=True)
    (site / "mpi4py" / "__init__.py").write_text(MPI4PY)
    (site / "mpi4py" / "MPI.py").write_text(f"import ctypes\nctypes.CDLL({str(library)!r})\n")


@pytest.fixture(scope="module")
def stack(tmp_path_factory) -> Path:
    """<root>/venv (a real venv) with the stand-in, <root>/lib with a copy of libmpi."""
    if not SYSTEM_LIBMPI.exists():
        pytest.fail(f"{SYSTEM_LIBMPI} is missing: install libopenmpi-dev (make test does)")
    root = tmp_path_factory.mktemp("stacks") / "fp1"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    (root / "lib").mkdir()
    shutil.copy(SYSTEM_LIBMPI.resolve(), root / "lib" / "libmpi.so.40")
    (site,) = (root / "venv" / "lib").glob("python3*/site-packages")
    stand_in(site, root / "lib" / "libmpi.so.40")
    return root


@pytest.fixture
def login(stack, monkeypatch):
    """The probe's environment: a login whose PATH starts with the stack's venv."""
    monkeypatch.setenv("PATH", f"{stack}/venv/bin:/usr/bin:/bin")
    for name in ("PYTHONPATH", "PYTHONHOME", "LD_PRELOAD", "VIRTUAL_ENV"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def read(stack: Path, lines: dict[str, list[str]] | None = None) -> dict:
    facts = rankenv.rank_environment(rankenv.variables(os.environ), str(stack))
    return {"rank_env": facts, "access": {"setters": lines or {}}, "env": {}}


def judged(stack: Path, facts: dict) -> list:
    inv = parse_inventory(INVENTORY + f"stack: {{prefix: {stack.parent.parent}}}\n")
    return rank_env.judge(Layout.of(inv), "node1", facts)


def test_the_stacks_python_mpi4py_and_libmpi_are_found_as_a_rank_finds_them(stack, login):
    login.setenv("NCCL_DEBUG", "INFO")
    facts = read(stack)
    resolved = facts["rank_env"]["resolved"]
    assert resolved["prefix"] == str((stack / "venv").resolve())
    assert resolved["mpi4py"].startswith(f"{stack}/venv/lib/")
    assert resolved["libmpi"] == [str(stack / "lib" / "libmpi.so.40")]  # from the loader's maps
    assert facts["rank_env"]["variables"]["NCCL_DEBUG"] == "INFO"
    assert judged(stack, facts) == []
    summary = rank_env._summary("node1", facts, {"NCCL_DEBUG": "INFO"})
    assert f"libmpi -> {stack}/lib/libmpi.so.40" in summary and "NCCL_DEBUG=INFO" in summary


def test_a_pythonpath_that_shadows_mpi4py_is_named_with_its_line(stack, login, tmp_path):
    stand_in(tmp_path / "mine", SYSTEM_LIBMPI)
    login.setenv("PYTHONPATH", str(tmp_path / "mine"))
    line = f"/home/mpi/.bashrc:12: export PYTHONPATH={tmp_path / 'mine'}"
    (result, *others) = judged(stack, read(stack, {"PYTHONPATH": [line]}))
    assert result.status == Status.FAIL
    assert f"imports mpi4py from {tmp_path / 'mine'}/mpi4py/__init__.py" in result.evidence
    assert "set at /home/mpi/.bashrc:12 (`export PYTHONPATH=" in result.evidence
    assert result.fix.startswith("remove the line at /home/mpi/.bashrc:12")
    # and that mpi4py loads the system's libmpi: named too, not blamed on a package
    assert [r.evidence.split(",")[0] for r in others] == [f"mpi4py loads {SYSTEM_LIBMPI.resolve()}"]


def test_a_missing_mpi4py_or_a_python_that_does_not_start(stack, login, tmp_path):
    bare = tmp_path / "fp2"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare / "venv")], check=True)
    login.setenv("PATH", f"{bare}/venv/bin:/usr/bin:/bin")
    facts = read(bare)
    facts["stack_files"] = {
        "problems": [{"path": "venv/lib/python3.11/site-packages/mpi4py/", "what": "missing"}]
    }
    (result,) = judged(bare, facts)
    assert "ModuleNotFoundError: No module named 'mpi4py'" in result.evidence
    assert "the stack's manifest says venv/lib/python3.11/site-packages/mpi4py/ missing" in (
        result.evidence
    )
    assert "installs the stack again from the pack" in result.fix
    login.setenv("PYTHONHOME", str(tmp_path / "nowhere"))
    (result,) = judged(bare, read(bare, {"PYTHONHOME": ["/etc/environment:3: PYTHONHOME=/x"]}))
    assert "does not start" in result.evidence and "PYTHONHOME=" in result.evidence
    assert result.fix.startswith("remove the line at /etc/environment:3")


def test_a_python_outside_the_stack_and_a_harmless_loading_variable(stack, login, tmp_path):
    login.setenv("LD_PRELOAD", "")
    login.setenv("PATH", "/usr/bin:/bin")
    (result,) = [r for r in judged(stack, read(stack)) if r.status == Status.FAIL]
    assert "not the stack's" in result.evidence and "its prefix /usr" in result.evidence
    login.setenv("PATH", f"{stack}/venv/bin:/usr/bin:/bin")
    (result,) = judged(stack, read(stack, {"LD_PRELOAD": ["/home/mpi/.bashrc:4: LD_PRELOAD="]}))
    assert (
        result.status == Status.WARN and "nothing doctor resolved comes from it" in result.evidence
    )


def test_settings_that_differ_between_nodes_are_warned_on_the_odd_node():
    line = "/home/mpi/.bashrc:7: export NCCL_PROTO=Simple"
    facts = {
        name: {
            "rank_env": {"variables": dict(values), "loading": []},
            "access": {"setters": setters},
        }
        for name, values, setters in (
            ("node1", {"NCCL_DEBUG": "INFO"}, {}),
            ("node2", {"NCCL_DEBUG": "INFO", "NCCL_PROTO": "Simple"}, {"NCCL_PROTO": [line]}),
            ("node3", {"NCCL_DEBUG": "INFO"}, {}),
        )
    }
    tuning = {n: rank_env._tuning(f["rank_env"], {}) for n, f in facts.items()}
    found = rank_env._odd_settings(tuning, facts)
    assert list(found) == ["node2"]
    (result,) = found["node2"]
    assert result.evidence == (
        "ranks on node2 get NCCL_PROTO=Simple, set at /home/mpi/.bashrc:7 "
        "(`export NCCL_PROTO=Simple`); most nodes have NCCL_PROTO unset"
    )
    assert result.fix.startswith("remove the line at /home/mpi/.bashrc:7")


def test_a_login_without_python_is_left_to_the_env_check(stack, login):
    from mpicluster.doctor.checks.rank_env import check
    from tests.unit.test_doctor_checks import gathered

    login.setenv("PATH", "/nonexistent")
    facts = read(stack)
    assert facts["rank_env"]["resolved"]["error"] == "no python or python3 in PATH"

    def tweak(every):
        for node in every.values():
            node["rank_env"] = facts["rank_env"]

    report = check(gathered(tweak=tweak))
    assert (report.results, report.not_checked) == ([], ["node1", "node2", "node3"])
