"""The checks' judgement, from hand-written node facts (pure logic: no nodes needed).

The facts have the shape the probe (mpicluster/doctor/programs/probe.py) prints;
tests/unit/test_doctor_probe.py runs the real probe, tests/cluster/test_doctor.py the
whole thing against real nodes.
"""

from __future__ import annotations

import copy
import json

from mpicluster.cluster import hostfiles as hostfile
from mpicluster.cluster.inventory import parse_inventory
from mpicluster.cluster.layout import BLOCK_BEGIN, BLOCK_END
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.doctor.checks import (
    basics,
    consistency,
    disk,
    environment,
    gpus,
    mesh,
    names,
    network,
    ssh_access,
)
from mpicluster.doctor.model import Status
from mpicluster.doctor.runner import Clock, Gathered, Options
from mpicluster.doctor.session import NodeSession

NODES = ["node1", "node2", "node3"]
BLOCK = (
    f"{BLOCK_BEGIN}\n"
    'PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"\n'
    'OMPI_MCA_btl_tcp_if_include="10.9.0.0/24"\n'
    'OMPI_MCA_oob_tcp_if_include="10.9.0.0/24"\n'
    'PRTE_MCA_oob_tcp_if_include="10.9.0.0/24"\n'
    'PRTE_MCA_odls_base_max_threads="0"\n'
    f"{BLOCK_END}\n"
)
OPENMPI = "mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/"
MPICH = "HYDRA build details:\n    Version:                                 4.0.2\n"


def inventory_text(extra: str = "", network: str = "network: {cidr: 10.9.0.0/24}\n") -> str:
    nodes = "".join(
        f"  - {{name: {n}, address: 10.9.0.{11 + i}, slots: 1}}\n" for i, n in enumerate(NODES)
    )
    return f"cluster: t\n{network}nodes:\n{nodes}stack: {{install: packages}}\n{extra}"


def node_facts(name: str, index: int) -> dict:
    slots = {n: 1 for n in NODES}
    cluster_json = {
        "cluster": "t",
        "nodes": [{"name": n, "ip": f"10.9.0.{11 + i}"} for i, n in enumerate(NODES)],
    }
    return {
        "kind": "facts",
        "hostname": name,
        "nproc": 2,
        "port": 40000 + index,
        "env": {
            "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "LD_LIBRARY_PATH": None,
            "OMPI_MCA_btl_tcp_if_include": "10.9.0.0/24",
            "OMPI_MCA_oob_tcp_if_include": "10.9.0.0/24",
            "PRTE_MCA_oob_tcp_if_include": "10.9.0.0/24",
            "PRTE_MCA_odls_base_max_threads": "0",
        },
        "which": {
            "mpirun": {"path": "/usr/bin/mpirun", "real": "/usr/bin/orterun"},
            "mpicc": {"path": "/usr/bin/mpicc", "real": "/usr/bin/opal_wrapper"},
        },
        "environment_file": BLOCK,
        "resolve": {n: {"addresses": [f"10.9.0.{11 + i}"]} for i, n in enumerate(NODES)},
        "interfaces": {
            "eth0": {"state": "up", "bridge": False, "addresses": [f"10.9.0.{11 + index}/24"]},
            "lo": {"state": "unknown", "bridge": False, "addresses": ["127.0.0.1/8"]},
        },
        "neighbour": {"gc_thresh1": 128, "gc_thresh2": 512, "gc_thresh3": 1024},
        "disk": {
            "install": {
                "path": "/opt/mpicluster",
                "measured": "/opt",
                "free": 50 << 30,
                "total": 100 << 30,
            },
            "tmp": {"path": "/tmp", "measured": "/tmp", "free": 50 << 30, "total": 100 << 30},
            "shm": {
                "path": "/dev/shm",
                "measured": "/dev/shm",
                "free": 512 << 20,
                "total": 512 << 20,
            },
        },
        "files": {
            "/etc/mpicluster/hostfile": hostfile.render(slots, "openmpi"),
            "/etc/mpicluster/hostfile.mpich": hostfile.render(slots, "mpich"),
            "/etc/mpicluster/horovod.hosts": hostfile.render(slots, "horovod"),
            "/etc/mpicluster/hostfile.deepspeed": hostfile.render(slots, "deepspeed"),
            "/etc/mpicluster/cluster.json": json.dumps(cluster_json),
        },
        "ssh": {
            "key": True,
            "config_block": True,
            "known_hosts_block": True,
            "authorized": True,
            "authorized_from": ["10.9.0.11", "10.9.0.12", "10.9.0.13"],
        },
        "versions": {
            "mpi": {
                "path": "/usr/bin/mpirun",
                "real": "/usr/bin/orterun",
                "sha256": "d4ce4ad5941a28a8",
                "exit_code": 0,
                "version_text": OPENMPI,
            },
            "fingerprint": None,
            "python": "3.11.2",
            "mpi4py": "3.1.4",
            "horovod": None,
            "torch": None,
            "nccl": None,
            "cuda": None,
        },
        "gpus": None,
    }


