"""GPU health, judged from what the probe read on each GPU node (remote/gpuhealth.py):
the `gpus` check's findings beyond counts and versions. Each names the GPU (index, bus
id, serial) and the fix.

Xid meanings are NVIDIA's ("Xid Errors", the GPU deployment and management guide), kept
as the node-health tools that drain GPU nodes keep them: the ones below mean the GPU or
its memory, power, NVLink or firmware, not a program's bug (13, 31 and 43 are mostly a
program's own: an illegal address, an MMU fault, a stopped kernel).
"""

from __future__ import annotations

from typing import Any

from mpicluster.doctor.model import Result, failed, warned

#: Xid -> (what it means, the fix).
RESET = "drain the node and reset the GPU (nvidia-smi -r -i {index}) or reboot it"
REPLACE = "drain the node; if it recurs after a reset, have the GPU replaced"
HARDWARE_XIDS: dict[int, tuple[str, str]] = {
    48: ("a double-bit ECC error", f"{RESET}; {REPLACE}"),
    61: ("an internal micro-controller breakpoint", RESET),
    62: ("an internal micro-controller halt", RESET),
    63: ("an ECC page retirement or row remap was recorded", "reset the GPU when it is idle"),
    64: ("an ECC page retirement or row remap failed", REPLACE),
    74: ("an NVLink error", f"{RESET}; check the NVLink bridges or NVSwitch trays"),
    79: ("the GPU has fallen off the bus", f"reboot the node; {REPLACE}; check its power"),
    92: ("a high single-bit ECC error rate", REPLACE),
    94: ("a contained ECC error (the process was stopped)", RESET),
    95: ("an uncontained ECC error", f"{RESET}; {REPLACE}"),
    109: ("a context switch timeout", RESET),
    119: ("a GSP firmware RPC timeout", RESET),
    120: ("a GSP firmware error", RESET),
    121: ("a C2C link error", RESET),
    140: ("an unrecovered ECC error", f"{RESET}; {REPLACE}"),
}
#: The clock event reasons the probe reports, in words.
SLOWDOWNS = {
    "hw_slowdown": "hardware slowdown (power or temperature out of range)",
    "hw_thermal_slowdown": "hardware thermal slowdown",
    "hw_power_brake_slowdown": "external power brake (the power supply asserted it)",
    "sw_thermal_slowdown": "driver thermal slowdown",
}


def judge_count(node: str, info: dict[str, Any], wanted: int) -> list[Result]:
    """nvidia-smi works on the node and shows the GPUs the inventory gives it (none: it
    does); the node's own health check asks the same (remote/health.py)."""
    if not info.get("ok"):
        return [
            failed(
                node,
                f"nvidia-smi fails on {node}: {info.get('error')}",
                f"install or repair the NVIDIA driver on {node} (nvidia-smi must list the "
                "GPUs), or set its gpus: 0 in the inventory",
            )
        ]
    if info["count"] != wanted:
        shown = f"{info['count']} GPU" + ("" if info["count"] == 1 else "s")
        return [
            failed(
                node,
                f"nvidia-smi shows {shown} on {node}, the inventory says {wanted}",
                f"fix gpus: for {node} in the inventory, or find the missing GPUs "
                "(nvidia-smi -q, dmesg: Xid errors, fallen off the bus)",
            )
        ]
    return []


def gpu_name(node: str, gpu: dict[str, Any]) -> str:
    serial = gpu.get("serial")
    serial = f", serial {serial}" if serial and serial != "N/A" else ""
    return f"{node} GPU {gpu['index']} ({gpu.get('bus_id')}{serial})"


def judge(node: str, health: dict[str, Any]) -> list[Result]:
    """Every finding on one node's GPUs (none: healthy, as far as it could be read)."""
    found: list[Result] = []
    nvlink = health.get("nvlink") or {}
    by_bus = {_bus(g.get("bus_id")): g for g in health.get("gpus") or []}
    for gpu in health.get("gpus") or []:
        found += _memory(node, gpu) + _links(node, gpu, nvlink.get(str(gpu["index"])))
        found += _state(node, gpu)
    for xid in health.get("xids") or []:
        found += _xid(node, xid, by_bus.get(_bus(xid["bus"])))
    return found


def _bus(bus_id: str | None) -> str:
    """Bus ids compared as the kernel writes them: "00000000:17:00.0" -> "0000:17:00"."""
    text = (bus_id or "").lower()
    domain, _, rest = text.partition(":")
    return f"{domain[-4:]}:{rest}".rsplit(".", 1)[0] if rest else text


def _memory(node: str, gpu: dict[str, Any]) -> list[Result]:
    name, found = gpu_name(node, gpu), []
    ecc = gpu.get("ecc") or {}
    if ecc.get("volatile_uncorrectable"):
        found.append(
            failed(
                node,
                f"{name}: {ecc['volatile_uncorrectable']} uncorrectable ECC error(s) since "
                "the driver loaded",
                RESET.format(index=gpu["index"]) + "; " + REPLACE,
            )
        )
    elif ecc.get("aggregate_uncorrectable"):
        found.append(
            warned(
                node,
                f"{name}: {ecc['aggregate_uncorrectable']} uncorrectable ECC error(s) in its "
                "lifetime",
                "watch it: more of them mean the GPU should be replaced",
            )
        )
    remapped = gpu.get("remapped") or {}
    if remapped.get("failure"):
        found.append(failed(node, f"{name}: row remapping failed", REPLACE))
    elif remapped.get("pending") or gpu.get("retirement_pending"):
        # a failure: the drain that lets running jobs end is the way to the reset
        found.append(
            failed(
                node,
                f"{name}: a row remap or page retirement waits for a GPU reset",
                RESET.format(index=gpu["index"]) + " when it is idle",
            )
        )
    return found


