"""GPU health: what the probe reads (remote/gpuhealth.py, loaded as the probe ships it)
on a real H200's `nvidia-smi -q -x` (tests/unit/data/gpu-h200), on that XML with one
field changed to each fault, on NVIDIA's documented `nvlink -s` and Xid line formats;
and doctor's judgement of it (doctor/checks/gpu_health.py)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from mpicluster import remote
from mpicluster.doctor.checks import gpu_health
from mpicluster.doctor.model import Status

DATA = Path(__file__).parent / "data" / "gpu-h200"
H200_XML = (DATA / "nvidia-smi-q.xml").read_text()
BUS = "00000000:00:06.0"


@pytest.fixture(scope="module")
def probe():
    namespace: dict = {"__name__": "gpuhealth"}
    exec(compile(remote.script("gpuhealth"), "gpuhealth.py", "exec"), namespace)  # noqa: S102
    return namespace


def changed(**fields: str) -> str:
    """The H200's XML with elements (paths under <gpu>, "/" as "__") set to new text."""
    root = ET.fromstring(H200_XML)  # noqa: S314 - the test's own data
    gpu = root.find("gpu")
    for path, text in fields.items():
        element = gpu.find(path.replace("__", "/"))
        assert element is not None, path
        element.text = text
    return ET.tostring(root, encoding="unicode")


def health(probe, xml: str = H200_XML, nvlink: str = "", xids: list | None = None) -> dict:
    return {
        "gpus": probe["parse_query"](xml),
        "nvlink": probe["parse_nvlink"](nvlink),
        "xids": xids if xids is not None else [],
        "errors": [],
    }


def test_the_h200_reads_as_it_is_and_is_healthy(probe):
    (gpu,) = probe["parse_query"](H200_XML)
    assert gpu["index"] == 0 and gpu["bus_id"] == BUS and gpu["serial"] == "1654124044597"
    assert gpu["name"] == "NVIDIA H200" and gpu["persistence"] == "Enabled"
    assert gpu["pcie"] == {"gen": 5, "gen_max": 5, "width": 16, "width_max": 16}
    assert (gpu["slowdowns"], gpu["idle"]) == ([], True)
    assert gpu["ecc"] == {
        "mode": "Enabled",
        "volatile_uncorrectable": 0,
        "aggregate_uncorrectable": 0,
    }
    assert gpu["remapped"] == {"uncorrectable": 0, "pending": False, "failure": False}
    assert gpu["fabric"] == {"state": "N/A", "status": "N/A"}
    assert gpu["recovery_action"] == "None"
    assert probe["parse_nvlink"]((DATA / "nvidia-smi-nvlink-s.txt").read_text()) == {}
    # its kernel log has NVRM lines but no Xid
    assert probe["parse_xids"]((DATA / "dmesg-xid.txt").read_text(), 4000.0, 86400) == []
    assert gpu_health.judge("g1", health(probe)) == []
    assert gpu_health.summary(health(probe)) == "no hardware Xid in 24 h"


