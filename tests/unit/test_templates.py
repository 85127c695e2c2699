"""templates/ at the top: every file format mpicluster writes on nodes, one Jinja2
template each, rendered by the roles and by the Python side from the same folder."""

from __future__ import annotations

from pathlib import Path

from mpicluster.cluster import hostfiles
from mpicluster.cluster.inventory import parse_inventory
from mpicluster.cluster.layout import Layout
from mpicluster.util import templates

REPO = Path(__file__).resolve().parents[2]


def text_of(folder: str, suffix: str) -> str:
    return "\n".join(p.read_text() for p in sorted((REPO / folder).rglob(f"*{suffix}")))


def test_every_template_is_rendered_by_a_role_or_by_mpicluster():
    roles, python = text_of("playbooks", ".yml"), text_of("mpicluster", ".py")
    looped = "/{{ item }}.j2" in roles  # the slurm role's loop over its .conf files
    unused = []
    for name in templates.names():
        by_role = f"/{name}" in roles or (looped and f"- {name.removesuffix('.j2')}\n" in roles)
        by_python = f'"{name}"' in python or (
            name.startswith("hostfile.") and 'f"hostfile.{fmt}.j2"' in python
        )
        if not (by_role or by_python):
            unused.append(name)
    assert unused == []
    assert len(templates.names()) >= 13


def test_roles_keep_no_template_of_a_node_file():
    """What stays in a role's templates/ is data for its own tasks (JSON read back with
    from_json), not a file written on a node."""
    kept = sorted(p.name for p in (REPO / "playbooks" / "roles").glob("*/templates/*"))
    assert all(name.endswith(".json.j2") for name in kept), kept


def test_the_hostfiles_come_from_their_templates():
    slots = {"node1": 2, "node2": 4}
    assert hostfiles.render(slots, "openmpi") == "node1 slots=2\nnode2 slots=4\n"
    assert hostfiles.render(slots, "deepspeed") == "node1 slots=2\nnode2 slots=4\n"
    assert hostfiles.render(slots, "mpich") == "node1:2\nnode2:4\n"
    assert hostfiles.render(slots, "horovod") == "node1:2,node2:4\n"
    assert hostfiles.parse(hostfiles.render(slots, "openmpi")) == slots


def test_the_environment_file_from_its_template():
    inventory = parse_inventory("cluster: t\nnodes: [{name: a, address: 10.0.0.1}]\n")
    text = Layout.of(inventory).shell_exports({"OMPI_MCA_x": "a b'c"})
    lines = text.splitlines()
    assert lines[0] == "# mpicluster: the cluster's environment. Use: . /etc/mpicluster/env"
    assert lines[1].startswith('export PATH="/opt/mpicluster/current/bin')
    assert lines[-1] == "export OMPI_MCA_x='a b'\"'\"'c'"
    assert text.endswith("\n") and not text.endswith("\n\n")