def gathered(text: str | None = None, tweak=None, **fields) -> Gathered:
    inv = parse_inventory(text or inventory_text())
    sessions = {}
    for index, node in enumerate(inv.nodes):
        session = NodeSession(node, inv.node_ssh(node))
        session.facts = node_facts(node.name, index)
        sessions[node.name] = session
    if tweak:
        tweak({name: s.facts for name, s in sessions.items()})
    options = Options(checks=("mesh", "ports"), timeout=10)
    return Gathered(ClusterPlan.of(inv), options, sessions, **fields)


def bad(report) -> set[tuple[str | None, str | None, str]]:
    return {(r.node, r.peer, str(r.status)) for r in report.results if r.status != Status.PASS}


def test_a_healthy_cluster_passes_every_node_check():
    g = gathered()
    for run in (
        environment.check,
        names.check,
        network.check_interfaces,
        consistency.check,
        gpus.check,
        disk.check_disk,
        basics.check_hostfile,
    ):
        report = run(g)
        assert report.status == Status.PASS, [r.evidence for r in report.results]
        assert report.not_checked == []


def test_env_names_the_node_whose_block_path_is_broken():
    def tweak(facts):
        facts["node2"]["environment_file"] = BLOCK.replace(
            'PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"',
            'PATH="/nonexistent"',
        )
        facts["node2"]["env"]["PATH"] = "/nonexistent"

    report = environment.check(gathered(tweak=tweak))
    assert bad(report) == {("node2", None, "fail")}
    result = next(r for r in report.results if r.status == Status.FAIL)
    assert "'/nonexistent'" in result.evidence and "/usr/bin" in result.evidence
    assert "/etc/environment" in result.fix and "mpicluster up" in result.fix


def test_env_block_must_be_literal_and_not_overridden():
    text = BLOCK.replace('PATH="', 'PATH="$HOME/bin:') + 'PATH="/usr/bin:/bin"\n'
    state, values, problems = environment.parse_block(text)
    assert state == "ok" and values["PATH"].startswith("$HOME")
    assert any("not literal" in p for p in problems)
    assert any("after the block" in p for p in problems)
    assert environment.parse_block(None)[0] == "missing-file"
    assert environment.parse_block("LANG=C\n")[0] == "missing"
    assert environment.parse_block(f"{BLOCK_END}\n{BLOCK_BEGIN}\n")[0] == "broken"


def test_env_on_a_node_up_never_touched_says_run_up():
    def tweak(facts):
        facts["node1"]["environment_file"] = None
        facts["node1"]["which"]["mpirun"] = {"path": None, "real": None}

    results = environment.check(gathered(tweak=tweak)).results
    failures = [r for r in results if r.status == Status.FAIL]
    assert {r.node for r in failures} == {"node1"}
    assert len(failures) == 2 and all("mpicluster up" in r.fix for r in failures)
    assert any("which mpirun" in r.evidence for r in failures)


