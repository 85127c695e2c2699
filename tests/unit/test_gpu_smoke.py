"""The GPU smoke test's pure logic: nccl-tests' output, the mpirun lines of the GPU runs,
how their results are judged and reported, and when the GPU part does not run.

The all_reduce_perf samples in data/ were printed by a small C program that calls
nccl-tests 2.19.6's own printf formats (src/util.cu: writeDeviceReport,
writeResultHeader, writeBenchmarkLinePreamble, writeBenchmarkLineBody with getFloatStr,
writeResultFooter) for made-up timings of 4 ranks on 2 nodes; NCCL INFO lines were put
between them as NCCL_DEBUG=INFO does, and the failure sample uses common.h's NCCLCHECK
and TESTCHECK formats. Trailing spaces are nccl-tests' own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mpicluster import nccl_tests

DATA = Path(__file__).parent / "data"


def sample(name: str = "all_reduce_perf") -> str:
    return (DATA / f"{name}.txt").read_text()


# --- nccl-tests' output -------------------------------------------------------------


def test_all_reduce_perf_rows_devices_and_footer_are_read():
    out = nccl_tests.parse(sample())
    assert len(out.rows) == 13  # 8 B .. 128 MiB, x4: the NCCL INFO lines are not rows
    first, last = out.rows[0], out.rows[-1]
    assert (first.bytes, first.count, first.type, first.redop, first.root) == (
        8,
        2,
        "float",
        "sum",
        -1,
    )
    assert first.out_of_place == nccl_tests.Half(18.50, 0.00, 0.00, 0)
    assert last.bytes == 134217728 and last.count == 33554432
    assert last.out_of_place == nccl_tests.Half(6729.39, 19.95, 29.92, 0)
    assert last.in_place == nccl_tests.Half(6796.50, 19.75, 29.62, 0)
    assert all(row.exact for row in out.rows) and out.wrong_rows == []
    assert out.out_of_bounds == 0 and out.avg_busbw_gbs == pytest.approx(10.9208)
    assert out.min_bw_check == "" and out.complete and out.failures == []
    assert (out.version, out.nccl) == ("2.19.6", "2.29.7")
    assert [(d.rank, d.host, d.device) for d in out.devices] == [
        (0, "gpu01", 0),
        (1, "gpu01", 1),
        (2, "gpu02", 0),
        (3, "gpu02", 1),
    ]
    assert {d.name for d in out.devices} == {"NVIDIA H100 80GB HBM3"}
    json.dumps(out.to_dict())


def test_wrong_elements_are_counted_even_in_g_notation():
    out = nccl_tests.parse(sample("all_reduce_perf.wrong"))
    assert out.out_of_bounds == 1
    [row] = out.wrong_rows
    assert row.bytes == 8388608 and row.out_of_place.wrong == 0
    assert row.in_place.wrong == 2097150  # printed with %6g: 2.09715e+06
    assert row.exact is False


def test_an_unchecked_run_has_no_wrong_counts():
    out = nccl_tests.parse(sample("all_reduce_perf.nocheck"))
    assert len(out.rows) == 13
    assert all(r.out_of_place.wrong is None and r.in_place.wrong is None for r in out.rows)
    assert all(r.exact is None for r in out.rows) and out.wrong_rows == []


def test_the_bandwidth_check_and_failures_are_read():
    text = sample().replace("10.9208 \n", "10.9208 FAILED\n")
    out = nccl_tests.parse(text)
    assert (out.avg_busbw_gbs, out.min_bw_check) == (10.9208, "FAILED")
    failed = nccl_tests.parse(sample("all_reduce_perf.nccl_error"))
    assert failed.rows == [] and not failed.complete and len(failed.devices) == 4
    assert failed.failures[0].startswith("gpu02: Test NCCL failure common.cu:1249")


def test_nccl_version_codes_and_exit_statuses():
    assert nccl_tests.nccl_version(22907) == "2.29.7"
    assert nccl_tests.nccl_version(21805) == "2.18.5"
    assert nccl_tests.nccl_version(2805) == "2.8.5"  # before 2.9: major*1000
    # src/common.h's testResult_t is the exit status
    assert (nccl_tests.OK, nccl_tests.NCCL_ERROR, nccl_tests.WRONG_OR_SLOW) == (0, 3, 7)
    assert "NCCL error" in nccl_tests.exit_meaning(3)
    assert "NCCL_TESTS_MIN_BW" in nccl_tests.exit_meaning(7)
    assert nccl_tests.exit_meaning(139) == "exit status 139"