def _links(node: str, gpu: dict[str, Any], nvlink: dict[str, Any] | None) -> list[Result]:
    name, found = gpu_name(node, gpu), []
    if nvlink and nvlink["inactive"] and len(nvlink["inactive"]) < nvlink["links"]:
        links = ", ".join(map(str, nvlink["inactive"]))
        found.append(
            failed(
                node,
                f"{name}: NVLink link(s) {links} inactive of {nvlink['links']}",
                "check nvidia-fabricmanager and the NVLink bridges; "
                + RESET.format(index=gpu["index"]),
            )
        )
    pcie = gpu.get("pcie") or {}
    width, width_max = pcie.get("width"), pcie.get("width_max")
    if width and width_max and width < width_max:
        found.append(
            warned(
                node,
                f"{name}: PCIe link x{width} of x{width_max}",
                "reseat the GPU or its riser; check the slot's lanes in the BIOS",
            )
        )
    gen, gen_max = pcie.get("gen"), pcie.get("gen_max")
    if gen and gen_max and gen < gen_max and not gpu.get("idle"):
        # an idle GPU drops its link's generation to save power: only a busy one counts
        found.append(
            warned(
                node,
                f"{name}: PCIe gen {gen} of {gen_max} while busy",
                "reseat the GPU or its riser; check the slot's PCIe generation in the BIOS",
            )
        )
    return found


def _state(node: str, gpu: dict[str, Any]) -> list[Result]:
    name, found = gpu_name(node, gpu), []
    action = gpu.get("recovery_action")
    if action and action not in ("None", "N/A"):
        found.append(
            failed(
                node,
                f"{name}: the driver asks for recovery: {action}",
                RESET.format(index=gpu["index"]),
            )
        )
    fabric = gpu.get("fabric") or {}
    state = fabric.get("state")
    if state and state != "N/A" and (state != "Completed" or fabric.get("status") != "Success"):
        found.append(
            failed(
                node,
                f"{name}: NVSwitch fabric {state} ({fabric.get('status')})",
                "start nvidia-fabricmanager (systemctl enable --now nvidia-fabricmanager), "
                "the same version as the driver",
            )
        )
    for reason in gpu.get("slowdowns") or []:
        found.append(
            warned(
                node,
                f"{name}: clocks held down: {SLOWDOWNS.get(reason, reason)}",
                "check the node's cooling and power supply (nvidia-smi -q -d PERFORMANCE)",
            )
        )
    if gpu.get("persistence") == "Disabled":
        found.append(
            warned(
                node,
                f"{name}: persistence mode is off: every job pays the driver's start",
                "run nvidia-persistenced (systemctl enable --now nvidia-persistenced)",
            )
        )
    return found


def _xid(node: str, xid: dict[str, Any], gpu: dict[str, Any] | None) -> list[Result]:
    known = HARDWARE_XIDS.get(xid["xid"])
    if known is None:
        return []
    meaning, fix = known
    where = gpu_name(node, gpu) if gpu else f"{node} GPU at {xid['bus']}"
    age = xid.get("age_s")
    when = f" {_ago(age)} ago" if age is not None else ""
    index = gpu["index"] if gpu else "N"
    return [failed(node, f"{where}: Xid {xid['xid']}{when}: {meaning}", fix.format(index=index))]


def _ago(seconds: int) -> str:
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h"


def summary(health: dict[str, Any]) -> str:
    """What was read, for a healthy node's line: the parts that could not be read too."""
    parts = []
    links = health.get("nvlink") or {}
    if links:
        total = sum(g["links"] for g in links.values())
        up = total - sum(len(g["inactive"]) for g in links.values())
        parts.append(f"NVLink {up}/{total} up")
    if health.get("xids") is not None:
        parts.append("no hardware Xid in 24 h")
    for error in health.get("errors") or []:
        parts.append(f"not read: {error}")
    return "; ".join(parts)


def judge_gpudirect(node: str, health: dict[str, Any], rdma_ports: list[str]) -> list[Result]:
    """A node with GPUs and an active InfiniBand/RoCE port, where NCCL cannot move GPU
    memory straight to the card: it stages through host memory, several times slower."""
    direct = health.get("gpudirect")
    if not rdma_ports or not direct or direct.get("peermem_loaded"):
        return []
    if direct.get("open_kernel_module") and direct.get("dmabuf_kernel"):
        return []  # NCCL registers GPU memory through dma-buf: no module needed
    load = (
        "modprobe nvidia-peermem and list it in /etc/modules-load.d/ (or rerun `mpicluster "
        "up`, which does both)"
        if direct.get("peermem_available")
        else "install the NVIDIA driver's nvidia-peermem module (it comes with driver 470 "
        "and later), or use the driver's open kernel module on a kernel >= 5.12 (dma-buf)"
    )
    return [
        warned(
            node,
            f"{node}: GPUDirect RDMA is off over {', '.join(rdma_ports)}: nvidia-peermem is not "
            f"loaded and dma-buf is not available (kernel {direct.get('kernel') or '?'}"
            f"{', open kernel module' if direct.get('open_kernel_module') else ''}): NCCL "
            "stages GPU memory through host memory",
            load,
        )
    ]
