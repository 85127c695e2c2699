"""Generated inventories (hypothesis): whatever the file holds, the loader either
returns a valid Inventory whose names are safe on a command line, or raises
InventoryError, which `validate` prints as one `error: FILE:LINE: ...` line per
problem with exit 2 and no traceback. Never another exception.
"""

from __future__ import annotations

import copy
import os
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from mpicluster.cli import app
from mpicluster.cluster.inventory import Inventory, InventoryError, load_inventory
from mpicluster.cluster.validators import SHELL_METACHARACTERS
from mpicluster.cluster.yamlsource import format_loc
from tests.unit.ssh_keys import ED25519

#: The same examples on every run (CI must not fail by chance); MPICLUSTER_HYPOTHESIS=explore
#: draws new ones each time, for hunting.
EXPLORE = os.environ.get("MPICLUSTER_HYPOTHESIS") == "explore"
SETTINGS = settings(
    max_examples=1000 if EXPLORE else 200,
    deadline=None,
    derandomize=not EXPLORE,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

HOSTILE_TEXT = [
    "",
    " ",
    "a b",
    "$(touch /tmp/pwned)",
    "`id`",
    ";rm -rf x",
    "&& reboot",
    "| nc host 1",
    "'",
    '"',
    "\\",
    "x\ny",
    "x\x00y",
    "\t",
    "*",
    "~root",
    "-rf",
    "--help",
    "a=b",
    "#comment",
    "ünï€ødé",
    "\u202eevil",
    "../../etc/passwd",
    "/opt/../x",
    "n1",
    "eth0",
    "10.0.0.1",
    "::1",
    "0" * 300,
    "yes",
    "null",
    "auto",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([0, -1, 1, 2**31, 2**63, -(2**63), 10**40, 65536, 4097]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(HOSTILE_TEXT),
)
KEYS = [
    "cluster",
    "nodes",
    "ssh",
    "network",
    "stack",
    "sources",
    "name",
    "address",
    "gpus",
    "slots",
    "user",
    "port",
    "identity",
    "known_hosts",
    "interface",
    "cidr",
    "prefix",
    "openmpi",
    "version",
    "url",
    "sha256",
    "users",
    "keys",
    "uid",
    "groups",
    "sudo",
]
keys = st.one_of(st.sampled_from(KEYS), st.text(max_size=12), st.integers(-3, 3), st.booleans())
documents = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=5)
    ),
    max_leaves=25,
)
# Mostly mappings with the inventory's own keys: those go deepest into the validation.
top_levels = st.one_of(
    documents,
    st.dictionaries(st.sampled_from(KEYS[:6]), documents, max_size=6),
    st.fixed_dictionaries(
        {"cluster": documents, "nodes": st.lists(st.dictionaries(keys, documents), max_size=3)}
    ),
)

VALID = {
    "cluster": "test",
    "ssh": {"user": "alice", "port": 22, "connect_timeout": 10, "become": True},
    "network": {"interface": "eth0"},
    "nodes": [
        {"name": "n1", "address": "10.0.0.1", "gpus": 0, "slots": 2, "ssh": {"user": "bob"}},
        {"name": "n2.example.org", "gpus": 1},
    ],
    "stack": {
        "install": "source",
        "prefix": "/opt/mpicluster",
        "cuda_home": "/usr/local/cuda",
        "openmpi": {"cuda": "auto", "configure_args": ["--enable-debug"]},
        "nccl": {"cuda_archs": ["9.0"]},
        "pytorch": {"enabled": True, "nccl": "wheel"},
    },
    "sources": {"cache": "~/.cache/x", "artifacts": "/srv/artifacts"},
    "users": [{"name": "carol", "uid": 2001, "keys": [ED25519], "groups": ["video"]}],
}
FIELDS = [
    ("cluster",),
    ("ssh",),
    ("ssh", "user"),
    ("ssh", "port"),
    ("ssh", "connect_timeout"),
    ("ssh", "become"),
    ("ssh", "identity"),
    ("ssh", "known_hosts"),
    ("ssh", "accept_new_host_keys"),
    ("network",),
    ("network", "interface"),
    ("network", "cidr"),
    ("nodes",),
    ("nodes", 0),
    ("nodes", 0, "name"),
    ("nodes", 0, "address"),
    ("nodes", 0, "gpus"),
    ("nodes", 0, "slots"),
    ("nodes", 0, "ssh"),
    ("nodes", 0, "ssh", "user"),
    ("nodes", 0, "ssh", "port"),
    ("nodes", 0, "ssh", "identity"),
    ("nodes", 1, "name"),
    ("nodes", 1, "address"),
    ("stack", "install"),
    ("stack", "prefix"),
    ("stack", "cuda_home"),
    ("stack", "openmpi", "cuda"),
    ("stack", "openmpi", "version"),
    ("stack", "openmpi", "url"),
    ("stack", "openmpi", "configure_args"),
    ("stack", "nccl", "cuda_archs"),
    ("stack", "nccl", "only_funcs"),
    ("stack", "pytorch", "nccl"),
    ("stack", "horovod", "frameworks"),
    ("sources", "cache"),
    ("sources", "mirror"),
    ("users",),
    ("users", 0),
    ("users", 0, "name"),
    ("users", 0, "uid"),
    ("users", 0, "keys"),
    ("users", 0, "keys", 0),
    ("users", 0, "groups"),
    ("users", 0, "sudo"),
    ("unknown",),
]
odd_values = st.one_of(
    scalars,
    st.lists(scalars, max_size=3),
    st.dictionaries(st.sampled_from(KEYS), scalars, max_size=3),
    st.sampled_from(HOSTILE_TEXT).map(lambda t: "/opt/" + t),
    st.sampled_from(HOSTILE_TEXT).map(lambda t: "n1" + t),
)


