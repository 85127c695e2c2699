"""Check: fast fabrics. Which RDMA ports (InfiniBand, RoCE, AWS EFA) each node has and
their state, whether the node's MPI and NCCL could use an active one (Open MPI: pml ucx,
or mtl ofi on EFA; NCCL: libibverbs and the device's provider, or a net plugin on EFA),
and whether every node has the same fabric. Without this a job on an InfiniBand cluster
runs over TCP, many times slower, and nothing says so.

Every finding is a warning: a job still runs, over TCP sockets.
"""

from __future__ import annotations

from mpicluster.doctor.checks.common import majority, plural
from mpicluster.doctor.model import CheckReport, Result, passed, warned
from mpicluster.doctor.runner import Gathered

NAME = "fabric"
TITLE = "Fast fabrics (InfiniBand, RoCE, EFA: ports, and whether MPI and NCCL use them)"

ACTIVE = ("ACTIVE", "ACTIVE_DEFER")
#: Open MPI components that carry MPI over each kind of fabric.
MPI_CARRIERS = {"InfiniBand": ("pml:ucx", "btl:openib"), "RoCE": ("pml:ucx", "btl:openib")}
MPI_CARRIERS["EFA"] = ("mtl:ofi",)
NO_UCX_FIX = (
    "use an Open MPI built with UCX: run `mpicluster up` again (its source stack builds "
    "UCX where a node has an RDMA device, CUDA-aware beside CUDA; stack.ucx.enabled: true "
    "forces it, stack.ucx.prefix builds against the site's own: HPC-X, DOCA), or Debian's "
    "and Ubuntu's openmpi-bin (stack: {install: packages})"
)
NO_OFI_FIX = (
    "use an Open MPI built with libfabric (configure --with-ofi; AWS's EFA installer "
    "ships one) so MPI uses EFA through mtl ofi"
)


def kind(device: dict, port: dict) -> str:
    if device.get("provider") == "efa":
        return "EFA"
    if port.get("link_layer") == "InfiniBand":
        return "InfiniBand"
    if port.get("link_layer") == "Ethernet":
        return "RoCE"
    return f"RDMA ({port.get('link_layer') or 'unknown link layer'})"


def port_name(device: dict, port: dict) -> str:
    return f"{device['name']} port {port['port']}"


def describe(device: dict, port: dict) -> str:
    rate = port.get("rate") or "rate unknown"
    over = f" over {port['netdev']}" if port.get("netdev") else ""
    return f"{port_name(device, port)} {kind(device, port)}{over}, {rate}, {port.get('state')}"


def active_ports(fabric: dict) -> list[tuple[dict, dict]]:
    return [
        (device, port)
        for device in fabric.get("devices") or []
        for port in device.get("ports") or []
        if port.get("state") in ACTIVE
    ]


def signature(fabric: dict) -> tuple:
    """What a node brings to a job: its active ports by kind and speed."""
    return tuple(sorted((kind(d, p), p.get("gbps") or 0.0) for d, p in active_ports(fabric)))


def say(sig: tuple) -> str:
    if not sig:
        return "no active RDMA port"
    return ", ".join(f"{k} {g:g} Gb/sec" for k, g in sig)


def why_not_active(node: str, device: dict, port: dict) -> tuple[str, str]:
    """Evidence and fix for a port that is not ACTIVE, from its states."""
    state, phys = port.get("state"), port.get("phys_state")
    where = f"{port_name(device, port)} on {node}"
    seen = f"{where} is {state} (physical state {phys})"
    if phys == "Disabled":
        return seen, (
            f"the port is disabled: enable it (`ibportstate` or the switch), "
            f"then `ibstat {device['name']}`"
        )
    if port.get("link_layer") == "Ethernet" and state == "DOWN":
        netdev = port.get("netdev") or "its network interface"
        return (
            f"{seen}: {netdev} has no link",
            f"bring {netdev} up (`ip link set {netdev} up`) and check its cable and switch port",
        )
    if state in ("INIT", "ARMED") and phys == "LinkUp":
        return (
            f"{seen}: the link is up but no subnet manager has activated the port",
            "run a subnet manager for the fabric: opensm on one node (`apt install opensm`) "
            "or the managed switch's own",
        )
    return (
        f"{seen}: no link",
        f"check the cable and the switch port of {where} (`ibstat {device['name']}`)",
    )


