"""The one-box GPU proof's second round (tests/gpu/onebox.py) without a GPU: the box's
plan from the node facts mpicluster's probe read on the first round's H200
(tests/unit/data/gpu-h200/node-facts.json), its lanes against build.yml's order, the
runs' lanes, and the build's timing lines as the proof's Ansible callback writes them.
The whole offline plan from a carried folder is what tests/gpu/carry.py ends with (it
needs the sources and wheels it downloads)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from mpicluster.stack import prepare, sources
from mpicluster.stack.fingerprint import platform_of

ROOT = Path(__file__).resolve().parents[2]
GPU = ROOT / "tests" / "gpu"
sys.path.insert(0, str(GPU))

import onebox  # noqa: E402
import onebox_runs  # noqa: E402

FACTS = json.loads((ROOT / "tests" / "unit" / "data" / "gpu-h200" / "node-facts.json").read_text())
BUILD_YML = ROOT / "playbooks" / "roles" / "stack_build" / "tasks" / "build.yml"


def box(tmp_path):
    args = onebox.parse_args(["--out", str(tmp_path / "out")])
    return onebox.box_plan(tmp_path / "work", tmp_path / "carry", 1, args)


def test_the_box_gets_ucx_with_cuda_ucc_and_configure_made_on_the_control_machine(tmp_path):
    plan = box(tmp_path)
    facts = {"box": FACTS}
    assert plan.sources.autogen == "control"
    ucx = sources.ucx_wanted(plan, facts)
    assert ucx and sources.ucc_wanted(plan, ucx)
    assert [s.component for s in sources.needed(plan, ucx)] == [
        "openmpi",
        "mpi4py",
        "ucx",
        "ucc",
        "nccl",
        "nccl_tests",
    ]
    platform = platform_of(FACTS, plan, 1)
    assert (platform.cuda, platform.gpu_archs, platform.python) == ("13.0.88", ("9.0",), "3.12")
    # NVML's header for UCX's CUDA support comes with the wheelhouse carry.py fills
    assert "nvidia-nvml-dev==13.0.*" in prepare.stack_wheels(plan, [platform])


def build_yml_order() -> list[str]:
    """The components build.yml builds, in its order."""
    tasks = yaml.safe_load(BUILD_YML.read_text())
    block = next(task["block"] for task in tasks if "block" in task)
    return [task["vars"]["stack_build_component"] for task in block if "vars" in task]


def test_the_lanes_build_what_build_yml_builds_and_wait_as_its_order_says():
    order = build_yml_order()
    assert order == ["ucx", "nccl", "ucc", "openmpi", "nccl_tests", "cuda_allreduce", "python"]
    lanes = {name: (components, after) for name, components, after in onebox.LANES}
    built = [c for components, _ in lanes.values() for c in components]
    assert sorted(built) == sorted(order)
    seen: set[str] = set()
    for name, components, after in onebox.LANES:
        assert set(after) <= seen, f"{name} waits for a lane that comes later"
        for other in after:
            assert all(
                order.index(mine) > order.index(theirs)
                for mine in components
                for theirs in lanes[other][0]
            )
        seen.add(name)
    # UCC links UCX and NCCL; Open MPI is configured against UCX and UCC
    assert set(lanes["ucc"][1]) == {"ucx", "nccl"}
    assert set(lanes["mpi"][1]) == {"ucx", "ucc"}
    assert lanes["nccl"][1] == () and lanes["ucx"][1] == ()


def test_each_gpu_run_waits_for_a_lane_there_is():
    extra = {"mpicluster_layout": {"stacks": "/s"}, "mpicluster_stack_fingerprint": "f"}
    runs = onebox_runs.Runs(None, Path("/logs"), extra, "/usr/local/cuda", 0.0, None)
    lanes = {name for name, _, _ in onebox.LANES}
    planned = runs.plan()
    assert {after for after, _ in planned.values()} <= lanes | {None}
    assert planned["cuda"][0] == "cuda_allreduce" and planned["mpi4py"][0] == "python"
    assert planned["ucx-perftest"][0] == "ucx" and planned["gpu-probes"][0] is None
    # the programs they start besides the stack's (a renamed folder left one behind once)
    for program in (onebox_runs.TORCH_PROGRAM, onebox_runs.PROBES, onebox_runs.MPI4PY_PROGRAM):
        assert program.is_file(), program


def test_the_timing_callback_writes_each_task_as_it_starts(tmp_path):
    """The proof's own callback in a real ansible-playbook run on this machine."""
    playbook = tmp_path / "play.yml"
    playbook.write_text(
        "- hosts: localhost\n  connection: local\n  gather_facts: false\n  tasks:\n"
        "    - name: First step\n      ansible.builtin.command: 'true'\n"
        "    - name: Second step\n      ansible.builtin.command: 'true'\n"
    )
    timing = tmp_path / "timing.txt"
    env = {
        **os.environ,
        "ANSIBLE_CALLBACK_PLUGINS": str(GPU / "callback_plugins"),
        "ANSIBLE_CALLBACKS_ENABLED": "onebox_timing",
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
        "ONEBOX_TIMING_FILE": str(timing),
        "ONEBOX_T0": "0",  # seconds since 1970: the lines say so
    }
    done = subprocess.run(
        [
            *onebox.ansible_playbook(),
            *("-i", "localhost,", "-e", f"ansible_python_interpreter={sys.executable}"),
            str(playbook),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = timing.read_text().splitlines()
    assert [line.split(" s  ", 1)[1] for line in lines] == [
        "First step",
        "Second step",
        "(lane done)",
    ]
    assert all(onebox._seconds(line) > 1.7e9 for line in lines)
    # a lane's summary keeps the tasks of 5 s or more, and where it ended
    assert onebox.task_times(timing) == [lines[-1].strip()]


def test_driver_libraries_in_the_recipes_folders_need_nothing_more(tmp_path):
    found = tmp_path / "stubs"
    found.mkdir()
    for name in ("libcuda.so", "libnvidia-ml.so.1"):
        (found / name).touch()
    spec = {
        "openmpi_cuda": {"libdir_candidates": [str(found)]},
        "ucx": {"cuda": {"libdir_candidates": ["/nowhere", str(found)]}},
    }
    assert onebox.driver_libs_outside(spec, tmp_path) is None
    assert spec["ucx"]["cuda"]["libdir_candidates"] == ["/nowhere", str(found)]