def test_names_catches_the_loopback_hostname_and_wrong_addresses():
    def tweak(facts):
        facts["node2"]["resolve"]["node2"] = {"addresses": ["127.0.1.1", "10.9.0.12"]}
        facts["node3"]["resolve"]["node1"] = {"addresses": ["10.9.9.9"]}
        facts["node1"]["resolve"]["node3"] = {"error": "[Errno -2] Name or service not known"}

    report = names.check(gathered(tweak=tweak))
    assert bad(report) == {
        ("node2", None, "fail"),
        ("node3", "node1", "fail"),
        ("node1", "node3", "fail"),
    }
    loop = next(r for r in report.results if r.node == "node2")
    assert "127.0.1.1" in loop.evidence and "`127.0.1.1 node2`" in loop.fix


def test_versions_names_the_node_with_another_mpi():
    def tweak(facts):
        facts["node2"]["versions"]["mpi"] = {
            "path": "/usr/bin/mpirun",
            "real": "/usr/bin/mpiexec.hydra",
            "sha256": "5ce66ed6f1142c80",
            "exit_code": 0,
            "version_text": MPICH,
        }

    report = consistency.check(gathered(tweak=tweak))
    assert bad(report) == {("node2", None, "fail")}
    result = next(r for r in report.results if r.node == "node2")
    assert "MPICH 4.0.2" in result.evidence and "Open MPI 4.1.4" in result.evidence
    assert "update-alternatives" in result.fix


def test_versions_source_install_without_a_build():
    text = inventory_text().replace("stack: {install: packages}\n", "")
    report = consistency.check(gathered(text))
    assert {r.node for r in report.results if r.status == Status.FAIL} == set(NODES)
    assert all("FINGERPRINT.json" in r.evidence for r in report.results)


def test_versions_names_the_node_whose_mpi_is_not_cuda_aware():
    text = inventory_text().replace("stack: {install: packages}\n", "")

    def tweak(facts):
        for name in NODES:
            facts[name]["versions"]["fingerprint"] = "f" * 16
            facts[name]["versions"]["cuda_aware"] = "no" if name == "node3" else "yes"

    report = consistency.check(gathered(text, tweak=tweak))
    assert bad(report) == {("node3", None, "fail")}
    node3 = next(r for r in report.results if r.node == "node3")
    assert "CUDA-aware MPI no (the other 2 node(s): yes)" in node3.evidence
    node1 = next(r for r in report.results if r.node == "node1")
    assert "CUDA-aware MPI yes" in node1.evidence


def test_versions_takes_one_build_per_release_and_the_same_mpi_everywhere():
    """A mixed cluster (node1 Debian 12, the others 13): each release has its own build
    and Python, which is fine while the MPI and mpi4py agree; a 13 node with another
    build than the other 13 node, or another mpi4py, is named against its own kind."""
    text = inventory_text().replace("stack: {install: packages}\n", "")

    def mixed(facts, odd_build=False):
        for name in NODES:
            bookworm = name == "node1"
            facts[name]["os"] = {"id": "debian", "version_id": "12" if bookworm else "13"}
            facts[name]["versions"]["fingerprint"] = ("a" if bookworm else "b") * 16
            facts[name]["versions"]["python"] = "3.11.2" if bookworm else "3.13.5"
            facts[name]["versions"]["mpi4py"] = "4.1.2"
            # PyTorch's CPU build for Python 3.11; PyPI's CUDA build (and its NCCL) for 3.13
            facts[name]["versions"]["torch"] = "2.13.0+cpu" if bookworm else "2.13.0"
            if not bookworm:
                facts[name]["versions"]["torch_nccl"] = {"loads": "wheel", "version": "2.29.7"}
        if odd_build:
            facts["node3"]["versions"]["fingerprint"] = "c" * 16

    report = consistency.check(gathered(text, tweak=mixed))
    assert bad(report) == set(), [r.evidence for r in report.results]
    node1 = next(r for r in report.results if r.node == "node1")
    assert "its debian-12 build, Python and PyTorch wheel" in node1.evidence
    assert "mixes 2 releases" in node1.evidence and "PyTorch 2.13.0+cpu" in node1.evidence

    def odd_one_out(node: str, component: str, version: str) -> str:
        """The evidence against `node` when only its `component` differs."""

        def tweak(facts):
            mixed(facts)
            facts[node]["versions"][component] = version

        report = consistency.check(gathered(text, tweak=tweak))
        assert bad(report) == {(node, None, "fail")}
        return next(r for r in report.results if r.node == node).evidence

    evidence = odd_one_out("node3", "torch", "2.12.0")
    assert "PyTorch 2.12.0 (the other 2 node(s): 2.13.0)" in evidence, evidence
    report = consistency.check(gathered(text, tweak=lambda f: mixed(f, odd_build=True)))
    assert bad(report) == {("node3", None, "fail")}  # a tie: node2, first, is the reference
    node3 = next(r for r in report.results if r.node == "node3")
    wanted = f"build fingerprint {'c' * 16} (the other 1 node(s) of debian-13: fingerprint "
    assert wanted in node3.evidence, node3.evidence

    evidence = odd_one_out("node1", "mpi4py", "3.1.4")
    assert "mpi4py 3.1.4 (the other 2 node(s): 4.1.2)" in evidence, evidence