def mca_setting(facts: dict, name: str) -> tuple[str, str] | None:
    """(value, where it is set) of Open MPI parameter `name` for a login on the node: its
    environment first, then the user's parameter file, then the system's (Open MPI's
    order of precedence); None where nothing sets it."""
    access = facts.get("access") or {}
    variable = f"OMPI_MCA_{name}"
    env = access.get("mca_env") or {}
    if variable in env:
        return env[variable], f"{variable} in the login's environment"
    files = access.get("mca_files") or {}
    for path in sorted(files, key=lambda p: "/.openmpi/" not in p):
        for key, value, line in files[path]:
            if key == name:
                return value, f"{path}:{line}"
    return None


def allows(value: str, component: str) -> bool:
    """Whether an MCA selection value ("ob1", "^ucx,cm") lets `component` be used."""
    names = [n.strip() for n in value.lstrip("^").split(",")]
    return component not in names if value.startswith("^") else component in names


def excluded(facts: dict, carrier: str) -> str | None:
    """Where a parameter turns `carrier` ("pml:ucx") off, as "path:line (pml = ^ucx)"."""
    framework, component = carrier.split(":")
    found = mca_setting(facts, framework)
    if found is None or allows(found[0], component):
        return None
    return f"{found[1]} ({framework} = {found[0]})"


def judge(node: str, facts: dict, gpu_node: bool) -> list[Result]:
    fabric = facts.get("fabric")
    if fabric is None:
        return [passed(node, "not probed (doctor's probe predates the fabric check)")]
    devices = fabric.get("devices") or []
    mpi = fabric.get("mpi")
    mpi_text = (
        "MPI is not Open MPI (no ompi_info): not judged"
        if mpi is None
        else f"Open MPI has {', '.join(mpi) if mpi else 'no fast-fabric component (TCP only)'}"
    )
    if not devices:
        return [passed(node, f"no RDMA devices: MPI and NCCL use TCP sockets ({mpi_text})")]
    active = active_ports(fabric)
    if not active:
        return _judge_inactive_ports(node, devices)
    kinds = sorted({kind(d, p) for d, p in active})
    results = _judge_mpi_carriers(node, facts, mpi, mpi_text, kinds)
    verbs = fabric.get("verbs") or {}
    results.extend(_judge_verbs(node, verbs, kinds, gpu_node))
    results.extend(_judge_nccl_plugin(node, fabric, kinds, gpu_node))
    if not results:
        ports_text = "; ".join(describe(d, p) for d, p in active)
        nccl = "; NCCL can load verbs" if gpu_node and verbs.get("library") else ""
        results.append(passed(node, f"{ports_text}; {mpi_text}{nccl}"))
    return results


def _judge_inactive_ports(node: str, devices: list[dict]) -> list[Result]:
    """RDMA devices without an active port: why each port is down, or that there are none."""
    results: list[Result] = []
    for device in devices:
        for port in device.get("ports") or []:
            evidence, fix = why_not_active(node, device, port)
            results.append(warned(node, evidence + ": MPI and NCCL fall back to TCP sockets", fix))
    if not any(d.get("ports") for d in devices):
        names = ", ".join(d["name"] for d in devices)
        results.append(
            warned(
                node,
                f"{names} on {node} has no ports in sysfs",
                "check the driver (`dmesg | grep -i mlx`, `ibv_devinfo`)",
            )
        )
    return results


