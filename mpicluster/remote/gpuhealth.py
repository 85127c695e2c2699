"""What takes GPU nodes out, as the driver and the kernel report it: read-only, seconds.

A helper for doctor's probe (stdlib only, runs on the node's own Python 3.6+). It reads:
- `nvidia-smi -q -x` (the XML of `nvidia-smi -q`), per GPU: its index, bus id, serial;
  persistence mode; the PCIe link's generation and width, now and at most; the active
  clock event reasons (called throttle reasons before driver 535); ECC mode and
  uncorrectable errors (volatile: since the driver loaded; aggregate: the GPU's life);
  row remapping (pending, failed) and page retirement pending; the NVSwitch fabric's
  state; the recovery action the driver asks for (driver 550 and later);
- `nvidia-smi nvlink -s`: each GPU's links, active with a speed or `<inactive>`;
- the kernel log's Xid lines (`dmesg`) with their age, where the user may read it.
What GPUDirect RDMA needs is in the node facts (nodeinfo.gpudirect), read once.
The judging is doctor's (doctor/checks/gpu_health.py); this only reads.
"""

import re
import shutil
import xml.etree.ElementTree as ET

from nodeinfo import first_existing, read_text, run

#: Clock event reasons that mean the GPU runs slower than it could for a cause outside
#: the workload (the idle, application-clock and sync-boost reasons are normal).
SLOWDOWNS = (
    "hw_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
    "sw_thermal_slowdown",
)
#: "NVRM: Xid (PCI:0000:17:00): 79, pid=..., name=..., GPU has fallen off the bus."
XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+),\s*(.*)$")
STAMP = re.compile(r"^\[\s*(\d+\.\d+)\]")
NVLINK_GPU = re.compile(r"^GPU (\d+): ")
NVLINK_LINK = re.compile(r"^\s*Link (\d+): (.*)$")


def text_of(element, path):
    found = element.find(path) if element is not None else None
    return (found.text or "").strip() if found is not None and found.text else None


def number(text):
    """An int from "16x", "5" or "0"; None from "N/A", "[N/A]" or nothing."""
    match = re.match(r"^\s*(\d+)", text or "")
    return int(match.group(1)) if match else None


def yes(text):
    return (text or "").strip().lower() in ("yes", "active", "enabled")


def uncorrectable(block):
    """The uncorrectable ECC errors in a <volatile> or <aggregate> block: every count
    whose name says uncorrectable (driver 535 and later: sram_uncorrectable_parity,
    dram_uncorrectable, ...), or the older <double_bit><total>."""
    if block is None:
        return None
    counts = [number(c.text) for c in block if "uncorrectable" in c.tag]
    counts = [c for c in counts if c is not None]
    if counts:
        return sum(counts)
    return number(text_of(block, "double_bit/total"))


def events(gpu):
    """The slowdown reasons active now, by their short names."""
    block = gpu.find("clocks_event_reasons")
    prefix = "clocks_event_reason_"
    if block is None:
        block, prefix = gpu.find("clocks_throttle_reasons"), "clocks_throttle_reason_"
    if block is None:
        return [], None
    active = [c.tag[len(prefix) :] for c in block if c.tag.startswith(prefix) and yes(c.text)]
    return [a for a in active if a in SLOWDOWNS], "gpu_idle" in active


def pcie(gpu):
    link = gpu.find("pci/pci_gpu_link_info")
    gen_max = number(text_of(link, "pcie_gen/max_device_link_gen")) or number(
        text_of(link, "pcie_gen/max_link_gen")
    )
    return {
        "gen": number(text_of(link, "pcie_gen/current_link_gen")),
        "gen_max": gen_max,
        "width": number(text_of(link, "link_widths/current_link_width")),
        "width_max": number(text_of(link, "link_widths/max_link_width")),
    }