def test_versions_says_which_nccl_pytorch_loads_and_finds_a_lost_link():
    text = inventory_text().replace("stack: {install: packages}\n", "")
    lib = "/opt/mpicluster/current/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2"

    def tweak(facts):
        for name in NODES:
            facts[name]["versions"]["fingerprint"] = "f" * 16
            facts[name]["versions"]["torch_nccl"] = {
                "loads": "wheel" if name == "node2" else "stack",
                "version": "2.29.7",
                "path": lib,
                "expected": None,  # as recorded by a build before this was recorded
            }

    report = consistency.check(gathered(text, tweak=tweak))
    node2 = next(r for r in report.results if r.node == "node2")
    assert "PyTorch's NCCL wheel 2.29.7 (the other 2 node(s): stack 2.29.7)" in node2.evidence
    node1 = next(r for r in report.results if r.node == "node1")
    assert node1.status == Status.PASS and "PyTorch's NCCL stack 2.29.7" in node1.evidence

    def all_lost(facts):
        tweak(facts)
        for name in NODES:
            facts[name]["versions"]["torch_nccl"]["loads"] = "wheel"
            facts[name]["versions"]["torch_nccl"]["expected"] = "stack"

    report = consistency.check(gathered(text, tweak=all_lost))
    assert bad(report) == {(n, None, "fail") for n in NODES}
    result = report.results[0]
    assert "PyTorch loads its wheel's NCCL 2.29.7" in result.evidence
    assert result.fix.startswith(f"on node1: ln -sf /opt/mpicluster/stacks/{'f' * 16}/lib/")


def test_mpi_names():
    assert consistency.mpi_name({"version_text": OPENMPI}) == "Open MPI 4.1.4"
    assert consistency.mpi_name({"version_text": MPICH}) == "MPICH 4.0.2 (Hydra)"
    assert consistency.mpi_name({"version_text": "", "exit_code": 127}).startswith("unknown")
    assert consistency.mpi_name(None) is None


def test_interfaces_warn_on_bridges_only_when_mpi_is_not_restricted():
    def tweak(facts):
        facts["node3"]["interfaces"]["docker0"] = {
            "state": "down",
            "bridge": True,
            "addresses": ["172.17.0.1/16"],
        }

    restricted = network.check_interfaces(gathered(tweak=tweak))
    assert restricted.status == Status.PASS
    assert "docker0" in next(r.evidence for r in restricted.results if r.node == "node3")
    loose = network.check_interfaces(gathered(inventory_text(network=""), tweak=tweak))
    assert bad(loose) == {("node3", None, "warn")}
    missing = network.check_interfaces(
        gathered(inventory_text(network="network: {interface: ib0}\n"))
    )
    assert {r.node for r in missing.results if r.status == Status.FAIL} == set(NODES)


def test_interfaces_judge_the_arp_table_against_the_cluster_size():
    # 3 nodes need about 3 + NEIGHBOUR_SPARE = 35 entries on each node
    def tweak(facts):
        facts["node1"]["neighbour"] = {"gc_thresh1": 4, "gc_thresh2": 8, "gc_thresh3": 16}
        facts["node2"]["neighbour"] = {"gc_thresh1": 16, "gc_thresh2": 32, "gc_thresh3": 64}
        facts["node3"]["neighbour"] = None  # hidden (a container): not judged

    report = network.check_interfaces(gathered(tweak=tweak))
    assert bad(report) == {("node1", None, "fail"), ("node2", None, "warn")}
    node1 = next(r for r in report.results if r.node == "node1")
    assert "at most 16 entries (gc_thresh3)" in node1.evidence
    assert "gc_thresh3=140" in node1.fix and "/etc/sysctl.d/" in node1.fix
    node2 = next(r for r in report.results if r.node == "node2")
    assert "gc_thresh1=35 " in node2.fix and "gc_thresh2=70 " in node2.fix