@pytest.mark.parametrize(
    ("fields", "status", "words"),
    [
        (
            {"ecc_errors__volatile__dram_uncorrectable": "2"},
            Status.FAIL,
            "2 uncorrectable ECC error(s) since the driver loaded",
        ),
        (
            {"ecc_errors__aggregate__sram_uncorrectable_secded": "1"},
            Status.WARN,
            "1 uncorrectable ECC error(s) in its lifetime",
        ),
        ({"remapped_rows__remapped_row_failure": "Yes"}, Status.FAIL, "row remapping failed"),
        ({"remapped_rows__remapped_row_pending": "Yes"}, Status.FAIL, "waits for a GPU reset"),
        (
            {"pci__pci_gpu_link_info__link_widths__current_link_width": "8x"},
            Status.WARN,
            "PCIe link x8 of x16",
        ),
        (
            {
                "pci__pci_gpu_link_info__pcie_gen__current_link_gen": "3",
                "clocks_event_reasons__clocks_event_reason_gpu_idle": "Not Active",
            },
            Status.WARN,
            "PCIe gen 3 of 5 while busy",
        ),
        (
            {"clocks_event_reasons__clocks_event_reason_hw_thermal_slowdown": "Active"},
            Status.WARN,
            "clocks held down: hardware thermal slowdown",
        ),
        (
            {"clocks_event_reasons__clocks_event_reason_hw_power_brake_slowdown": "Active"},
            Status.WARN,
            "external power brake",
        ),
        (
            {"fabric__state": "In Progress", "fabric__status": "N/A"},
            Status.FAIL,
            "NVSwitch fabric In Progress",
        ),
        (
            {"gpu_recovery_action": "Node Reboot Required"},
            Status.FAIL,
            "the driver asks for recovery: Node Reboot Required",
        ),
        ({"persistence_mode": "Disabled"}, Status.WARN, "persistence mode is off"),
    ],
)
def test_each_fault_is_one_finding_that_names_the_gpu_and_the_fix(probe, fields, status, words):
    (finding,) = gpu_health.judge("g1", health(probe, changed(**fields)))
    assert finding.status == status
    assert finding.evidence.startswith(f"g1 GPU 0 ({BUS}, serial 1654124044597): ")
    assert words in finding.evidence
    assert finding.fix


def test_an_idle_gpu_may_drop_its_link_generation(probe):
    idle_gen3 = changed(pci__pci_gpu_link_info__pcie_gen__current_link_gen="3")
    assert gpu_health.judge("g1", health(probe, idle_gen3)) == []


def test_drivers_before_535_name_throttle_reasons_and_double_bit_errors(probe):
    old = H200_XML.replace("clocks_event_reason", "clocks_throttle_reason")
    root = ET.fromstring(old)  # noqa: S314 - the test's own data
    gpu = root.find("gpu")
    gpu.find("clocks_throttle_reasons/clocks_throttle_reason_hw_slowdown").text = "Active"
    volatile = gpu.find("ecc_errors/volatile")
    for child in list(volatile):
        volatile.remove(child)
    ET.SubElement(ET.SubElement(volatile, "double_bit"), "total").text = "3"
    (parsed,) = probe["parse_query"](ET.tostring(root, encoding="unicode"))
    assert parsed["slowdowns"] == ["hw_slowdown"]
    assert parsed["ecc"]["volatile_uncorrectable"] == 3


NVLINK = """GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)
\t Link 0: 26.562 GB/s
\t Link 1: <inactive>
\t Link 2: 26.562 GB/s
GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-2)
\t Link 0: <inactive>
\t Link 1: <inactive>
"""


def test_an_inactive_nvlink_beside_active_ones_fails(probe):
    links = probe["parse_nvlink"](NVLINK)
    assert links == {"0": {"links": 3, "inactive": [1]}, "1": {"links": 2, "inactive": [0, 1]}}
    (finding,) = gpu_health.judge("g1", health(probe, nvlink=NVLINK))
    assert finding.status == Status.FAIL
    assert "NVLink link(s) 1 inactive of 3" in finding.evidence
    # GPU 1 (no such GPU in this XML) has all links down: a GPU without NVLink in use
    assert gpu_health.summary(health(probe, nvlink=NVLINK)).startswith("NVLink 2/5 up")