def one_gpu(index, gpu):
    slow, idle = events(gpu)
    rows = gpu.find("remapped_rows")
    remapped = None
    if rows is not None and number(text_of(rows, "remapped_row_unc")) is not None:
        remapped = {
            "uncorrectable": number(text_of(rows, "remapped_row_unc")),
            "pending": yes(text_of(rows, "remapped_row_pending")),
            "failure": yes(text_of(rows, "remapped_row_failure")),
        }
    return {
        "index": index,
        "bus_id": gpu.get("id"),
        "name": text_of(gpu, "product_name"),
        "serial": text_of(gpu, "serial"),
        "uuid": text_of(gpu, "uuid"),
        "persistence": text_of(gpu, "persistence_mode"),
        "pcie": pcie(gpu),
        "slowdowns": slow,
        "idle": idle,
        "ecc": {
            "mode": text_of(gpu, "ecc_mode/current_ecc"),
            "volatile_uncorrectable": uncorrectable(gpu.find("ecc_errors/volatile")),
            "aggregate_uncorrectable": uncorrectable(gpu.find("ecc_errors/aggregate")),
        },
        "remapped": remapped,
        "retirement_pending": yes(text_of(gpu, "retired_pages/pending_retirement")),
        "fabric": {
            "state": text_of(gpu, "fabric/state"),
            "status": text_of(gpu, "fabric/status"),
        },
        "recovery_action": text_of(gpu, "gpu_recovery_action"),
    }


def parse_query(xml_text):
    """Each GPU of `nvidia-smi -q -x`, in the order nvidia-smi numbers them."""
    # nvidia-smi's own output on the node that ran it (and the nodes have no defusedxml)
    root = ET.fromstring(xml_text)  # noqa: S314
    return [one_gpu(i, gpu) for i, gpu in enumerate(root.findall("gpu"))]


def parse_nvlink(text):
    """{GPU index: {"links": N, "inactive": [link numbers]}} from `nvidia-smi nvlink -s`;
    {} where the GPUs have no NVLink (it then prints nothing)."""
    found = {}
    current = None
    for line in text.splitlines():
        header = NVLINK_GPU.match(line)
        if header:
            current = found.setdefault(header.group(1), {"links": 0, "inactive": []})
            continue
        link = NVLINK_LINK.match(line)
        if link and current is not None:
            current["links"] += 1
            if "inactive" in link.group(2).lower():
                current["inactive"].append(int(link.group(1)))
    return found


def parse_xids(text, uptime, window):
    """The Xid lines of a kernel log (dmesg's default format) younger than `window`
    seconds: [{"bus": "0000:17:00", "xid": 79, "age_s": 120, "text": ...}]."""
    found = []
    for line in text.splitlines():
        match = XID.search(line)
        if not match:
            continue
        stamp = STAMP.match(line)
        age = None
        if stamp and uptime is not None:
            age = max(0, int(uptime - float(stamp.group(1))))
            if age > window:
                continue
        found.append(
            {
                "bus": match.group(1).lower(),
                "xid": int(match.group(2)),
                "age_s": age,
                "text": match.group(3)[:160],
            }
        )
    return found


def uptime():
    text = read_text("/proc/uptime") or ""
    try:
        return float(text.split()[0])
    except (IndexError, ValueError):
        return None


def health(window=24 * 3600):
    """Everything above for the GPUs of this node; each part's error instead, where it
    could not be read."""
    out = {"gpus": [], "nvlink": None, "xids": None, "errors": []}
    smi = first_existing(["/usr/bin/nvidia-smi", "/usr/local/bin/nvidia-smi"]) or shutil.which(
        "nvidia-smi"
    )
    if not smi:
        out["errors"].append("nvidia-smi not found")
        return out
    code, text, err = run([smi, "-q", "-x"], timeout=30)
    try:
        out["gpus"] = parse_query(text) if code == 0 else []
    except ET.ParseError as exc:
        out["errors"].append("nvidia-smi -q -x: not XML (%s)" % exc)
    if code != 0:
        out["errors"].append("nvidia-smi -q -x: %s" % ((err or text).strip()[-200:] or code))
    code, text, err = run([smi, "nvlink", "-s"], timeout=20)
    out["nvlink"] = parse_nvlink(text) if code == 0 else None
    code, text, err = run(["dmesg"], timeout=20)
    if code == 0:
        out["xids"] = parse_xids(text, uptime(), window)
    else:
        out["errors"].append("dmesg: %s" % ((err or text).strip()[-200:] or code))
    return out
