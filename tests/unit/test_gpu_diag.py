"""`doctor --gpu-diag LEVEL`: DCGM's `dcgmi diag -j` judged (pure logic). The JSON is
shaped as DCGM documents it (3.x: test_categories / tests / results with gpu_ids; 4.x:
entity_id); no DCGM runs on these machines, and the H200 lent here had none either."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mpicluster.doctor import gpu_diag
from mpicluster.doctor.model import Status
from mpicluster.util.errors import UsageError

DCGM3_PASS = {
    "DCGM GPU Diagnostic": {
        "test_categories": [
            {
                "category": "Deployment",
                "tests": [
                    {"name": "Denylist", "results": [{"status": "Pass"}]},
                    {"name": "NVML Library", "results": [{"status": "Pass"}]},
                ],
            },
            {
                "category": "Integration",
                "tests": [{"name": "PCIe", "results": [{"gpu_ids": "0", "status": "Pass"}]}],
            },
        ],
        "version": "3.3.5",
    }
}
DCGM3_FAIL = {
    "DCGM GPU Diagnostic": {
        "test_categories": [
            {
                "category": "Hardware",
                "tests": [
                    {
                        "name": "Memory",
                        "results": [
                            {"gpu_ids": "0", "status": "Pass"},
                            {
                                "gpu_ids": "3",
                                "status": "Fail",
                                "warnings": [
                                    {
                                        "warning": "Pending page retirements detected on GPU 3",
                                        "error_id": 25,
                                    }
                                ],
                            },
                        ],
                    }
                ],
            },
            {
                "category": "Integration",
                "tests": [
                    {
                        "name": "PCIe",
                        "results": [
                            {"gpu_ids": "1", "status": "Warn", "info": ["PCIe replay rate high"]}
                        ],
                    }
                ],
            },
        ]
    }
}
DCGM4_FAIL = {
    "DCGM Diagnostic": {
        "test_categories": [
            {
                "category": "Stress",
                "tests": [
                    {
                        "name": "targeted_power",
                        "results": [
                            {"entity_group": "GPU", "entity_id": 2, "status": "Fail",
                             "errors": [{"error": "GPU 2 power below target", "error_id": 78}]},
                        ],
                    }
                ],
            }
        ]
    }
}  # fmt: skip


def test_a_passing_run_is_one_line_per_node():
    (result,) = gpu_diag.judge("g1", 1, 0, json.dumps(DCGM3_PASS), "")
    assert result.status == Status.PASS
    assert result.evidence == "g1: dcgmi diag -r 1: 3 result(s), none failed"


def test_each_failing_or_warning_test_names_the_gpu_and_what_dcgm_said():
    failing, warning = gpu_diag.judge("g1", 2, 226, "Running...\n" + json.dumps(DCGM3_FAIL), "")
    assert failing.status == Status.FAIL
    assert failing.evidence == (
        "g1 GPU 3: DCGM Memory: Fail: Pending page retirements detected on GPU 3"
    )
    assert warning.status == Status.WARN
    assert warning.evidence == "g1 GPU 1: DCGM PCIe: Warn: PCIe replay rate high"
    (dcgm4,) = gpu_diag.judge("g2", 3, 226, json.dumps(DCGM4_FAIL), "")
    assert dcgm4.evidence == "g2 GPU 2: DCGM targeted_power: Fail: GPU 2 power below target"


def test_no_dcgm_a_stopped_host_engine_and_a_run_past_its_limit_are_said():
    (none,) = gpu_diag.judge("g1", 1, 0, gpu_diag.NO_DCGMI + "\n", "")
    assert none.status == Status.WARN and "DCGM is not installed" in none.evidence
    assert "datacenter-gpu-manager" in none.fix
    engine = "Error: unable to establish a connection to the specified host: localhost"
    (down,) = gpu_diag.judge("g1", 1, 255, "", engine)
    assert down.status == Status.WARN and "host engine is not running" in down.evidence
    (late,) = gpu_diag.judge("g1", 3, 124, "", "")
    assert late.status == Status.FAIL
    assert late.evidence == "g1: dcgmi diag -r 3 ran past 3600 s and was stopped"


def test_the_command_runs_only_where_dcgmi_is_and_under_the_levels_limit():
    assert gpu_diag.command(2).endswith("timeout -k 10 600 dcgmi diag -r 2 -j")
    assert gpu_diag.command(1).startswith("command -v dcgmi")
    with pytest.raises(UsageError, match="--gpu-diag 7: a DCGM run level, 1 to 4"):
        gpu_diag.check_level(7)
    gpu_diag.check_level(None)


def test_a_wrong_level_is_one_line_and_exit_2_before_any_node_is_reached(tmp_path):
    inventory = tmp_path / "inv.yaml"
    inventory.write_text("cluster: t\nnodes:\n  - {name: g1, address: 127.0.0.1, gpus: 1}\n")
    done = subprocess.run(
        [sys.executable, "-m", "mpicluster", "doctor", str(inventory), "--gpu-diag", "9"],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
        check=False,
        timeout=60,
    )
    assert done.returncode == 2, done
    assert "--gpu-diag 9: a DCGM run level, 1 to 4" in done.stderr
    assert "Traceback" not in done.stderr
