"""`validate` reports every problem of an inventory in one run (issue 57): the fields'
own values and the checks that span fields (files that must exist, nodes in the CIDR,
the Slurm controller a node, versions that can be had) together, each line with its
file:line, its field and the value it rejected; an unknown key with the nearest valid
one; a host:port address with where the port goes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mpicluster.cluster.inventory import Inventory, InventoryError, load_inventory
from mpicluster.cluster.lockfile import default_version, oldest_version, releases
from mpicluster.cluster.salvage import Parsed, salvage

SHA = "a" * 64


def problems(folder: Path, text: str) -> list[str]:
    """The problems of an inventory, as `LINE: FIELD: MESSAGE` (the file's name left out)."""
    path = folder / "inventory.yaml"
    path.write_text(text)
    with pytest.raises(InventoryError) as caught:
        load_inventory(path)
    lines = caught.value.lines()
    assert all(line.startswith(f"{path}:") for line in lines), lines
    return [line.removeprefix(f"{path}:") for line in lines]


def fields(lines: list[str]) -> list[tuple[str, str]]:
    """(line, field) of each problem."""
    return [tuple(line.split(": ")[:2]) for line in lines]


def loads(folder: Path, text: str) -> Inventory:
    path = folder / "inventory.yaml"
    path.write_text(text)
    return load_inventory(path)


# --- one run: the fields' values and the checks across them --------------------------

#: Issue 57's inventory: two type errors (install, port) and six problems the checks
#: across fields find, which used to appear only once the first two were fixed.
ISSUE_57 = """\
cluster: lab
ssh:
  port: 70000
  identity: keys/missing_id
  known_hosts: /nonexistent/known_hosts
network: {interface: eth0, cidr: 10.0.0.0/24}
stack:
  install: sources
python:
  requirements: requirements.txt
nodes:
  - {name: n1, address: 10.0.0.1}
  - {name: n2, address: 10.0.1.2}
scheduler: {type: slurm, controller: head}
"""


def test_type_errors_and_the_checks_across_fields_in_one_run(tmp_path):
    lines = problems(tmp_path, ISSUE_57)
    assert fields(lines) == [
        ("3", "ssh.port"),
        ("4", "ssh.identity"),
        ("5", "ssh.known_hosts"),
        ("6", "network"),
        ("8", "stack.install"),
        ("10", "python.requirements"),
        ("13", "nodes[1].address"),
        ("14", "scheduler.controller"),
    ]
    assert lines == [
        "3: ssh.port: must be <= 65535 (got 70000)",
        f"4: ssh.identity: no such file: {tmp_path / 'keys/missing_id'}",
        "5: ssh.known_hosts: no such file: /nonexistent/known_hosts",
        "6: network: give interface or cidr, not both (got eth0 and 10.0.0.0/24)",
        "8: stack.install: must be one of 'source' or 'packages' (got 'sources')",
        f"10: python.requirements: cannot read {tmp_path / 'requirements.txt'}: "
        "No such file or directory",
        "13: nodes[1].address: 10.0.1.2 is outside network.cidr 10.0.0.0/24",
        "14: scheduler.controller: 'head' is not a node (n1, n2)",
    ]


def test_a_node_that_does_not_parse_leaves_the_others_checked(tmp_path):
    text = (
        "cluster: lab\n"
        "network: {cidr: 10.0.0.0/24}\n"
        "nodes:\n"
        "  - {name: n1, address: 10.9.0.1}\n"  # 4: outside the CIDR
        "  - {name: 'n;2', gpus: many}\n"  # 5: its name and gpus
        "  - {name: n3, address: 10.0.0.3, ssh: {identity: /nonexistent/k}}\n"  # 6: key
        "  - {name: n1, address: 10.0.0.3}\n"  # 7: a duplicate name and address
        "scheduler:\n"
        "  type: slurm\n"
        "  controller: head\n"  # 10: the file names no node head
        "  partitions: [{name: p, nodes: [n1, n9]}]\n"  # 11: nor n9
    )
    assert problems(tmp_path, text) == [
        "4: nodes[0].address: 10.9.0.1 is outside network.cidr 10.0.0.0/24",
        "5: nodes[1].gpus: must be an integer (got 'many')",
        "5: nodes[1].name: contains ';', a shell metacharacter; not a valid hostname (got 'n;2')",
        "6: nodes[2].ssh.identity: no such file: /nonexistent/k",
        "7: nodes[3].address: duplicate address '10.0.0.3' (also nodes[2])",
        "7: nodes[3].name: duplicate name 'n1' (also nodes[0])",
        "10: scheduler.controller: 'head' is not a node (n1, n;2, n3, n1)",
        "11: scheduler.partitions: node n3 is in no partition: Slurm would never run a job "
        "on it (add it to one, or leave partitions out for one of every node)",
        "11: scheduler.partitions[0].nodes[1]: 'n9' is not a node (n1, n;2, n3, n1)",
    ]


def test_a_node_without_a_name_to_read_keeps_the_controller_unjudged(tmp_path):
    """A node given as a word has no name to compare with: `head` may be it."""
    text = (
        "cluster: lab\nnodes:\n  - n1\n  - {name: n2}\nscheduler: {type: slurm, controller: head}\n"
    )
    assert fields(problems(tmp_path, text)) == [("3", "nodes[0]")]


def test_partitions_that_do_not_all_parse_are_not_judged_for_coverage(tmp_path):
    text = (
        "cluster: lab\nnodes: [{name: n1}, {name: n2}]\n"
        "scheduler:\n  type: slurm\n  partitions:\n"
        "    - {name: a, nodes: [n1], default: true}\n"
        "    - {name: 9b, nodes: [n2]}\n"  # 7: a bad name: n2's partition is lost
        "    - {name: a, nodes: [n1], default: true}\n"  # 8: a duplicate, a second default
    )
    assert problems(tmp_path, text) == [
        "7: scheduler.partitions[1].name: '9b' is not a partition name (a letter, then "
        "letters, digits, _ or -; 1-32)",
        "8: scheduler.partitions[2].default: a second default partition (partitions[0] is "
        "one); give one",
        "8: scheduler.partitions[2].name: duplicate partition 'a' (also partitions[0])",
    ]


@pytest.mark.parametrize(
    ("stack", "expected"),
    [
        # a sha256 beside a url that failed: not "given without url"
        (
            f"{{openmpi: {{version: 4.1.4, url: 'ftp://x/o.tar', sha256: {SHA}}}}}",
            [("6", "stack.openmpi.url")],
        ),
        # a url beside a sha256 that failed: not "needs a sha256"
        (
            "{openmpi: {version: 4.1.4, url: 'https://x/o.tar', sha256: abc}}",
            [("6", "stack.openmpi.sha256")],
        ),
        # horovod.enabled that failed is not read as true beside pytorch.enabled: false
        (
            "{horovod: {enabled: 'no'}, pytorch: {enabled: false}}",
            [("6", "stack.horovod.enabled")],
        ),
        # cuda_archs that failed are not read as none beside gpus_present: false
        (
            "{gpus_present: false, nccl: {cuda_archs: [sm_90]}}",
            [("6", "stack.nccl.cuda_archs[0]")],
        ),
        # ... where the same without a value says it
        ("{gpus_present: false}", [("6", "stack.gpus_present")]),
    ],
)
def test_a_value_that_failed_is_not_read_as_its_default(tmp_path, stack, expected):
    text = "cluster: lab\nssh: {user: mpi}\nnodes:\n  - {name: n1, gpus: 1}\nx: 1\n"
    text += f"stack: {stack}\n"
    assert fields(problems(tmp_path, text)) == [("5", "x"), *expected]


def test_an_mpi_user_that_failed_is_not_read_as_the_default(tmp_path):
    """nodes[0].ssh.user failed: ssh.user (alice) does not stand in for it."""
    text = (
        "cluster: lab\nssh: {user: alice}\nnodes:\n  - {name: n1, ssh: {user: 'Bad!'}}\n"
        "users: [{name: alice, keys: [keys/none.pub]}]\n"
    )
    assert fields(problems(tmp_path, text)) == [
        ("4", "nodes[0].ssh.user"),
        ("5", "users[0].keys[0]"),
    ]


def test_a_cluster_without_a_valid_name_or_nodes_is_still_checked(tmp_path):
    text = "cluster: Lab_1\nnodes: []\nssh: {known_hosts: /nonexistent/kh}\n"
    assert fields(problems(tmp_path, text)) == [
        ("1", "cluster"),
        ("2", "nodes"),
        ("3", "ssh.known_hosts"),
    ]


def test_what_parsed_is_what_validation_gives():
    """The top level is salvaged field by field (salvage.py): that holds only while
    Inventory has no validators of its own, and gives what model_validate gives."""
    decorators = Inventory.__pydantic_decorators__
    assert not decorators.field_validators and not decorators.model_validators
    data = yaml.safe_load(ISSUE_57.replace("sources", "source").replace("70000", "2222"))
    data["users"] = [{"name": "bob", "keys": ["keys/bob.pub"], "groups": ["video"]}]
    found, parsed = salvage(Inventory, data, set())
    assert found == Inventory.model_validate(data)
    assert parsed == Parsed()


def test_what_was_lost_is_said():
    data = yaml.safe_load(
        "cluster: Bad_Name\nssh: {port: 0, user: bob}\nnodes: [{name: n1}, {name: 'n;2'}, "
        "{name: n3, gpus: x}]\nscheduler: {type: pbs}\n"
    )
    bad = {("cluster",), ("ssh", "port"), ("nodes", 1, "name"), ("nodes", 2, "gpus")}
    found, parsed = salvage(Inventory, data, bad | {("scheduler", "type")})
    assert [n.name for n in found.nodes] == ["n1", "n3"]
    assert list(parsed.indexed(("nodes",), found.nodes)) == [
        (0, found.nodes[0]),
        (2, found.nodes[1]),
    ]
    assert (found.ssh.user, found.ssh.port, found.scheduler) == ("bob", 22, None)
    assert parsed.is_lost(("ssh", "port")) and parsed.is_lost(("nodes", 2, "gpus"))
    assert parsed.is_lost(("scheduler", "controller")) and parsed.is_lost(("cluster",))
    assert not parsed.is_lost(("ssh", "user")) and not parsed.complete(("nodes",))


# --- unknown keys: the nearest valid one -------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "cluster: a\nnode: [{name: n1}]\n",
            "2: node: unknown key; did you mean nodes? (expected one of: cluster, ssh,",
        ),
        (
            "cluster: a\nnodes:\n  - {name: n1, adress: 10.0.0.1}\n",
            "3: nodes[0].adress: unknown key; did you mean address? (expected one of: name, "
            "address, gpus, slots, ssh)",
        ),
        (
            "cluster: a\nnodes: [{name: n1}]\nstack: {openmpi: {verison: 5.0.7}}\n",
            "3: stack.openmpi.verison: unknown key; did you mean version? (expected one of: "
            "version, url, sha256, cuda, fortran, configure_args)",
        ),
        (
            "cluster: a\nnodes: [{name: n1}]\nscheduler: {type: slurm, controler: n1}\n",
            "3: scheduler.controler: unknown key; did you mean controller?",
        ),
    ],
)
def test_an_unknown_key_names_the_nearest_valid_one(tmp_path, text, expected):
    lines = problems(tmp_path, text)
    assert any(line.startswith(expected) for line in lines), lines


