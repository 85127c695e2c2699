"""Bad inventories: each gives one line per problem naming the field, exit 2, no traceback."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from mpicluster.cli import app

GOOD = """\
cluster: test
nodes:
  - {name: n1, address: 10.0.0.1}
  - {name: n2, address: 10.0.0.2}
"""

# (id, inventory text, expected "line: location: message" fragment)
CASES = [
    ("yaml-syntax", "cluster: a\nnodes: [\n  {name: n1\n", "invalid YAML"),
    ("yaml-tab", "cluster: a\n\tnodes: []\n", ":2: invalid YAML"),
    ("empty-file", "", "the inventory is empty"),
    ("top-level-list", "- a\n- b\n", "the top level must be a mapping"),
    ("unknown-top-key", GOOD + "gpu: 1\n", ":5: gpu: unknown key"),
    ("cluster-trailing-newline", 'cluster: "a\\n"\nnodes: [{name: n1}]\n', ":1: cluster:"),
    (
        "user-trailing-newline",
        GOOD + 'ssh: {user: "alice\\n"}\n',
        ":5: ssh.user:",
    ),
    (
        "interface-trailing-newline",
        GOOD + 'network: {interface: "eth0\\n"}\n',
        ":5: network.interface:",
    ),
    ("health-interval-short", GOOD + "health: {interval: 2}\n", ":5: health.interval:"),
    ("health-unknown-key", GOOD + "health: {every: 60}\n", ":5: health.every: unknown key"),
    (
        "unknown-node-key",
        "cluster: a\nnodes:\n  - {name: n1, adress: 10.0.0.1}\n",
        ":3: nodes[0].adress: unknown key; did you mean address? (expected one of: name, address",
    ),
    (
        "duplicate-yaml-key",
        "cluster: a\ncluster: b\nnodes: [{name: n1}]\n",
        ":2: cluster: duplicate key (first given at line 1)",
    ),
    ("missing-cluster", "nodes: [{name: n1}]\n", "cluster: required"),
    ("bad-cluster-name", "cluster: My_Cluster\nnodes: [{name: n1}]\n", ":1: cluster: use 1-40"),
    ("missing-nodes", "cluster: a\n", "nodes: required"),
    ("empty-nodes", "cluster: a\nnodes: []\n", ":2: nodes: at least one node is required"),
    ("nodes-not-list", "cluster: a\nnodes: {name: n1}\n", ":2: nodes: must be a list"),
    (
        "node-missing-name",
        "cluster: a\nnodes:\n  - {address: 10.0.0.1}\n",
        "nodes[0].name: required",
    ),
    (
        "name-metachar",
        "cluster: a\nnodes:\n  - {name: 'n1;reboot'}\n",
        ":3: nodes[0].name: contains ';', a shell metacharacter",
    ),
    (
        "name-underscore",
        "cluster: a\nnodes:\n  - {name: gpu_01}\n",
        ":3: nodes[0].name: 'gpu_01' is not an RFC 1123 hostname",
    ),
    (
        "name-leading-hyphen",
        "cluster: a\nnodes:\n  - {name: -gpu01}\n",
        ":3: nodes[0].name: '-gpu01' is not an RFC 1123 hostname",
    ),
    (
        "address-bad-ip",
        "cluster: a\nnodes:\n  - {name: n1, address: 10.0.0.300}\n",
        ":3: nodes[0].address: '10.0.0.300' is not an IP address or hostname",
    ),
    (
        "address-substitution",
        "cluster: a\nnodes:\n  - {name: n1, address: '$(reboot)'}\n",
        ":3: nodes[0].address: contains '$', a shell metacharacter",
    ),
    (
        "duplicate-names",
        GOOD + "  - {name: n1, address: 10.0.0.3}\n",
        ":5: nodes[2].name: duplicate name 'n1' (also nodes[0])",
    ),
    (
        "duplicate-names-case",
        GOOD + "  - {name: N2, address: 10.0.0.3}\n",
        ":5: nodes[2].name: duplicate name 'N2' (also nodes[1])",
    ),
    (
        "duplicate-addresses",
        GOOD + "  - {name: n3, address: 10.0.0.2}\n",
        ":5: nodes[2].address: duplicate address '10.0.0.2' (also nodes[1])",
    ),
    (
        "negative-gpus",
        "cluster: a\nnodes:\n  - {name: n1, gpus: -1}\n",
        ":3: nodes[0].gpus: must be >= 0 (got -1)",
    ),
    (
        "gpus-string",
        "cluster: a\nnodes:\n  - {name: n1, gpus: eight}\n",
        ":3: nodes[0].gpus: must be an integer",
    ),
    (
        "gpus-boolean",
        "cluster: a\nnodes:\n  - {name: n1, gpus: yes}\n",
        ":3: nodes[0].gpus: must be an integer (got a boolean)",
    ),
    (
        "zero-slots",
        "cluster: a\nnodes:\n  - {name: n1, slots: 0}\n",
        ":3: nodes[0].slots: must be >= 1 (got 0)",
    ),
    (
        "port-zero",
        "cluster: a\nssh: {port: 0}\nnodes: [{name: n1}]\n",
        ":2: ssh.port: must be >= 1",
    ),
    (
        "port-too-big",
        "cluster: a\nssh:\n  port: 70000\nnodes: [{name: n1}]\n",
        ":3: ssh.port: must be <= 65535 (got 70000)",
    ),
    (
        "port-string",
        "cluster: a\nssh: {port: '22'}\nnodes: [{name: n1}]\n",
        ":2: ssh.port: must be an integer",
    ),
    (
        "node-port-bad",
        "cluster: a\nnodes:\n  - {name: n1, ssh: {port: -22}}\n",
        ":3: nodes[0].ssh.port: must be >= 1",
    ),
    (
        "bad-user",
        "cluster: a\nssh: {user: 'root; rm'}\nnodes: [{name: n1}]\n",
        ":2: ssh.user: contains ';'",
    ),
    (
        "identity-missing",
        "cluster: a\nssh: {identity: /nonexistent/id_ed25519}\nnodes: [{name: n1}]\n",
        ":2: ssh.identity: no such file: /nonexistent/id_ed25519",
    ),
    (
        "node-identity-missing",
        "cluster: a\nnodes:\n  - {name: n1, ssh: {identity: ./nokey}}\n",
        ":3: nodes[0].ssh.identity: no such file",
    ),
    (
        "known-hosts-missing",
        "cluster: a\nssh: {known_hosts: /nonexistent/kh}\nnodes: [{name: n1}]\n",
        ":2: ssh.known_hosts: no such file",
    ),
    (
        "interface-and-cidr",
        "cluster: a\nnetwork: {interface: eth0, cidr: 10.0.0.0/24}\nnodes: [{name: n1}]\n",
        ":2: network: give interface or cidr, not both",
    ),
    (
        "cidr-invalid",
        "cluster: a\nnetwork: {cidr: 10.0.0.0/33}\nnodes: [{name: n1}]\n",
        ":2: network.cidr: '10.0.0.0/33' is not a network in CIDR notation",
    ),
    (
        "cidr-host-bits",
        "cluster: a\nnetwork: {cidr: 10.0.0.7/24}\nnodes: [{name: n1}]\n",
        ":2: network.cidr: has host bits set; did you mean 10.0.0.0/24?",
    ),
    (
        "interface-too-long",
        "cluster: a\nnetwork: {interface: averyveryverylongname0}\nnodes: [{name: n1}]\n",
        ":2: network.interface: longer than 15 characters",
    ),
    (
        "address-outside-cidr",
        "cluster: a\nnetwork: {cidr: 10.0.0.0/24}\nnodes:\n  - {name: n1, address: 10.9.0.1}\n",
        ":4: nodes[0].address: 10.9.0.1 is outside network.cidr",
    ),
    (
        "unknown-component",
        GOOD + "stack: {mvapich: {version: 2.3}}\n",
        ":5: stack.mvapich: unknown key (expected one of: install, prefix",
    ),
    (
        "bad-install-mode",
        GOOD + "stack: {install: docker}\n",
        ":5: stack.install: must be one of 'source' or 'packages'",
    ),
    (
        "prefix-control-character",
        GOOD + 'stack: {prefix: "/opt/\\x1fmpi"}\n',
        ":5: stack.prefix: contains the control character '\\x1f'",
    ),
    (
        "url-newline",
        GOOD + 'stack:\n  openmpi: {version: 4.1.4, url: "/x\\n", sha256: ' + "a" * 64 + "}\n",
        ":6: stack.openmpi.url: contains the control character '\\n'",
    ),
    (
        "relative-prefix",
        GOOD + "stack: {prefix: opt/mpi}\n",
        ":5: stack.prefix: must be an absolute path",
    ),
    (
        "bad-sha256",
        GOOD + "stack:\n  openmpi: {url: 'https://x.org/o.tar.bz2', sha256: abc}\n",
        ":6: stack.openmpi.sha256: 'abc' is not a sha256",
    ),
    (
        "url-without-sha",
        GOOD + "stack:\n  openmpi: {url: 'https://x.org/o.tar.bz2'}\n",
        ":6: stack.openmpi.url: needs a sha256 beside it",
    ),
    (
        "bad-version",
        GOOD + "stack:\n  openmpi: {version: latest}\n",
        ":6: stack.openmpi.version: 'latest' is not a version",
    ),
    (
        "cuda-maybe",
        GOOD + "stack:\n  openmpi: {cuda: maybe}\n",
        ":6: stack.openmpi.cuda: must be true, false or auto",
    ),
    (
        "bad-framework",
        GOOD + "stack:\n  horovod: {frameworks: [caffe]}\n",
        ":6: stack.horovod.frameworks[0]: must be one of 'pytorch'",
    ),
    (
        "bad-cuda-arch",
        GOOD + "stack:\n  nccl: {cuda_archs: [sm_90]}\n",
        ":6: stack.nccl.cuda_archs[0]: 'sm_90' is not a compute capability like 9.0",
    ),
]


CASES += [
    (
        "unpinned-version",
        GOOD + "stack:\n  openmpi: {version: 6.0.x}\n",
        ":6: stack.openmpi.version: no pinned openmpi release in 6.0.x",
    ),
    (
        "url-without-version",
        GOOD + "stack:\n  mpi4py: {url: 'https://x.org/m.tar.gz', sha256: " + "a" * 64 + "}\n",
        ":6: stack.mpi4py.version: give the exact version",
    ),
    (
        "mca-prefixed-name",
        GOOD + "mpi:\n  mca: {OMPI_MCA_btl: tcp}\n",
        ":6: mpi.mca: 'OMPI_MCA_btl' is not an Open MPI parameter name",
    ),
    (
        "mca-network-parameter",
        GOOD + "mpi:\n  mca: {btl_tcp_if_include: eth0}\n",
        ":6: mpi.mca: btl_tcp_if_include: network (interface or cidr) sets it",
    ),
    (
        "mca-value-with-space",
        GOOD + "mpi:\n  mca: {mpi_show_mca_params: 'all enviro'}\n",
        "mpi.mca: mpi_show_mca_params: 'all enviro' is not a value /etc/environment keeps",
    ),
    (
        "mca-boolean-value",
        GOOD + "mpi:\n  mca: {mpi_yield_when_idle: true}\n",
        "mpi.mca: mpi_yield_when_idle: True is not a value (give a number or a word)",
    ),
    (
        "horovod-cycle-time-zero",
        GOOD + "stack:\n  horovod: {cycle_time_ms: 0}\n",
        ":6: stack.horovod.cycle_time_ms: must be >= 0.01",
    ),
    (
        "horovod-cycle-time-word",
        GOOD + "stack:\n  horovod: {cycle_time_ms: fast}\n",
        ":6: stack.horovod.cycle_time_ms: must be a number",
    ),
    (
        "source-file-missing",
        GOOD
        + "stack:\n  openmpi: {version: 4.1.4, url: /nonexistent/o.tar.xz, sha256: "
        + "b" * 64
        + "}\n",
        ":6: stack.openmpi.url: no such file: /nonexistent/o.tar.xz",
    ),
]


@pytest.fixture
def write(tmp_path: Path):
    def _write(text: str) -> Path:
        path = tmp_path / "inventory.yaml"
        path.write_text(text)
        return path

    return _write


def test_there_are_enough_cases():
    assert len(CASES) >= 25


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_inventory_is_one_line_per_problem(write, text, expected):
    path = write(text)
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), result.exception
    lines = result.output.strip().splitlines()
    assert lines, "no error printed"
    assert all(line.startswith("error: ") for line in lines), result.output
    assert any(expected in line for line in lines), result.output
    assert "Traceback" not in result.output


def test_every_problem_is_reported_at_once(write):
    path = write(
        "cluster: a\nnodes:\n  - {name: n1, gpus: -1}\n  - {name: 'n;2', slots: 0}\n"
        "ssh: {port: 0}\n"
    )
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 4, result.output
    assert [line.split(": ")[1].split(":")[-1] for line in lines] == ["3", "4", "4", "5"]


def test_identity_with_open_permissions_is_refused(write, tmp_path):
    key = tmp_path / "id_test"
    key.write_text("not really a key")
    key.chmod(0o644)
    path = write(f"cluster: a\nssh: {{identity: {key}}}\nnodes: [{{name: n1}}]\n")
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    assert "permissions 0644 are too open" in result.output


def test_missing_inventory_file(tmp_path):
    result = CliRunner().invoke(app, ["validate", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert result.output.strip() == f"error: {tmp_path / 'nope.yaml'}: no such file"


def test_real_process_prints_no_traceback(write):
    path = write("cluster: a\nnodes:\n  - {name: n1, address: 10.0.0.300}\n")
    done = subprocess.run(
        [sys.executable, "-m", "mpicluster", "validate", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.strip() == (
        f"error: {path}:3: nodes[0].address: '10.0.0.300' is not an IP address or hostname"
    )


@pytest.mark.parametrize("name", ["gpu.yaml", "cpu.yaml"])
def test_shipped_inventories_are_valid(name):
    path = Path(__file__).parents[2] / "inventories" / name
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output


def test_valid_inventory_resolves_node_ssh(write, tmp_path):
    from mpicluster.cluster.inventory import load_inventory

    key = tmp_path / "k"
    key.write_text("x")
    key.chmod(0o600)
    path = write(
        textwrap.dedent(f"""\
        cluster: a
        ssh: {{user: alice, port: 2222}}
        nodes:
          - {{name: n1}}
          - {{name: n2, address: 10.0.0.2, ssh: {{user: bob, identity: {key.name}}}}}
        """)
    )
    inv = load_inventory(path)
    first, second = (inv.node_ssh(n) for n in inv.nodes)
    assert (first.host, first.user, first.port, first.identity) == ("n1", "alice", 2222, None)
    assert (second.host, second.user, second.identity) == ("10.0.0.2", "bob", key)