def _judge_mpi_carriers(
    node: str, facts: dict, mpi: list[str] | None, mpi_text: str, kinds: list[str]
) -> list[Result]:
    """Each active fabric kind against Open MPI's components that carry it: missing from
    the build, or built but turned off by an MCA parameter."""
    results: list[Result] = []
    for fabric_kind in kinds:
        carriers = MPI_CARRIERS.get(fabric_kind)
        if mpi is None or carriers is None:
            continue
        built = [c for c in carriers if c in mpi]
        if any(excluded(facts, c) is None for c in built):
            continue
        missing = "mtl ofi" if fabric_kind == "EFA" else "pml ucx"
        if built:
            where = excluded(facts, built[0])
            results.append(
                warned(
                    node,
                    f"{node} has an active {fabric_kind} port and its Open MPI has "
                    f"{built[0].replace(':', ' ')}, but {where} turns it off: MPI jobs run "
                    "over TCP, many times slower",
                    f"take {built[0].split(':')[1]} out of that setting on {node} (Debian's "
                    "default openmpi-mca-params.conf turns UCX off for Ethernet-only machines)",
                )
            )
            continue
        results.append(
            warned(
                node,
                f"{node} has an active {fabric_kind} port but its Open MPI has no {missing} "
                f"({mpi_text}): MPI jobs run over TCP, many times slower",
                NO_OFI_FIX if fabric_kind == "EFA" else NO_UCX_FIX,
            )
        )
    return results


def _judge_verbs(node: str, verbs: dict, kinds: list[str], gpu_node: bool) -> list[Result]:
    """An active InfiniBand or RoCE port needs libibverbs and its device's provider."""
    if not any(k in ("InfiniBand", "RoCE") for k in kinds):
        return []
    users = "NCCL and UCX" if gpu_node else "UCX (MPI)"
    if not verbs.get("library"):
        return [
            warned(
                node,
                f"{node} has no libibverbs (NCCL dlopens libibverbs.so or .so.1): "
                f"{users} cannot open the port and fall back to TCP sockets",
                f"install rdma-core's user-space libraries on {node}: "
                "`apt install libibverbs1 ibverbs-providers` (dnf: rdma-core libibverbs)",
            )
        ]
    if verbs.get("missing_providers"):
        wanted = ", ".join(verbs["missing_providers"])
        return [
            warned(
                node,
                f"{node} has libibverbs but no provider for {wanted} (lib{wanted}-rdmav*.so): "
                f"{users} see no device and fall back to TCP sockets",
                f"install the providers on {node}: `apt install ibverbs-providers` "
                "(dnf: libibverbs)",
            )
        ]
    return []


def _judge_nccl_plugin(node: str, fabric: dict, kinds: list[str], gpu_node: bool) -> list[Result]:
    """An active EFA port on a GPU node needs an NCCL net plugin."""
    if "EFA" not in kinds or not gpu_node or fabric.get("nccl_plugins"):
        return []
    return [
        warned(
            node,
            f"{node} has an active EFA port but no NCCL net plugin (libnccl-net*.so): "
            "NCCL uses TCP sockets",
            "install aws-ofi-nccl (AWS's EFA installer or the aws-ofi-nccl release) and put "
            "its lib folder in LD_LIBRARY_PATH",
        )
    ]


def check(g: Gathered) -> CheckReport:
    report = CheckReport(NAME, TITLE, not_checked=g.unprobed)
    gpu_nodes = {n.name for n in g.plan.nodes if n.gpus}
    signatures: dict[str, tuple] = {}
    for node in g.probed:
        facts = g.facts(node) or {}
        report.results.extend(judge(node, facts, node in gpu_nodes))
        if facts.get("fabric") is not None:
            signatures[node] = signature(facts["fabric"])
    with_fabric = {node: sig for node, sig in signatures.items() if sig}
    if not with_fabric:
        return report
    # the fabric most nodes that have one share; a node with less (or none) is named
    best, _ = majority(with_fabric)
    for node in [n for n, sig in signatures.items() if sig != best]:
        report.results.append(
            warned(
                node,
                f"{node} has {say(signatures[node])}; "
                f"{plural(sum(s == best for s in signatures.values()), 'other node')} have "
                f"{say(best)}: "
                "a job that spans it runs at its speed",
                f"give {node} the same fabric as the others, or leave it out of jobs "
                "that need the fast one",
            )
        )
    return report