@pytest.fixture(scope="module")
def folder():
    with tempfile.TemporaryDirectory() as name:
        yield Path(name)


def with_value(path: tuple, value) -> dict:
    data = copy.deepcopy(VALID)
    target = data
    for part in path[:-1]:
        target = target.setdefault(part, {}) if isinstance(part, str) else target[part]
    target[path[-1]] = value
    return data


#: What an inventory that loads may put on a command line unquoted.
def unquoted_values(inv: Inventory) -> list[str]:
    values = [inv.cluster, inv.stack.prefix, inv.stack.cuda_home]
    values += [v for v in (inv.ssh.user, inv.network.interface, inv.network.cidr) if v]
    for node in inv.nodes:
        values += [node.name, node.host] + ([node.ssh.user] if node.ssh.user else [])
    for user in inv.users:
        values += [user.name, *user.groups]
    return values


def check(path: Path) -> None:
    """The property, for the file at `path`: the loader's answer and the CLI's."""
    try:
        inv = load_inventory(path)
    except InventoryError as exc:
        assert exc.problems
        lines = exc.lines()
        for line, problem in zip(lines, exc.problems, strict=True):
            assert line.startswith(f"{path}:{problem.line}: "), line
            assert isinstance(problem.line, int) and problem.line >= 1, line
            assert "\n" not in line and "\r" not in line, repr(line)
        loaded = False
    else:
        assert isinstance(inv, Inventory) and inv.nodes
        for value in unquoted_values(inv):
            assert not SHELL_METACHARACTERS & set(value), value
            assert value.isprintable(), value
        loaded = True

    result = CliRunner().invoke(app, ["validate", str(path)])
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit | None), repr(result.exception)
    if loaded:
        assert result.exit_code == 0, result.output
        return
    assert result.exit_code == 2, result.output
    out = result.output.strip().splitlines()
    assert out and len(out) == len(lines), result.output
    for line in out:
        assert line.startswith(f"error: {path}:"), line
        assert line.removeprefix(f"error: {path}:").split(":")[0].isdigit(), line


@SETTINGS
@given(document=top_levels)
def test_generated_yaml_documents(folder, document):
    path = folder / "generated.yaml"
    path.write_text(yaml.safe_dump(document, allow_unicode=True), encoding="utf-8")
    check(path)


@SETTINGS
@given(text=st.text(alphabet=st.characters(codec="utf-8"), max_size=200))
def test_generated_text(folder, text):
    path = folder / "text.yaml"
    path.write_text(text, encoding="utf-8")
    check(path)


@SETTINGS
@given(data=st.binary(max_size=200))
def test_generated_bytes(folder, data):
    path = folder / "bytes.yaml"
    path.write_bytes(data)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        with pytest.raises(InventoryError) as caught:
            load_inventory(path)
        assert caught.value.lines() == [f"{path}: cannot read: not UTF-8 text"]
        return
    check(path)


@SETTINGS
@given(field=st.sampled_from(FIELDS), value=odd_values)
def test_one_field_replaced(folder, field, value):
    path = folder / "replaced.yaml"
    path.write_text(yaml.safe_dump(with_value(field, value), allow_unicode=True), "utf-8")
    check(path)
    try:
        load_inventory(path)
    except InventoryError as exc:
        # the problem is reported where it is (or at the mapping that holds it)
        assert any(format_loc(p.loc).startswith(str(field[0])) for p in exc.problems), exc.lines()


def test_the_valid_inventory_is_valid(folder):
    path = folder / "valid.yaml"
    path.write_text(yaml.safe_dump(VALID))
    assert load_inventory(path).cluster == "test"


def test_line_100_is_not_an_emoji(folder):
    """Found by the generated documents: Rich read `:100:` in `FILE:100: ...` as an
    emoji code; every line number must print as itself."""
    path = folder / "long.yaml"
    path.write_text("cluster: a\nnodes: [{name: n1}]\n" + "\n" * 97 + "bogus: 1\n")
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"error: {path}:100: bogus: unknown key (expected one of: cluster, ssh, network, "
        "mpi, nodes, stack, python, sources, scheduler, health, users)"
    )
