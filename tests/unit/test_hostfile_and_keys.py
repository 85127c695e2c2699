"""Hostfiles, the cluster key and the generated Ansible inputs."""

from __future__ import annotations

import stat

import pytest

from mpicluster.cluster import hostfiles as hostfile
from mpicluster.util.errors import UsageError
from tests.unit.plans import plan_of

INV = plan_of(
    "cluster: t\nnodes:\n  - {name: g1, gpus: 8}\n  - {name: g2, gpus: 8, slots: 4}\n"
    "  - {name: c1}\n"
)


def test_slots_come_from_slots_then_gpus_then_cores():
    assert hostfile.slots(INV, {"c1": 16}) == {"g1": 8, "g2": 4, "c1": 16}
    assert hostfile.needs_cores(INV) == ["c1"]
    with pytest.raises(UsageError):
        hostfile.slots(INV, {})
    # a cordoned node is in no hostfile: its cores are not needed (it may be unreachable)
    assert hostfile.slots(INV, {}, ["g1", "g2"]) == {"g1": 8, "g2": 4}


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        ("openmpi", "g1 slots=8\ng2 slots=4\nc1 slots=2\n"),
        ("mpich", "g1:8\ng2:4\nc1:2\n"),
        ("horovod", "g1:8,g2:4,c1:2\n"),
        ("deepspeed", "g1 slots=8\ng2 slots=4\nc1 slots=2\n"),
    ],
)
def test_formats(fmt, expected):
    assert hostfile.render(hostfile.slots(INV, {"c1": 2}), fmt) == expected
    if fmt in ("openmpi", "deepspeed"):  # what `run` reads back from the head node
        assert hostfile.parse(expected) == {"g1": 8, "g2": 4, "c1": 2}


def test_the_env_file_exports_what_etc_environment_gets(tmp_path):
    """A shell that sources it gets the stack's PATH and libraries in front and the
    interface settings; what it had stays behind them."""
    import subprocess

    from mpicluster.cluster.mpi_settings import mpi_environment

    inv = plan_of("cluster: t\nnetwork: {interface: eth1}\nnodes: [{name: a}]\n")
    script = inv.layout.shell_exports(mpi_environment(inv.network))
    (tmp_path / "env").write_text(script)
    shown = subprocess.run(
        [
            "sh",
            "-c",
            f". {tmp_path}/env; echo $PATH; echo $LD_LIBRARY_PATH; "
            "echo $NCCL_SOCKET_IFNAME $PRTE_MCA_oob_tcp_if_include",
        ],
        env={"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/old"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    current = "/opt/mpicluster/current"
    assert shown[0] == f"{current}/bin:{current}/venv/bin:/usr/bin:/bin"
    assert shown[1] == f"{current}/lib:/old"  # no GPUs: no CUDA libraries
    assert shown[2] == "eth1 eth1"


def test_cluster_key_is_private_and_stable(tmp_path, monkeypatch):
    from mpicluster.cluster.state import ensure_cluster_key

    monkeypatch.setenv("MPICLUSTER_HOME", str(tmp_path))
    key = ensure_cluster_key("demo")
    assert stat.S_IMODE(key.private_path.stat().st_mode) == 0o600
    assert key.public_line.startswith("ssh-ed25519 ")
    assert key.public_line.endswith(" mpicluster:demo")
    assert ensure_cluster_key("demo") == key
    key.private_path.chmod(0o644)
    with pytest.raises(Exception, match="readable by others"):
        ensure_cluster_key("demo")


def test_generated_ansible_inputs_check_host_keys(tmp_path, monkeypatch):
    from mpicluster.nodes.ansible_run import prepare_run

    monkeypatch.setenv("MPICLUSTER_HOME", str(tmp_path))
    run_dir, command = prepare_run(tmp_path / "runs", "t", INV, {"x": 1}, {}, "site.yml")
    cfg = (run_dir / "ansible.cfg").read_text()
    assert "host_key_checking = True" in cfg
    assert "StrictHostKeyChecking=yes" in cfg
    assert command.startswith("ANSIBLE_CONFIG=") and "ansible-playbook" in command
    assert (run_dir / "command.sh").stat().st_mode & 0o100