def test_an_unknown_key_like_no_valid_one_gets_no_guess(tmp_path):
    lines = problems(tmp_path, "cluster: a\nnodes: [{name: n1}]\nbogus: 1\n")
    assert lines == [
        "3: bogus: unknown key (expected one of: cluster, ssh, network, mpi, nodes, stack, "
        "python, sources, scheduler, health, users)"
    ]


# --- every rejected value repeated ---------------------------------------------------------


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        ("{name: n1, address: 10.0.0.300}", "nodes[0].address: '10.0.0.300' is not an IP"),
        ("{name: gpu_01}", "nodes[0].name: 'gpu_01' is not an RFC 1123 hostname"),
        ("{name: n1, gpus: eight}", "nodes[0].gpus: must be an integer (got 'eight')"),
        ("{name: n1, gpus: 1.5}", "nodes[0].gpus: must be an integer (got 1.5)"),
        ("{name: n1, slots: 0}", "nodes[0].slots: must be >= 1 (got 0)"),
        ("{name: n1, ssh: {user: 'a b'}}", "nodes[0].ssh.user: contains ' ', a shell "),
        ("{name: n1, ssh: {user: 'a b'}}", "metacharacter (got 'a b')"),
        ("{name: n1, ssh: [22]}", "nodes[0].ssh: must be a mapping (got a list)"),
        ("{name: null}", "nodes[0].name: must be a string (got null)"),
        ("{name: true}", "nodes[0].name: must be a string (got true)"),
        ('{name: "n1\\nx"}', "nodes[0].name: contains '\\n'"),
    ],
)
def test_a_rejected_value_is_repeated_in_its_line(tmp_path, node, expected):
    (line,) = problems(tmp_path, f"cluster: a\nnodes:\n  - {node}\n")
    assert line.startswith("3: ") and expected in line, line
    assert "\n" not in line


