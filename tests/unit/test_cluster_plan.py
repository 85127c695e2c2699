"""One plan per command: the layout, each node's ssh and the MPI settings decided once;
up and down share their playbook inputs; computing inputs writes no file."""

from __future__ import annotations

from mpicluster.cluster.inventory import parse_inventory
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.down import teardown
from mpicluster.up.provision import ControlFiles, extravars

INVENTORY = """\
cluster: t
ssh: {user: root, port: 2222}
network: {cidr: 10.0.0.0/24}
nodes:
  - {name: a, address: 10.0.0.1, slots: 2}
  - {name: b, address: b.example, ssh: {port: 22}}
"""
SLURM = INVENTORY + "scheduler: {type: slurm}\n"


def test_the_plan_resolves_each_node_once():
    plan = ClusterPlan.of(parse_inventory(INVENTORY))
    assert {name: ssh.port for name, ssh in plan.ssh.items()} == {"a": 2222, "b": 22}
    assert [plan.node_ip(n) for n in plan.nodes] == ["10.0.0.1", ""]
    assert plan.mpi_env["OMPI_MCA_btl_tcp_if_include"] == "10.0.0.0/24"


def test_the_inventorys_mca_parameters_join_the_block_after_the_network():
    plan = ClusterPlan.of(
        parse_inventory(INVENTORY + "mpi:\n  mca: {mpi_yield_when_idle: 1, btl: '^openib'}\n")
    )
    assert plan.mpi_env == {
        "OMPI_MCA_btl_tcp_if_include": "10.0.0.0/24",
        "OMPI_MCA_oob_tcp_if_include": "10.0.0.0/24",
        "PRTE_MCA_oob_tcp_if_include": "10.0.0.0/24",
        "OMPI_MCA_mpi_yield_when_idle": "1",
        "OMPI_MCA_btl": "^openib",
        "PRTE_MCA_odls_base_max_threads": "0",
    }


def test_horovods_cycle_time_joins_the_block_while_horovod_is_built():
    given = INVENTORY + "stack:\n  horovod: {cycle_time_ms: 0.1%s}\n"
    plan = ClusterPlan.of(parse_inventory(given % ""))
    assert plan.mpi_env["HOROVOD_CYCLE_TIME"] == "0.1"
    plan = ClusterPlan.of(parse_inventory(given % ", enabled: false"))
    assert "HOROVOD_CYCLE_TIME" not in plan.mpi_env
    assert "HOROVOD_CYCLE_TIME" not in ClusterPlan.of(parse_inventory(INVENTORY)).mpi_env


def test_up_and_down_take_the_same_playbook_inputs(tmp_path, monkeypatch):
    monkeypatch.setenv("MPICLUSTER_HOME", str(tmp_path))
    plan = ClusterPlan.of(parse_inventory(INVENTORY))
    up = extravars(plan, {"b": 4}, ControlFiles.ensure(plan))
    down = teardown.extravars(plan, keep_stack=True)
    for name, value in plan.playbook_inputs().items():
        assert up[name] == down[name] == value
    assert up["mpicluster_footprint"] == plan.layout.footprint("t")


def test_inputs_are_computed_without_writing_a_file(tmp_path, monkeypatch):
    """The command makes the keys (ControlFiles.ensure); computing the inputs from them
    writes nothing on the control machine."""
    monkeypatch.setenv("MPICLUSTER_HOME", str(tmp_path / "state"))
    plan = ClusterPlan.of(parse_inventory(SLURM))
    files = ControlFiles.ensure(plan)
    made = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert files.munge_key is not None and files.munge_key.stat().st_mode & 0o777 == 0o600
    variables = extravars(plan, {"b": 4}, files)
    teardown.extravars(plan, keep_stack=False)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == made
    assert variables["mpicluster_scheduler"]["munge_key"] == str(files.munge_key)
    assert variables["mpicluster_cluster_key"] == str(files.key.private_path)
