"""doctor's fabric check: the node-side reading of fake sysfs trees and library folders
(fabricfacts, the code the probe runs on nodes) and the check's judgement of what it read.

The trees are written as the kernel's drivers/infiniband/core/sysfs.c writes them:
"4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)", "InfiniBand" / "Ethernet".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mpicluster import remote
from mpicluster.doctor.checks import fabric as check
from mpicluster.doctor.model import Status
from tests.unit.test_doctor_checks import NODES, gathered, inventory_text

STATES = {"DOWN": 1, "INIT": 2, "ARMED": 3, "ACTIVE": 4}
PHYS = {"Polling": 2, "Disabled": 3, "LinkUp": 5}


@pytest.fixture(scope="module")
def facts():
    """fabricfacts as the probe ships it (with nodeinfo), loaded here."""
    namespace: dict = {"__name__": "fabricfacts"}
    exec(compile(remote.script("fabricfacts"), "fabricfacts.py", "exec"), namespace)  # noqa: S102
    return namespace


def add_device(root: Path, name: str, driver: str, ports: list[dict]) -> None:
    device = root / name
    (device / "ports").mkdir(parents=True)
    (device / "node_type").write_text("7: unspecified\n" if driver == "efa" else "1: CA\n")
    (device / "fw_ver").write_text("28.39.1002\n")
    pci = root.parent / "pci" / name
    (pci / "net").mkdir(parents=True)
    (root.parent / "drivers" / driver).mkdir(parents=True, exist_ok=True)
    (pci / "driver").symlink_to(root.parent / "drivers" / driver)
    (device / "device").symlink_to(pci)
    for number, port in enumerate(ports, start=1):
        folder = device / "ports" / str(number)
        folder.mkdir()
        state, phys = port.get("state", "ACTIVE"), port.get("phys", "LinkUp")
        (folder / "state").write_text(f"{STATES[state]}: {state}\n")
        (folder / "phys_state").write_text(f"{PHYS[phys]}: {phys}\n")
        (folder / "rate").write_text(port.get("rate", "200 Gb/sec (4X HDR)") + "\n")
        (folder / "link_layer").write_text(port.get("link_layer", "InfiniBand") + "\n")
        if port.get("netdev"):
            (folder / "gid_attrs" / "ndevs").mkdir(parents=True)
            (folder / "gid_attrs" / "ndevs" / "0").write_text(port["netdev"] + "\n")
            (pci / "net" / port["netdev"]).mkdir()


def libraries(root: Path, verbs: bool = True, providers: tuple[str, ...] = ("mlx5",)) -> dict:
    """A library folder as rdma-core's packages lay it out; the environment naming it."""
    lib = root / "lib"
    (lib / "libibverbs").mkdir(parents=True)
    if verbs:
        (lib / "libibverbs.so.1").write_text("")
    for provider in providers:
        (lib / "libibverbs" / f"lib{provider}-rdmav34.so").write_text("")
    return {"LD_LIBRARY_PATH": str(lib)}


def test_ports_are_read_as_the_kernel_writes_them(facts, tmp_path):
    sysfs = tmp_path / "infiniband"
    add_device(sysfs, "mlx5_0", "mlx5_core", [{}, {"state": "DOWN", "phys": "Polling"}])
    add_device(
        sysfs,
        "mlx5_1",
        "mlx5_core",
        [{"link_layer": "Ethernet", "netdev": "ens1f0", "rate": "100 Gb/sec (4X EDR)"}],
    )
    found = facts["devices"](str(sysfs))
    assert [d["name"] for d in found] == ["mlx5_0", "mlx5_1"]
    ib = found[0]
    assert (ib["node_type"], ib["driver"], ib["provider"], ib["fw_ver"]) == (
        "CA",
        "mlx5_core",
        "mlx5",
        "28.39.1002",
    )
    assert ib["ports"][0] == {
        "port": "1",
        "state": "ACTIVE",
        "phys_state": "LinkUp",
        "rate": "200 Gb/sec (4X HDR)",
        "gbps": 200.0,
        "link_layer": "InfiniBand",
        "netdev": None,
    }
    assert (ib["ports"][1]["state"], ib["ports"][1]["phys_state"]) == ("DOWN", "Polling")
    roce = found[1]["ports"][0]
    assert (roce["link_layer"], roce["netdev"], roce["gbps"]) == ("Ethernet", "ens1f0", 100.0)
    assert facts["devices"](str(tmp_path / "absent")) == []
    assert [
        facts["provider_name"](n) for n in ("efa_0", "irdma1", "bnxt_re0", "hfi1_0", "rxe0")
    ] == [
        "efa",
        "irdma",
        "bnxt_re",
        "hfi1verbs",
        "rxe",
    ]