def test_hardware_xids_of_the_last_day_fail_and_name_the_gpu(probe):
    log = (
        "[ 1000.500000] NVRM: Xid (PCI:0000:00:06): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus.\n"
        "[ 2000.000000] NVRM: Xid (PCI:0000:00:06): 13, pid=4242, name=python, Graphics "
        "Exception: ESR 0x504648=0x10000e\n"
        "[   10.000000] NVRM: Xid (PCI:0000:00:06): 48, pid=1, name=x, DBE (double bit error)\n"
    )
    xids = probe["parse_xids"](log, 100000.0, 99500)  # the 48 is older than the window
    assert [(x["xid"], x["age_s"]) for x in xids] == [(79, 98999), (13, 98000)]
    (finding,) = gpu_health.judge("g1", health(probe, xids=xids))  # 13: a program's own
    assert finding.status == Status.FAIL
    assert finding.evidence == (
        f"g1 GPU 0 ({BUS}, serial 1654124044597): Xid 79 27 h ago: the GPU has fallen off the bus"
    )
    assert finding.fix.startswith("reboot the node")
    unknown_gpu = probe["parse_xids"](log.replace("00:06", "17:00"), 100000.0, 99500)
    (finding,) = gpu_health.judge("g1", health(probe, xids=unknown_gpu))
    assert finding.evidence.startswith("g1 GPU at 0000:17:00: Xid 79")


def test_what_could_not_be_read_is_said():
    read = {"gpus": [], "nvlink": {}, "xids": None, "errors": ["dmesg: Operation not permitted"]}
    assert gpu_health.summary(read) == "not read: dmesg: Operation not permitted"


def test_what_runs_on_nodes_parses_as_python_3_6():
    """The probe and its helpers run on the nodes' own Python 3.6 and later."""
    import ast

    folders = (Path(remote.__file__).parent, remote.MODULE_UTILS)
    shipped = [p for folder in folders for p in sorted(folder.glob("*.py"))]
    assert any(p.name == "gpuhealth.py" for p in shipped)
    for path in shipped:
        ast.parse(path.read_text(), filename=str(path), feature_version=(3, 6))


def test_gpudirect_rdma_off_beside_infiniband_is_a_warning_with_the_fix(probe):
    # the H200's kernel: 6.18 with the driver's open kernel module, no peer-memory module
    assert "Open Kernel Module" in (DATA / "driver-version.txt").read_text()
    h200 = {"peermem_loaded": None, "peermem_available": False, "open_kernel_module": True}
    h200 |= {"kernel": "6.18.44-fc-v310-gpu", "dmabuf_kernel": True}
    ib = ["mlx5_0:1"]
    assert gpu_health.judge_gpudirect("g1", {"gpudirect": h200}, ib) == []  # dma-buf
    old_kernel = h200 | {"kernel": "5.4.0-150-generic", "dmabuf_kernel": False}
    (finding,) = gpu_health.judge_gpudirect("g1", {"gpudirect": old_kernel}, ib)
    assert finding.status == Status.WARN
    assert finding.evidence.startswith("g1: GPUDirect RDMA is off over mlx5_0:1: nvidia-peermem")
    assert "install the NVIDIA driver's nvidia-peermem" in finding.fix
    loadable = old_kernel | {"peermem_available": True, "open_kernel_module": False}
    (finding,) = gpu_health.judge_gpudirect("g1", {"gpudirect": loadable}, ib)
    assert finding.fix.startswith("modprobe nvidia-peermem")
    loaded = loadable | {"peermem_loaded": "nvidia_peermem"}
    assert gpu_health.judge_gpudirect("g1", {"gpudirect": loaded}, ib) == []
    # no InfiniBand or RoCE port: nothing to say (the H200 here had none)
    assert gpu_health.judge_gpudirect("g1", {"gpudirect": old_kernel}, []) == []


def test_the_probe_reads_what_gpudirect_needs_on_this_machine(probe):
    nodeinfo: dict = {"__name__": "nodeinfo"}
    exec(compile(remote.script("nodeinfo"), "nodeinfo.py", "exec"), nodeinfo)  # noqa: S102
    found = nodeinfo["gpudirect"]()
    assert set(found) == {
        "peermem_loaded",
        "peermem_available",
        "open_kernel_module",
        "kernel",
        "dmabuf_kernel",
    }
    assert found["kernel"] and isinstance(found["dmabuf_kernel"], bool)