def test_a_long_value_is_cut(tmp_path):
    (line,) = problems(tmp_path, f"cluster: a\nnodes: [{{name: n1, address: '{'x' * 300}'}}]\n")
    assert line.startswith("2: nodes[0].address: 'xxxx") and len(line) < 200, line


# --- host:port ---------------------------------------------------------------------------

HINT = "put the port in ssh.port (or the node's ssh.port)"


@pytest.mark.parametrize(
    ("node", "value"),
    [
        ("{name: n1, address: '10.0.0.14:22'}", "'10.0.0.14:22'"),
        ("{name: n1, address: 'host:2222'}", "'host:2222'"),
        ("{name: n1, address: 'gpu01.lab.example:22'}", "'gpu01.lab.example:22'"),
        ("{name: n1, address: '[fe80::1]:22'}", "'[fe80::1]:22'"),
        ("{name: 'gpu01:2222'}", "'gpu01:2222'"),
    ],
)
def test_a_host_with_a_port_says_where_the_port_goes(tmp_path, node, value):
    (line,) = problems(tmp_path, f"cluster: a\nnodes:\n  - {node}\n")
    assert line.startswith("3: nodes[0].") and f": {value} is not " in line, line
    assert line.endswith(HINT), line


@pytest.mark.parametrize("address", ["a:b", "10.0.0.300", "host:port"])
def test_no_port_hint_where_there_is_no_port(tmp_path, address):
    (line,) = problems(tmp_path, f"cluster: a\nnodes:\n  - {{name: n1, address: '{address}'}}\n")
    assert HINT not in line, line