def test_verbs_library_and_providers_are_found_where_rdma_core_puts_them(facts, tmp_path):
    env = libraries(tmp_path, providers=("mlx5",))
    found = facts["verbs"](env, ["efa", "mlx5"], system_dirs=[])
    assert found["library"] == str(tmp_path / "lib" / "libibverbs.so.1")
    assert (found["providers"], found["missing_providers"]) == (["mlx5"], ["efa"])
    bare = facts["verbs"](libraries(tmp_path / "bare", verbs=False, providers=()), ["mlx5"], [])
    assert (bare["library"], bare["missing_providers"]) == (None, ["mlx5"])


def test_mpi_components_are_read_from_ompi_info(facts, tmp_path):
    """The parsable lines as Open MPI 5.0.7's ompi_info prints them (a script that prints
    them stands in for the binary; the real one runs in the cluster tests)."""
    ompi_info = tmp_path / "ompi_info"
    lines = [
        'mca:pml:ob1:version:"mca:2.1.0"',
        'mca:pml:ucx:version:"mca:2.1.0"',
        'mca:pml:ucx:version:"component:5.0.7"',
        'mca:btl:tcp:version:"mca:3.1.0"',
        'mca:osc:ucx:version:"mca:3.0.0"',
        "ompi:version:full:5.0.7",
    ]
    ompi_info.write_text("#!/bin/sh\ncat <<'EOF'\n" + "\n".join(lines) + "\nEOF\n")
    ompi_info.chmod(0o755)
    assert facts["mpi_components"](str(tmp_path)) == ["osc:ucx", "pml:ucx"]
    assert facts["mpi_components"](str(tmp_path / "none")) is None


# --- the check's judgement ------------------------------------------------------


def port(state="ACTIVE", phys="LinkUp", layer="InfiniBand", gbps=200.0, netdev=None) -> dict:
    rate = f"{gbps:g} Gb/sec (4X HDR)"
    return {
        "port": "1",
        "state": state,
        "phys_state": phys,
        "rate": rate,
        "gbps": gbps,
        "link_layer": layer,
        "netdev": netdev,
    }


def node_fabric(*ports: dict, provider="mlx5", mpi=("pml:ucx",), library=True, missing=()):
    devices = [
        {"name": f"{provider}_{i}", "provider": provider, "driver": provider, "ports": [p]}
        for i, p in enumerate(ports)
    ]
    return {
        "devices": devices,
        "mpi": None if mpi is None else list(mpi),
        "verbs": {
            "library": "/usr/lib/x86_64-linux-gnu/libibverbs.so.1" if library else None,
            "providers": [] if missing else [provider],
            "missing_providers": list(missing),
        },
        "nccl_plugins": [],
    }


def judged(per_node: dict, text: str | None = None):
    def tweak(all_facts):
        for name in NODES:
            all_facts[name]["fabric"] = per_node.get(
                name, {"devices": [], "mpi": ["pml:ucx"], "verbs": None, "nccl_plugins": None}
            )

    report = check.check(gathered(text, tweak=tweak))
    return report, {(r.node, str(r.status)) for r in report.results if r.status != Status.PASS}


def evidence(report, node: str) -> str:
    return " | ".join(r.evidence for r in report.results if r.node == node)


def fixes(report, node: str) -> str:
    return " | ".join(r.fix or "" for r in report.results if r.node == node)


def test_no_device_anywhere_passes_and_says_tcp():
    report, bad = judged({})
    assert bad == set()
    assert "no RDMA devices: MPI and NCCL use TCP sockets (Open MPI has pml:ucx)" in evidence(
        report, "node1"
    )


def test_infiniband_everywhere_with_ucx_and_verbs_passes():
    ib = node_fabric(port())
    report, bad = judged({n: ib for n in NODES})
    assert bad == set()
    assert "mlx5_0 port 1 InfiniBand, 200 Gb/sec (4X HDR), ACTIVE" in evidence(report, "node2")