def test_disk_thresholds():
    def tweak(facts):
        facts["node1"]["disk"]["tmp"]["free"] = 10 << 20
        facts["node2"]["disk"]["shm"]["free"] = 20 << 20

    report = disk.check_disk(gathered(tweak=tweak))
    assert bad(report) == {("node1", None, "fail"), ("node2", None, "warn")}


def test_disk_a_tmp_the_mpi_user_cannot_write():
    def tweak(facts):
        facts["node2"]["env"]["USER"] = "vagrant"
        facts["node2"]["disk"]["tmp"].update(writable=False, mode="0755", owner="root")
        facts["node3"]["disk"]["tmp"].update(writable=True, mode="1777", owner="root")

    report = disk.check_disk(gathered(tweak=tweak))
    (result,) = [r for r in report.results if r.status != Status.PASS]
    assert result.node == "node2"
    assert result.evidence == "/tmp is not writable by vagrant (mode 0755, owner root)"
    assert result.fix.startswith("chmod 1777 /tmp on node2: Open MPI keeps its session")


def test_hostfile_missing_or_stale():
    def tweak(facts):
        facts["node1"]["files"]["/etc/mpicluster/hostfile"] = None
        facts["node3"]["files"]["/etc/mpicluster/hostfile.mpich"] = "node1:1\nnode2:1\n"

    report = basics.check_hostfile(gathered(tweak=tweak))
    assert bad(report) == {("node1", None, "fail"), ("node3", None, "fail")}
    assert all("mpicluster up" in r.fix for r in report.results if r.fix)


def test_gpus():
    text = inventory_text().replace("slots: 1}", "slots: 1, gpus: 2}")

    def tweak(facts):
        for i, name in enumerate(NODES):
            facts[name]["gpus"] = {
                "ok": True,
                "count": 2,
                "names": ["NVIDIA H100"],
                "driver": "550.54" if i != 2 else "535.1",
                "cuda": "12.4",
            }
        facts["node1"]["gpus"]["count"] = 1

    report = gpus.check(gathered(text, tweak=tweak))
    assert bad(report) == {("node1", None, "fail"), ("node3", None, "fail")}
    assert "the inventory says 2" in next(r.evidence for r in report.results if r.node == "node1")
    assert "535.1" in next(r.evidence for r in report.results if r.node == "node3")
    assert gpus.check(gathered()).results[0].node is None  # no GPUs: one cluster-wide line
    # a build for CUDA nodes without GPUs: nvidia-smi is not judged
    absent = text.replace(
        "stack: {install: packages}",
        "stack: {install: packages, gpus_present: false, nccl: {cuda_archs: ['9.0']}}",
    )
    (result,) = gpus.check(gathered(absent)).results
    assert result.node is None and result.status == Status.PASS
    assert "gpus_present is false" in result.evidence


def test_clock_skew_against_the_median():
    clocks = {
        "node1": Clock(0.01, 0.001),
        "node2": Clock(5.0, 0.001),
        "node3": Clock(-0.01, 0.001),
    }
    report = basics.check_clock(gathered(clocks=clocks))
    assert bad(report) == {("node2", None, "warn")}
    clocks["node2"] = Clock(100.0, 0.001)
    assert bad(basics.check_clock(gathered(clocks=clocks))) == {("node2", None, "fail")}


def _pairs(fail_into=None, fail_out=None, rc=255, stderr="Permission denied (publickey)."):
    result = {}
    for s in NODES:
        for t in NODES:
            if s != t:
                broken = t == fail_into or s == fail_out
                result[(s, t)] = {
                    "peer": t,
                    "rc": rc if broken else 0,
                    "stderr": stderr if broken else "",
                }
    return result