@pytest.mark.parametrize(
    "address", ["::1", "fe80::1", "2001:db8::14", "fe80::1%eth0", "::ffff:10.0.0.1", "10.0.0.14"]
)
def test_ip_addresses_stay_valid_ipv6_included(tmp_path, address):
    inv = loads(tmp_path, f"cluster: a\nnodes:\n  - {{name: n1, address: '{address}'}}\n")
    assert inv.nodes[0].host == address


def test_an_ipv6_address_is_judged_against_an_ipv6_cidr(tmp_path):
    text = (
        "cluster: a\nnetwork: {cidr: 'fd00::/64'}\nnodes:\n"
        "  - {name: n1, address: 'fd00::1'}\n  - {name: n2, address: 'fd01::1'}\n"
    )
    assert problems(tmp_path, text) == [
        "5: nodes[1].address: fd01::1 is outside network.cidr fd00::/64"
    ]


# --- versions: what the lockfile pins, what pip can install ---------------------------------


@pytest.mark.parametrize(
    ("component", "version"),
    [
        ("openmpi", "9.9.9"),
        ("openmpi", "3.1.x"),
        ("ucx", "1.99.0"),
        ("nccl", "2.99.1-1"),
        ("nccl_tests", "1.0.0"),
        ("mpi4py", "3.1.0"),
        ("horovod", "0.27.0"),
    ],
)
def test_a_version_the_lockfile_does_not_pin_names_those_it_does(tmp_path, component, version):
    text = f"cluster: a\nnodes: [{{name: n1}}]\nstack:\n  {component}: {{version: {version}}}\n"
    (line,) = problems(tmp_path, text)
    assert line.startswith(f"4: stack.{component}.version: "), line
    pinned = releases(component)
    assert all(v in line for v in pinned), line
    assert version in line and "url and sha256" in line, line