def test_active_infiniband_with_an_open_mpi_without_ucx_warns_mpi_runs_over_tcp():
    report, bad = judged(
        {
            "node1": node_fabric(port(), mpi=()),
            "node2": node_fabric(port()),
            "node3": node_fabric(port()),
        }
    )
    assert bad == {("node1", "warn")}
    assert "active InfiniBand port but its Open MPI has no pml ucx" in evidence(report, "node1")
    assert "MPI jobs run over TCP" in evidence(report, "node1")
    assert "stack.ucx.enabled: true" in fixes(report, "node1")


def test_a_parameter_file_that_turns_ucx_off_is_named_with_its_line():
    """Debian's openmpi-mca-params.conf says `pml = ^ucx`: the component is built (ompi_info
    lists it) but never selected, and MPI runs over TCP on an InfiniBand cluster."""
    ib = node_fabric(port())

    def tweak(all_facts):
        for name in NODES:
            all_facts[name]["fabric"] = ib
            all_facts[name]["access"] = {}
        all_facts["node1"]["access"]["mca_files"] = {
            "/etc/openmpi/openmpi-mca-params.conf": [
                ["btl", "^uct,openib,ofi", 3],
                ["pml", "^ucx", 4],
            ]
        }
        # a login's environment wins over every file
        all_facts["node2"]["access"]["mca_files"] = {
            "/etc/openmpi/openmpi-mca-params.conf": [["pml", "^ucx", 4]]
        }
        all_facts["node2"]["access"]["mca_env"] = {"OMPI_MCA_pml": "ucx"}
        all_facts["node3"]["access"]["mca_env"] = {"OMPI_MCA_pml": "ob1"}

    report = check.check(gathered(tweak=tweak))
    bad = {(r.node, str(r.status)) for r in report.results if r.status != Status.PASS}
    assert bad == {("node1", "warn"), ("node3", "warn")}
    assert (
        "has pml ucx, but /etc/openmpi/openmpi-mca-params.conf:4 (pml = ^ucx) turns it off"
        in evidence(report, "node1")
    )
    assert "OMPI_MCA_pml in the login's environment (pml = ob1)" in evidence(report, "node3")
    assert "take ucx out of that setting" in fixes(report, "node1")
    assert check.allows("^ucx,cm", "ob1") and not check.allows("ob1", "ucx")


def test_roce_without_libibverbs_names_nccl_on_gpu_nodes():
    text = inventory_text().replace("slots: 1}", "slots: 1, gpus: 8}")
    roce = port(layer="Ethernet", gbps=100.0, netdev="ens1f0")
    report, bad = judged(
        {
            "node1": node_fabric(roce, library=False),
            "node2": node_fabric(roce, missing=("mlx5",)),
            "node3": node_fabric(roce),
        },
        text,
    )
    assert bad == {("node1", "warn"), ("node2", "warn")}
    assert "no libibverbs" in evidence(report, "node1")
    assert "NCCL and UCX cannot open the port" in evidence(report, "node1")
    assert "apt install libibverbs1 ibverbs-providers" in fixes(report, "node1")
    assert "no provider for mlx5" in evidence(report, "node2")
    assert "RoCE over ens1f0" in evidence(report, "node3")
    assert "NCCL can load verbs" in evidence(report, "node3")


def test_a_down_port_and_a_port_without_subnet_manager_say_what_to_do():
    report, bad = judged(
        {
            "node1": node_fabric(port(state="DOWN", phys="Polling")),
            "node2": node_fabric(port(state="INIT", phys="LinkUp")),
            "node3": node_fabric(port()),
        }
    )
    # each is named twice: its port, and it lacks the fabric node3 has
    assert bad == {("node1", "warn"), ("node2", "warn")}
    assert "mlx5_0 port 1 on node1 is DOWN (physical state Polling): no link" in evidence(
        report, "node1"
    )
    assert "check the cable" in fixes(report, "node1")
    assert "no subnet manager has activated the port" in evidence(report, "node2")
    assert "opensm" in fixes(report, "node2")


def test_one_node_without_the_fabric_the_others_have_is_named():
    ib = node_fabric(port())
    report, bad = judged({"node1": ib, "node2": ib})
    assert bad == {("node3", "warn")}
    assert "node3 has no active RDMA port; 2 other nodes have InfiniBand 200 Gb/sec" in evidence(
        report, "node3"
    )
    slower = node_fabric(port(gbps=100.0))
    report, bad = judged({"node1": ib, "node2": ib, "node3": slower})
    assert bad == {("node3", "warn")}
    assert "InfiniBand 100 Gb/sec" in evidence(report, "node3")