def test_mesh_blames_the_node_that_refuses_the_cluster_key():
    def tweak(facts):
        facts["node2"]["ssh"]["authorized"] = False

    report = mesh.check(gathered(tweak=tweak, ssh_pairs=_pairs(fail_into="node2")))
    assert bad(report) == {("node2", None, "fail")}
    result = next(r for r in report.results if r.status == Status.FAIL)
    assert "into node2" in result.evidence and "Permission denied" in result.evidence
    assert "authorized_keys" in result.fix and "mpicluster:t" in result.fix


def test_mesh_on_a_cluster_without_the_cluster_key():
    def tweak(facts):
        for f in facts.values():
            f["ssh"] = {
                "key": False,
                "config_block": False,
                "known_hosts_block": False,
                "authorized": False,
                "authorized_from": None,
            }

    everything = _pairs(fail_into="node1", fail_out="node1")
    for key in everything:
        everything[key] = {"peer": key[1], "rc": 255, "stderr": "Host key verification failed."}
    report = mesh.check(gathered(tweak=tweak, ssh_pairs=everything))
    assert {r.node for r in report.results if r.status == Status.FAIL} == set(NODES)
    assert all("mpicluster up" in r.fix for r in report.results)


def test_ports_blame_a_node_that_drops_everything():
    tcp = {}
    for s in NODES:
        for t in NODES:
            if s != t:
                ok = "node2" not in (s, t)
                tcp[(s, t)] = {"peer": t, "ok": ok, "error": None if ok else "timed out"}
    report = network.check_ports(gathered(tcp_pairs=tcp))
    assert bad(report) == {("node2", None, "fail")}
    result = next(r for r in report.results if r.status == Status.FAIL)
    assert "10.9.0.12:40001" in result.evidence and "iptables" in result.fix


def test_ssh_check_shows_a_changed_host_key_with_a_fix():
    g = gathered()
    session = g.sessions["node2"]
    session.facts = None
    session.error = "host key for 10.9.0.12 CHANGED: known SHA256:aaa, offered SHA256:bbb; ..."
    for name in ("node1", "node3"):
        g.sessions[name].client = object()  # connected (judge only looks at the flag)
    report = ssh_access.check(g)
    assert bad(report) == {("node2", None, "fail")}
    result = next(r for r in report.results if r.node == "node2")
    assert "SHA256:aaa" in result.evidence and "SHA256:bbb" in result.evidence
    assert "ssh-keygen -R 10.9.0.12" in result.fix
    assert environment.check(g).not_checked == ["node2"]


def test_facts_of_one_node_do_not_leak_into_another():
    g = gathered()
    before = copy.deepcopy(g.facts("node1"))
    environment.check(g)
    names.check(g)
    assert g.facts("node1") == before


def test_only_lone_network_failures_get_a_second_try():
    from mpicluster.doctor.runner import network_failure, retry_plan

    pairs = _pairs()
    pairs[("node1", "node3")] = {
        "peer": "node3",
        "rc": 255,
        "stderr": "ssh: connect to host 10.9.0.13 port 22: Connection timed out",
    }
    pairs[("node3", "node1")] = {"peer": "node1", "rc": 255, "stderr": "Permission denied."}
    tcp = {("node2", "node3"): {"peer": "node3", "ok": False, "error": "timed out"}}
    tcp[("node3", "node2")] = {"peer": "node2", "ok": True, "error": None}
    tcp[("node1", "node3")] = {"peer": "node3", "ok": True, "error": None}
    g = gathered(ssh_pairs=pairs, tcp_pairs=tcp)
    assert retry_plan(g) == {"node1": (["node3"], set()), "node2": ([], {"node3"})}
    timeouts = _pairs(fail_into="node2", stderr="port 22: Connection timed out")
    assert retry_plan(gathered(ssh_pairs=timeouts)) == {}  # a pattern: blamed, not retried
    assert network_failure({"rc": None, "stderr": ""})
    assert not network_failure({"rc": 255, "stderr": "Host key verification failed."})


