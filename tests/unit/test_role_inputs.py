"""What Python passes to the playbooks and what the roles declare agree: one set of
inputs, each declared by the roles that read it, every layout key known to the role
that validates it, and no role reading a layout key Python does not give."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from mpicluster import remote
from mpicluster.cluster.inventory import parse_inventory
from mpicluster.cluster.layout import Layout
from mpicluster.cluster.plan import ClusterPlan

ROLES = Path(__file__).resolve().parents[2] / "playbooks" / "roles"
#: Inputs `up` passes only for source installs (stack/prepare.py), per run or per host,
#: and the digest of all the others (provision.py).
LATER_INPUTS = {
    "mpicluster_stack_groups",
    "mpicluster_stack_fingerprint",
    "mpicluster_stack_repair",
    "mpicluster_applied_inputs",
    "mpicluster_python_packages",
    "mpicluster_packages_needed",
    "mpicluster_packages_relay",
}

INVENTORY = """\
cluster: t
network: {interface: eth1}
nodes:
  - {name: a, address: 10.0.0.1, slots: 2}
  - {name: b, address: 10.0.0.2, gpus: 1}
"""


def specs() -> dict[str, dict]:
    found = {}
    for path in sorted(ROLES.glob("*/meta/argument_specs.yml")):
        found[path.parents[1].name] = yaml.safe_load(path.read_text())["argument_specs"]
    return found


def declared() -> dict[str, set[str]]:
    """role -> the mpicluster_* inputs its entry points declare."""
    return {
        role: {
            name
            for entry in spec.values()
            for name in entry.get("options", {})
            if name.startswith("mpicluster_")
        }
        for role, spec in specs().items()
    }


@pytest.fixture
def extravars(tmp_path, monkeypatch) -> dict:
    from mpicluster.up.provision import ControlFiles
    from mpicluster.up.provision import extravars as make

    monkeypatch.setenv("MPICLUSTER_HOME", str(tmp_path))
    plan = ClusterPlan.of(parse_inventory(INVENTORY))
    return make(plan, {"a": 4, "b": 8}, ControlFiles.ensure(plan))


def test_every_role_declares_its_inputs():
    roles = {p.name for p in ROLES.iterdir() if (p / "tasks").is_dir()}
    assert set(specs()) == roles
    for role, spec in specs().items():
        assert "main" in spec, role


def test_what_python_passes_is_what_the_roles_declare(extravars):
    passed = set(extravars) | LATER_INPUTS
    wanted = set().union(*declared().values())
    assert passed == wanted


def test_each_role_declares_every_input_it_reads():
    for role, names in declared().items():
        text = "\n".join(p.read_text() for p in (ROLES / role).rglob("*") if p.is_file())
        modules = {p.stem for p in remote.MODULES.glob("*.py")}
        read = set(re.findall(r"\b(mpicluster_[a-z_]+)\b", text)) - modules
        assert read == names, role


def test_layout_keys_are_validated_and_known_to_every_reader(extravars):
    keys = set(Layout.of(parse_inventory(INVENTORY)).as_vars())
    assert set(extravars["mpicluster_layout"]) == keys
    options = specs()["preflight"]["main"]["options"]["mpicluster_layout"]["options"]
    assert set(options) == keys
    assert all(option.get("required") for option in options.values())
    playbooks = ROLES.parent
    for path in [*playbooks.rglob("*.yml"), *playbooks.rglob("*.j2")]:
        for key in re.findall(r"mpicluster_layout\.([a-z_]+)", path.read_text()):
            assert key in keys, f"{path}: mpicluster_layout.{key}"
