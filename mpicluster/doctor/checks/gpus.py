"""Check 7: on nodes the inventory gives GPUs, nvidia-smi works, shows as many GPUs as
the inventory says, driver and CUDA versions agree across nodes, and each GPU is healthy
(gpu_health: Xid errors, ECC, row remapping, NVLink, PCIe, clocks, NVSwitch fabric,
persistence mode, the driver's recovery action)."""

from __future__ import annotations

from mpicluster.doctor.checks import gpu_health
from mpicluster.doctor.checks.common import majority, plural
from mpicluster.doctor.checks.fabric import active_ports, kind
from mpicluster.doctor.model import CheckReport, failed, passed
from mpicluster.doctor.runner import Gathered

NAME = "gpus"
TITLE = "GPUs (nvidia-smi, count, driver and CUDA versions, health)"


def check(g: Gathered) -> CheckReport:
    wanted = {n.name: n.gpus for n in g.plan.nodes if n.gpus}
    report = CheckReport(NAME, TITLE, not_checked=[n for n in g.unprobed if n in wanted])
    if not wanted:
        report.results.append(passed(None, "the inventory lists no GPUs: nothing to check"))
        return report
    if not g.plan.stack.gpus_present:
        report.results.append(
            passed(
                None,
                "stack.gpus_present is false: the GPU stack is built for these nodes, "
                "their GPUs are not expected (no nvidia-smi check)",
            )
        )
        return report
    working: dict[str, dict] = {}
    for node in g.probed:
        if node not in wanted:
            continue
        info = (g.facts(node) or {}).get("gpus") or {"ok": False, "error": "not probed"}
        counted = gpu_health.judge_count(node, info, wanted[node])
        report.results += counted
        if not counted:
            working[node] = info
    odd: dict[str, list[str]] = {node: [] for node in working}
    for key, label in (("driver", "driver"), ("cuda", "CUDA (driver API)")):
        values = {node: info.get(key) for node, info in working.items()}
        best, differ = majority(values)
        for node in differ:
            odd[node].append(f"{label} {values[node]} (the others: {best})")
    for node, info in working.items():
        seen = g.facts(node) or {}
        # GPUDirect's needs are node facts (nodeinfo), read once for up and doctor alike
        health = {**(seen.get("gpu_health") or {}), "gpudirect": seen.get("gpudirect")}
        ports = [
            f"{device['name']}:{port.get('port')}"
            for device, port in active_ports(seen.get("fabric") or {})
            if kind(device, port) in ("InfiniBand", "RoCE")
        ]
        findings = gpu_health.judge(node, health) + gpu_health.judge_gpudirect(node, health, ports)
        report.results += findings
        if odd[node]:
            report.results.append(
                failed(
                    node,
                    f"{node} differs: {'; '.join(odd[node])}",
                    f"install the same NVIDIA driver on {node} as on the other nodes",
                )
            )
        elif not findings:
            read = gpu_health.summary(health)
            report.results.append(
                passed(
                    node,
                    f"{plural(info['count'], 'GPU')} ({', '.join(info.get('names') or [])}), "
                    f"driver {info.get('driver')}, CUDA {info.get('cuda')}"
                    + (f"; {read}" if read else ""),
                )
            )
    return report