def test_a_pair_that_works_on_the_second_try_passes_with_a_note():
    pairs = _pairs()
    pairs[("node1", "node3")] = {**pairs[("node1", "node3")], "attempts": 2}
    report = mesh.check(gathered(ssh_pairs=pairs))
    assert report.status == Status.PASS
    assert "node3 on a second try" in next(r.evidence for r in report.results if r.node == "node1")


def access(facts: dict) -> dict:
    return facts.setdefault("access", {})


def test_env_traces_an_override_to_the_startup_line_that_sets_it():
    def tweak(facts):
        env = facts["node2"]["env"]
        env["OMPI_MCA_btl_tcp_if_include"] = "eth9"
        env["PATH"] = "/usr/local/bin"
        access(facts["node2"])["setters"] = {
            "OMPI_MCA_btl_tcp_if_include": [
                "/home/u/.bashrc:1: export OMPI_MCA_btl_tcp_if_include=eth9"
            ],
            "PATH": [
                "/etc/profile:5: PATH=/usr/bin",  # login shells only: not the cause
                "/home/u/.bashrc:2: export PATH=/usr/local/bin",
            ],
        }

    report = environment.check(gathered(tweak=tweak))
    found = [r for r in report.results if r.status != Status.PASS]
    assert {r.node for r in found} == {"node2"}
    fixes = " ".join(r.fix for r in found)
    assert "/home/u/.bashrc:1" in fixes and "/home/u/.bashrc:2" in fixes
    assert "/etc/profile" not in fixes


def test_env_mca_settings_from_elsewhere_differ_between_nodes():
    def tweak(facts):
        access(facts["node3"])["mca_env"] = {"OMPI_MCA_btl": "self,vader"}
        access(facts["node3"])["setters"] = {
            "OMPI_MCA_btl": ["/etc/bash.bashrc:9: export OMPI_MCA_btl=self,vader"]
        }

    report = environment.check(gathered(tweak=tweak))
    assert bad(report) == {("node3", None, "fail")}
    (result,) = [r for r in report.results if r.status != Status.PASS]
    assert "/etc/bash.bashrc:9" in result.evidence and "node1, node2 do not" in result.evidence

    def everywhere(facts):
        for name in NODES:
            access(facts[name])["mca_env"] = {"OMPI_MCA_btl": "self,vader,tcp"}

    assert {s for _, _, s in bad(environment.check(gathered(tweak=everywhere)))} == {"warn"}


def test_names_trace_a_stale_hosts_line_and_an_nsswitch_without_files():
    def tweak(facts):
        facts["node1"]["resolve"]["node2"] = {"addresses": ["10.9.0.99"]}
        access(facts["node1"])["resolver"] = {
            "nsswitch_hosts": "hosts: files dns",
            "hosts_lines": {"node2": [[1, "10.9.0.99 node2"], [7, "10.9.0.12 node2"]]},
        }
        facts["node3"]["resolve"]["node1"] = {"error": "Name or service not known"}
        access(facts["node3"])["resolver"] = {
            "nsswitch_hosts": "hosts: dns",
            "hosts_lines": {"node1": [[5, "10.9.0.11 node1"]]},
        }

    report = names.check(gathered(tweak=tweak))
    assert bad(report) == {("node1", "node2", "fail"), ("node3", "node1", "fail")}
    by_node = {r.node: r for r in report.results if r.status != Status.PASS}
    assert "`10.9.0.99 node2` (/etc/hosts:1 on node1)" in by_node["node1"].fix
    assert "nsswitch.conf" in by_node["node3"].fix and "files" in by_node["node3"].fix


def test_versions_names_the_parameter_file_line_one_node_adds():
    def tweak(facts):
        base = [["btl", "^openib", 68]]
        for name in NODES:
            access(facts[name])["mca_files"] = {"/etc/openmpi/openmpi-mca-params.conf": base}
        access(facts["node2"])["mca_files"] = {
            "/etc/openmpi/openmpi-mca-params.conf": [*base, ["btl", "self,vader", 71]]
        }

    report = consistency.check(gathered(tweak=tweak))
    assert bad(report) == {("node2", None, "fail")}
    (result,) = [r for r in report.results if r.status != Status.PASS]
    assert "/etc/openmpi/openmpi-mca-params.conf:71" in result.fix
    assert "`btl = self,vader`" in result.fix


