"""The files the hostfiles role writes, and the module that writes them in one call
(run as a node runs it, on this machine, against a temporary folder)."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from pathlib import Path

from mpicluster import remote
from mpicluster.cluster import layout
from mpicluster.cluster.inventory import parse_inventory
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.up.provision import config_files

MODULE = remote.MODULES / "mpicluster_files.py"


def run_module(args: dict, tmp_path: Path) -> dict:
    """The module as Ansible runs it on a node: its arguments in a file, its result as
    JSON on stdout (ansible-core's AnsibleModule reads and writes both)."""
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    done = subprocess.run(
        [sys.executable, str(MODULE), str(args_file)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    return json.loads(done.stdout)


def test_only_files_that_differ_are_written_and_no_temporary_is_left(tmp_path):
    owner = pwd.getpwuid(os.getuid()).pw_name
    folder, smoke = tmp_path / "etc", tmp_path / "etc" / "smoke"
    files = [
        {"path": str(folder / "hostfile"), "content": "node1 slots=2\n", "mode": "0644"},
        {"path": str(smoke / "probe.py"), "content": "print('ü')\n", "mode": "0600"},
    ]
    args = {"directories": [str(folder), str(smoke)], "files": files, "owner": owner}
    first = run_module(args, tmp_path)
    assert first["changed"] and first["written"] == [str(folder), str(smoke)] + [
        f["path"] for f in files
    ]
    assert (folder / "hostfile").read_text() == "node1 slots=2\n"
    assert (smoke / "probe.py").read_text(encoding="utf-8") == "print('ü')\n"
    assert oct((smoke / "probe.py").stat().st_mode & 0o777) == "0o600"
    assert oct(folder.stat().st_mode & 0o777) == "0o755"

    again = run_module(args, tmp_path)
    assert not again["changed"] and again["written"] == []

    (folder / "hostfile").write_text("node1 slots=1\n")  # same size, other content
    (smoke / "probe.py").chmod(0o644)
    fixed = run_module(args, tmp_path)
    assert fixed["written"] == [f["path"] for f in files]
    assert (folder / "hostfile").read_text() == "node1 slots=2\n"
    assert sorted(p.name for p in folder.rglob(".mpicluster.*")) == []


def test_a_file_that_cannot_be_written_is_a_failure_named_by_its_path(tmp_path):
    owner = pwd.getpwuid(os.getuid()).pw_name
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    args = {"files": [{"path": str(blocker / "hostfile"), "content": "x\n"}], "owner": owner}
    result = run_module(args, tmp_path)
    assert result.get("failed") and str(blocker) in result["msg"], result


def test_the_role_writes_every_hostfile_the_environment_cluster_json_and_the_programs():
    inventory = parse_inventory(
        "cluster: demo\nnodes:\n  - {name: node1, address: 10.0.0.1}\n"
        "  - {name: node2, address: 10.0.0.2}\n"
    )
    nodes = [{"name": n.name, "ip": n.address, "gpus": 0, "slots": 2} for n in inventory.nodes]
    written = {
        f["path"]: f["content"]
        for f in config_files(ClusterPlan.of(inventory), {"node1": 2, "node2": 2}, nodes)
    }
    assert set(layout.CONFIG_FILES) <= set(written)
    assert layout.ENV_FILE in written
    programs = {p.name for p in remote.RANK_PROGRAMS.glob("*.py")}
    assert {f"{layout.SMOKE_DIR}/{name}" for name in programs} <= set(written)
    described = json.loads(written[layout.CLUSTER_JSON])
    assert [n["name"] for n in described["nodes"]] == ["node1", "node2"]
    assert written[layout.CLUSTER_JSON].startswith('{\n    "cluster": "demo"')


def test_the_cordoned_nodes_are_left_out_of_the_hostfiles_and_their_state_is_written():
    from mpicluster.cluster import cordons
    from mpicluster.cluster.cordons import Cordon, CordonState

    plan = ClusterPlan.of(
        parse_inventory("cluster: demo\nnodes:\n  - {name: node1}\n  - {name: node2}\n")
    )
    state = CordonState(2, {"node2": Cordon("bad disk", 1.0)})
    written = {
        f["path"]: f["content"] for f in config_files(plan, {"node1": 2, "node2": 2}, [], state)
    }
    assert written[layout.HOSTFILE] == "node1 slots=2\n"
    assert cordons.parse(written[layout.CORDONS]) == state
    assert f'CORDONS = "{layout.CORDONS}"' in (remote.HERE / "nodeinfo.py").read_text()