def test_any_exact_version_with_its_own_url_and_sha256_is_taken(tmp_path):
    text = (
        "cluster: a\nnodes: [{name: n1}]\nstack:\n"
        f"  openmpi: {{version: 9.9.9, url: 'https://x.org/o.tar.bz2', sha256: {SHA}}}\n"
    )
    assert loads(tmp_path, text).stack.openmpi.version == "9.9.9"


def test_a_series_the_lockfile_pins_is_taken(tmp_path):
    text = "cluster: a\nnodes: [{name: n1}]\n"
    text += "stack: {openmpi: {version: 5.0.x}, nccl: {version: 2.29.x}}\n"
    assert loads(tmp_path, text).stack.openmpi.version == "5.0.x"


def torch(folder: Path, pytorch: str) -> list[str]:
    return problems(folder, f"cluster: a\nnodes: [{{name: n1}}]\nstack:\n  pytorch: {pytorch}\n")


def test_a_pytorch_older_than_any_with_wheels_for_the_stacks_python_is_refused(tmp_path):
    (line,) = torch(tmp_path, "{version: 1.0.0}")
    assert line == (
        "4: stack.pytorch.version: PyTorch 1.0.0 cannot be installed: it has no wheels for "
        f"the stack's Python (3.10 or newer); give {oldest_version('pytorch')} or newer "
        f"(the lockfile's default: {default_version('pytorch')})"
    )


@pytest.mark.parametrize(
    ("version", "why"),
    [
        ("2.13.x", "2.13.x is a series: pip is asked for one release of PyTorch"),
        ("2.x", "2.x is a series"),
    ],
)
def test_a_pytorch_series_is_refused(tmp_path, version, why):
    (line,) = torch(tmp_path, f"{{version: {version}}}")
    assert line.startswith(f"4: stack.pytorch.version: {why}"), line
    assert "give 1.11.0 or newer" in line


@pytest.mark.parametrize("version", ["1.11.0", "2.13.0", "2.14.1", "3.0.0"])
def test_a_pytorch_release_pip_may_find_is_taken(tmp_path, version):
    """PyPI is not asked here: a release newer than any known may be there."""
    text = f"cluster: a\nnodes: [{{name: n1}}]\nstack:\n  pytorch: {{version: {version}}}\n"
    assert loads(tmp_path, text).stack.pytorch.version == version


def test_a_pytorch_left_out_is_not_judged(tmp_path):
    text = "cluster: a\nnodes: [{name: n1}]\nstack:\n  horovod: {enabled: false}\n"
    text += "  pytorch: {enabled: false, version: 1.0.0}\n"
    assert loads(tmp_path, text).stack.pytorch.version == "1.0.0"