def test_interfaces_warn_on_the_node_whose_mtu_differs():
    def tweak(facts):
        for name in NODES:
            facts[name]["interfaces"]["eth0"]["mtu"] = 1500
        facts["node2"]["interfaces"]["eth0"]["mtu"] = 9000

    report = network.check_interfaces(gathered(tweak=tweak))
    assert bad(report) == {("node2", None, "warn")}
    (result,) = [r for r in report.results if r.status != Status.PASS]
    assert "MTU 9000" in result.evidence and "mtu 1500" in result.fix


def test_disk_a_tmpdir_that_does_not_exist_names_who_sets_it():
    facts = node_facts("node1", 0)
    facts["disk"]["TMPDIR"] = {
        "path": "/scratch/tmp",
        "exists": False,
        "measured": "/",
        "free": 50 << 30,
        "total": 100 << 30,
    }
    access(facts)["setters"] = {"TMPDIR": ["/etc/environment:3: TMPDIR=/scratch/tmp"]}
    (result,) = disk.judge_disk("node1", facts)
    assert result.status == Status.FAIL
    assert "/scratch/tmp" in result.fix and "/etc/environment:3" in result.fix


def test_ssh_check_tells_a_missing_control_key_from_keys_ignored_altogether():
    def refused(g, into_rc, stderr):
        session = g.sessions["node2"]
        session.facts = None
        session.error = "authentication failed for vagrant@10.9.0.12:22 with /k"
        for source in ("node1", "node3"):
            g.ssh_pairs[(source, "node2")] = {"peer": "node2", "rc": into_rc, "stderr": stderr}
        return {r.node: r for r in ssh_access.check(g).results}["node2"]

    missing_line = refused(gathered(), 0, "")
    assert "accepts the cluster key but not the control machine's" in missing_line.fix
    ignored = refused(gathered(), 255, "vagrant@node2: Permission denied (publickey).")
    assert "StrictModes" in ignored.fix and "alike" in ignored.fix


def test_mesh_judges_the_pairs_it_did_not_log_in_over_from_both_nodes_facts():
    """A sampled mesh: node1 -> node2 was not tried, and node2's key line no longer
    lets node1's address in; node3 -> node2 was not tried either and works."""
    keys = {n: f"SHA256:host{n}" for n in NODES}

    def tweak(facts):
        for name in NODES:
            access(facts[name])["host_keys"] = [keys[name]]
            access(facts[name])["known_host_keys"] = {n: [keys[n]] for n in NODES}
        facts["node2"]["ssh"]["authorized_from"] = ["10.9.0.13"]

    tried = {p: v for p, v in _pairs().items() if p not in {("node1", "node2"), ("node3", "node2")}}
    report = mesh.check(gathered(tweak=tweak, ssh_pairs=tried))
    assert bad(report) == {("node1", "node2", "fail")}
    (result,) = [r for r in report.results if r.status != Status.PASS]
    assert "judged from both nodes' facts" in result.evidence
    assert "from=10.9.0.13" in result.evidence and "10.9.0.11" in result.fix

    def stale(facts):
        tweak(facts)
        facts["node2"]["ssh"]["authorized_from"] = None
        access(facts["node1"])["known_host_keys"]["node2"] = ["SHA256:old"]

    report = mesh.check(gathered(tweak=stale, ssh_pairs=tried))
    (result,) = [r for r in report.results if r.status != Status.PASS]
    assert (result.node, result.peer) == ("node1", "node2") and "stale" in result.fix


def test_hostfiles_without_a_cordoned_node_are_what_up_writes():
    from mpicluster.cluster.cordons import Cordon, CordonState

    state = CordonState(1, {"node2": Cordon("bad disk", 1.0)}).to_json()

    def tweak(facts):
        for name in NODES:
            facts[name]["cordons"] = state if name != "node3" else None  # node3 missed it
            files = facts[name]["files"]
            for path in hostfile.PATHS:
                files[path] = hostfile.render({"node1": 1, "node3": 1}, hostfile.PATHS[path])

    report = basics.check_hostfile(gathered(tweak=tweak))
    assert bad(report) == set()
    assert bad(basics.check_hostfile(gathered())) == set()  # no cordons: every node