def test_efa_needs_mtl_ofi_and_an_nccl_plugin_on_gpu_nodes():
    text = inventory_text().replace("slots: 1}", "slots: 1, gpus: 8}")
    efa = node_fabric(port(layer="Unknown", gbps=100.0), provider="efa", mpi=("pml:ucx",))
    report, bad = judged({n: efa for n in NODES}, text)
    assert bad == {(n, "warn") for n in NODES}
    assert "active EFA port but its Open MPI has no mtl ofi" in evidence(report, "node1")
    assert "no NCCL net plugin" in evidence(report, "node1")
    assert "aws-ofi-nccl" in fixes(report, "node1")


def test_down_port_on_roce_names_its_interface():
    roce_down = port(state="DOWN", phys="Disabled", layer="Ethernet", netdev="ens2")
    report, _ = judged({n: node_fabric(roce_down) for n in NODES})
    assert "is DOWN (physical state Disabled)" in evidence(report, "node1")
    assert "ibportstate" in fixes(report, "node1")
    polling = port(state="DOWN", phys="Polling", layer="Ethernet", netdev="ens2")
    report, _ = judged({n: node_fabric(polling) for n in NODES})
    assert "ens2 has no link" in evidence(report, "node1")
    assert "ip link set ens2 up" in fixes(report, "node1")


def test_up_gives_rdma_core_to_the_nodes_that_have_an_rdma_device():
    from mpicluster.up.provision import rdma_host_vars
    from tests.unit.plans import plan_of

    inv = plan_of("cluster: t\nnodes:\n  - {name: a}\n  - {name: b}\n  - {name: c}\n")
    facts = {"a": {"rdma": ["mlx5_0", "mlx5_1"]}, "b": {"rdma": []}, "c": {}}
    stack_vars = {"a": {"mpicluster_stack_fingerprint": "f1"}, "b": {"x": 1}}
    merged = rdma_host_vars(inv, facts, stack_vars)
    assert merged == {
        "a": {"mpicluster_stack_fingerprint": "f1", "base_rdma": True},
        "b": {"x": 1},
    }
    assert "base_rdma" not in stack_vars["a"]  # the stack's own host vars are left as they were


def test_up_loads_nvidia_peermem_on_gpu_nodes_with_rdma_where_dmabuf_cannot_do_it():
    from mpicluster.up.provision import peermem_wanted, rdma_host_vars
    from tests.unit.plans import plan_of

    inv = plan_of(
        "cluster: t\nnodes:\n  - {name: g1, gpus: 8}\n  - {name: g2, gpus: 8}\n  - {name: cpu}\n"
    )
    old_kernel = {"peermem_available": True, "open_kernel_module": False, "dmabuf_kernel": False}
    dmabuf = {"peermem_available": True, "open_kernel_module": True, "dmabuf_kernel": True}
    assert peermem_wanted({"gpudirect": old_kernel})
    assert not peermem_wanted({"gpudirect": dmabuf})  # NCCL registers through dma-buf
    assert not peermem_wanted({"gpudirect": old_kernel | {"peermem_available": False}})
    # loaded already (by the last up): the same answer, so the next up changes nothing
    assert peermem_wanted({"gpudirect": old_kernel | {"peermem_loaded": "nvidia_peermem"}})
    facts = {
        "g1": {"rdma": ["mlx5_0"], "gpudirect": old_kernel},
        "g2": {"rdma": [], "gpudirect": old_kernel},  # no RDMA card: nothing to go direct to
        "cpu": {"rdma": ["mlx5_0"], "gpudirect": old_kernel},  # no GPUs
    }
    assert rdma_host_vars(inv, facts, {}) == {
        "g1": {"base_rdma": True, "base_peermem": True},
        "cpu": {"base_rdma": True},
    }
    built_elsewhere = plan_of(
        "cluster: t\nnodes:\n  - {name: g1, gpus: 8}\n"
        "stack: {gpus_present: false, nccl: {cuda_archs: ['9.0']}}\n"
    )
    assert rdma_host_vars(built_elsewhere, facts, {}) == {"g1": {"base_rdma": True}}