@pytest.fixture
def local_index(tmp_path: Path) -> Path:
    """A PyTorch index in a folder, as pip reads one (PEP 503): torch/ with its wheels,
    one of them only linked from torch/index.html."""
    project = tmp_path / "index" / "torch"
    project.mkdir(parents=True)
    for name in (
        "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
        "torch-2.13.0+cpu-cp313-cp313-manylinux_2_28_x86_64.whl",
        "torch-2.12.1+cpu-cp311-cp311-manylinux_2_28_x86_64.whl",
    ):
        (project / name).write_bytes(b"")
    (project / "index.html").write_text(
        '<a href="../../files/torch-2.14.1%2Bcpu-cp311-cp311-linux_x86_64.whl#sha256=00">x</a>\n'
        '<a href="numpy-2.0.0-cp311-cp311-linux_x86_64.whl">numpy</a>\n'
    )
    return tmp_path / "index"


@pytest.mark.parametrize("url", ["file://{index}", "{index}"])
def test_a_refused_pytorch_names_what_a_local_index_holds(tmp_path, local_index, url):
    index_url = url.format(index=local_index)
    (line,) = torch(tmp_path, f"{{version: 1.0.0, index_url: '{index_url}'}}")
    assert line.endswith(f"; the local index {index_url} holds 2.12.1, 2.13.0, 2.14.1"), line


def test_a_release_a_local_index_lacks_is_taken_as_pip_asks_pypi_too(tmp_path, local_index):
    text = (
        "cluster: a\nnodes: [{name: n1}]\nstack:\n"
        f"  pytorch: {{version: 2.15.0, index_url: 'file://{local_index}'}}\n"
    )
    assert loads(tmp_path, text).stack.pytorch.version == "2.15.0"


def test_an_empty_local_index_is_said_to_hold_no_pytorch(tmp_path):
    (tmp_path / "empty").mkdir()
    (line,) = torch(tmp_path, f"{{version: 1.0.0, index_url: '{tmp_path / 'empty'}'}}")
    assert line.endswith(f"the local index {tmp_path / 'empty'} holds no PyTorch"), line


# --- through the real command ----------------------------------------------------------------


def test_the_command_lists_every_problem_of_one_broken_inventory(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text(
        """\
cluster: lab
ssh:
  port: 70000
  identity: keys/missing_id
  known_hosts: /nonexistent/known_hosts
network: {interface: eth0, cidr: 10.0.0.0/24}
stack:
  install: sources
  pytorch: {version: 1.0.0}
python:
  requirements: requirements.txt
nodes:
  - {name: n1, address: 10.0.0.1}
  - {name: n2, address: 10.0.1.2}
  - {name: n3, address: '10.0.0.14:22', adress: 10.0.0.14}
  - {name: n4, address: 10.0.0.300}
scheduler: {type: slurm, controller: head}
stack_: {}
"""
    )
    done = subprocess.run(
        [sys.executable, "-m", "mpicluster", "validate", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert all(line.startswith(f"error: {path}:") for line in lines), done.stderr
    where = [line.removeprefix(f"error: {path}:").split(": ")[:2] for line in lines]
    assert where == [
        ["3", "ssh.port"],
        ["4", "ssh.identity"],
        ["5", "ssh.known_hosts"],
        ["6", "network"],
        ["8", "stack.install"],
        ["9", "stack.pytorch.version"],
        ["11", "python.requirements"],
        ["14", "nodes[1].address"],
        ["15", "nodes[2].address"],
        ["15", "nodes[2].adress"],
        ["16", "nodes[3].address"],
        ["17", "scheduler.controller"],
        ["18", "stack_"],
    ], done.stderr
    assert len(lines) == 13
    text = done.stderr
    assert "nodes[2].adress: unknown key; did you mean address?" in text
    assert "'10.0.0.14:22' is not an IP address or hostname; " + HINT in text
    assert "'10.0.0.300' is not an IP address or hostname" in text
    assert "stack_: unknown key; did you mean stack?" in text
    assert "PyTorch 1.0.0 cannot be installed" in text
