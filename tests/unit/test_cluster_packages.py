"""The cluster's own Python packages (python.requirements): requirement lines read and
refused, conflicts with the stack's packages named with both pins (before any
download), pip's resolution for the nodes' platform (real pip, from PyPI), and the
Ansible module that installs a resolution beside the stack's Python: real wheels, a
real pip, a real --target folder here (no node)."""

from __future__ import annotations

import importlib.util
import json
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from mpicluster.cluster import requirements as lines_of
from mpicluster.cluster.inventory import InventoryError, load_inventory
from mpicluster.stack import cluster_packages, wheels
from mpicluster.stack.fingerprint import Platform
from mpicluster.util.errors import UsageError

REPO = Path(__file__).resolve().parents[2]


def load_module():
    path = REPO / "mpicluster" / "remote" / "plugins" / "modules" / "mpicluster_cluster_packages.py"
    spec = importlib.util.spec_from_file_location("mpicluster_cluster_packages", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


module = load_module()


def test_a_requirements_file_gives_its_requirement_lines_with_their_numbers():
    text = (
        "# the job's\nsix==1.16.0  # pure Python\n\n"
        "msgpack>=1.0 ; python_version >= '3.8'\nrequests\\\n  [socks]==2.32.3\n"
    )
    found = lines_of.lines_of(text)
    assert [(line.number, line.text) for line in found] == [
        (2, "six==1.16.0"),
        (4, "msgpack>=1.0 ; python_version >= '3.8'"),
        (5, "requests [socks]==2.32.3"),
    ]
    assert lines_of.names([line.text for line in found]) == ["six", "msgpack", "requests"]


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("-r other.txt", "pip options are not read here"),
        ("--index-url https://example.org/simple", "pip options are not read here"),
        ("-e .", "pip options are not read here"),
        ("torch @ https://example.org/torch.whl", "a direct URL"),
        ("not a requirement!", "not a requirement"),
    ],
)
def test_what_is_not_a_requirement_line_is_named(line, words):
    assert words in lines_of.problem_of(line)


def inventory(tmp_path: Path, python: dict, install: str = "source") -> Path:
    path = tmp_path / "inv.yaml"
    data = {
        "cluster": "c",
        "nodes": [{"name": "n1", "address": "10.0.0.1"}],
        "stack": {"install": install},
        "python": python,
    }
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_inventory_takes_a_list_or_a_file_and_names_each_bad_line(tmp_path):
    inv = load_inventory(inventory(tmp_path, {"requirements": ["six==1.16.0", "msgpack"]}))
    assert inv.python_requirements() == ["six==1.16.0", "msgpack"]
    (tmp_path / "reqs.txt").write_text("six==1.16.0\n-e .\n")
    with pytest.raises(InventoryError) as raised:
        load_inventory(inventory(tmp_path, {"requirements": "reqs.txt"}))
    assert raised.value.lines() == [
        f"{tmp_path / 'inv.yaml'}:6: python.requirements: {tmp_path / 'reqs.txt'}:2: "
        "pip options are not read here, only requirement lines: '-e .'"
    ]
    (tmp_path / "reqs.txt").write_text("six==1.16.0\n")
    assert load_inventory(
        inventory(tmp_path, {"requirements": "reqs.txt"})
    ).python_requirements() == ["six==1.16.0"]
    with pytest.raises(InventoryError, match=r"needs stack\.install: source"):
        load_inventory(inventory(tmp_path, {"requirements": ["six"]}, install="packages"))
    with pytest.raises(InventoryError, match="cannot read"):
        load_inventory(inventory(tmp_path, {"requirements": "missing.txt"}))
    with pytest.raises(InventoryError, match="not a requirement"):
        load_inventory(inventory(tmp_path, {"requirements": ["six=="]}))


def test_a_pin_against_the_stacks_own_package_is_refused_naming_both():
    pins = {"numpy": "2.3.1", "torch": "2.9.0+cpu", "mpi4py": "4.1.2"}
    lines = ["numpy==1.26.4", "six", "torch>=2.4", "mpi4py<4"]
    assert cluster_packages.conflicts(lines, pins) == [
        "'numpy==1.26.4' conflicts with the stack's numpy==2.3.1",
        "'mpi4py<4' conflicts with the stack's mpi4py==4.1.2",
    ]
    with pytest.raises(UsageError) as raised:
        cluster_packages.refuse_conflicts(lines, pins)
    assert str(raised.value.message).startswith(
        "python.requirements: 'numpy==1.26.4' conflicts with the stack's numpy==2.3.1 (and 1 more)"
    )
    assert cluster_packages.conflicts(["Numpy>=2", "torch"], pins) == []


def test_the_stacks_pins_are_its_wheels_and_what_it_builds(tmp_path):
    house = wheels.Wheelhouse(
        tmp_path,
        ("numpy",),
        {
            "numpy-2.3.1-cp311-cp311-manylinux_2_28_x86_64.whl": "0" * 64,
            "PyYAML-6.0.2-cp311-cp311-manylinux_2_17_x86_64.whl": "1" * 64,
            "not-a-wheel.tar.gz": "2" * 64,
        },
    )
    assert cluster_packages.stack_pins(house, {"mpi4py": "4.1.2", "Horovod": "0.28.1"}) == {
        "horovod": "0.28.1",
        "mpi4py": "4.1.2",
        "numpy": "2.3.1",
        "pyyaml": "6.0.2",
    }


def test_pip_resolves_for_the_nodes_platform_and_names_a_conflict_it_finds(tmp_path):
    """Real pip, from PyPI: a small package with a dependency, for CPython 3.11 on
    x86_64 whatever this machine runs; the stack's pin of that dependency kept; the
    same resolution asked again is the cache's; a dependency the stack pins to a
    version the package refuses is a conflict pip explains."""
    platform = Platform.for_wheels("3.11", "x86_64")
    said: list[str] = []
    pins = {"six": "1.16.0"}
    found = cluster_packages.resolve(
        tmp_path, platform, ["python-dateutil==2.9.0.post0"], pins, said.append
    )
    assert found.install == {"python-dateutil": "2.9.0.post0"}  # six is the stack's
    assert list(found.files) == ["python_dateutil-2.9.0.post0-py2.py3-none-any.whl"]
    manifest = json.loads((found.path / "manifest.json").read_text())
    assert manifest["asked"] == {"requirements": ["python-dateutil==2.9.0.post0"], "pins": pins}
    again = cluster_packages.resolve(
        tmp_path, platform, ["python-dateutil==2.9.0.post0"], pins, said.append
    )
    assert (again.digest, len(said)) == (found.digest, 1)  # no second download
    with pytest.raises(UsageError) as raised:
        cluster_packages.resolve(
            tmp_path, platform, ["requests==2.32.3"], {"urllib3": "1.20"}, said.append
        )
    assert "conflict with the stack's packages" in raised.value.message
    assert "urllib3" in raised.value.message and "nothing was installed" in raised.value.message
    with pytest.raises(UsageError, match="has neither a wheel for the nodes' Python nor a"):
        cluster_packages.resolve(
            tmp_path, platform, ["no-such-project-mpicluster-test==1.0"], {}, said.append
        )
    offline = cluster_packages.resolve
    with pytest.raises(Exception, match="missing or stale"):
        offline(tmp_path / "empty", platform, ["six"], {}, said.append, offline=True)


def make_wheel(folder: Path, name: str, version: str, module_text: str) -> Path:
    """A real (minimal) wheel: one module, its dist-info with METADATA, WHEEL, RECORD."""
    dist = f"{name}-{version}.dist-info"
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr(f"{name}.py", module_text)
        whl.writestr(
            f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        )
        whl.writestr(
            f"{dist}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        whl.writestr(
            f"{dist}/RECORD", f"{name}.py,,\n{dist}/METADATA,,\n{dist}/WHEEL,,\n{dist}/RECORD,,\n"
        )
    return path


def test_the_module_installs_the_difference_switches_and_takes_back(tmp_path):
    wheels_dir = tmp_path / "wheels"
    wheels_dir.mkdir()
    for name, version in (("alpha", "1.0"), ("beta", "1.0"), ("beta", "2.0"), ("gamma", "1.0")):
        make_wheel(wheels_dir, name, version, f"VERSION = {version!r}\n")
    root, site = tmp_path / "python", tmp_path / "site"
    site.mkdir()
    params = {
        "root": str(root),
        "digest": "d1",
        "install": {"alpha": "1.0", "beta": "1.0"},
        "wheels": str(wheels_dir),
        "python": sys.executable,
        "site": str(site),
        "pth": "mpicluster-cluster-packages.pth",
    }
    added, removed = module.make(params, None)
    module.switch(str(root), "d1")
    assert (sorted(added), removed) == (["alpha", "beta"], [])
    assert (site / params["pth"]).exists() is False  # main() writes it; here: the parts
    assert module.write_pth(str(site), params["pth"], str(root)) is True
    assert (site / params["pth"]).read_text() == f"{root}/current\n"
    assert module.write_pth(str(site), params["pth"], str(root)) is False
    # beta moves to 2.0, alpha goes, gamma comes: only beta and gamma are installed
    params |= {"digest": "d2", "install": {"beta": "2.0", "gamma": "1.0"}}
    added, removed = module.make(params, str(root / "d1"))
    module.switch(str(root), "d2")
    assert (sorted(added), sorted(removed)) == (["beta", "gamma"], ["alpha", "beta"])
    assert sorted(p.name for p in root.iterdir()) == ["current", "d2"]
    current = root / "current"
    assert (current / "beta.py").read_text() == "VERSION = '2.0'\n"
    assert not (current / "alpha.py").exists() and not (current / "alpha-1.0.dist-info").exists()
    assert sorted(module.installed(str(current))) == ["beta", "gamma"]
    assert module.active_digest(str(root)) == "d2"


def test_the_layout_puts_the_packages_programs_after_the_stacks_and_down_takes_them(tmp_path):
    from mpicluster.cluster.layout import Layout

    plain = Layout.of(load_inventory(inventory(tmp_path, {})))
    assert plain.path_dirs == ["/opt/mpicluster/current/bin", "/opt/mpicluster/current/venv/bin"]
    layout = Layout.of(load_inventory(inventory(tmp_path, {"requirements": ["six"]})))
    assert layout.path_dirs == [*plain.path_dirs, "/opt/mpicluster/python/current/bin"]
    (entry,) = [e for e in layout.footprint("c") if e["path"] == "/opt/mpicluster/python"]
    assert entry == {"path": "/opt/mpicluster/python", "kind": "tree", "stack": True}
    assert layout.as_vars()["cluster_packages"] == "/opt/mpicluster/python"


def test_which_nodes_lack_the_packages_is_not_an_input_of_the_record():
    """The same packages make the same inputs whether a node still lacks them or not:
    a no-op `up` stays one once they are everywhere."""
    from mpicluster.up import applied

    assert {"mpicluster_packages_needed", "mpicluster_packages_relay"} <= set(
        applied.NOT_HOST_INPUTS
    )
    assert "mpicluster_python_packages" not in applied.NOT_INPUTS


def test_an_archives_sha256_is_taken_once_and_kept_beside_it(tmp_path):
    from mpicluster.stack.cache import sha256_of

    folder = tmp_path / "house"
    folder.mkdir()
    make_wheel(folder, "alpha", "1.0", "")
    archive = wheels.archive_of(folder, ["alpha-1.0-py3-none-any.whl"], "0123456789abcdef")
    digest = wheels.archive_sha256(archive)
    assert digest == sha256_of(archive)
    kept = archive.with_name(archive.name + ".sha256")
    kept.write_text("kept\n")  # read back, not taken again
    assert wheels.archive_sha256(archive) == "kept"


def test_a_package_with_only_a_source_is_built_once_here_and_a_compiled_one_refused(tmp_path):
    """docopt 0.6.2 is on PyPI only as an sdist (pure Python): built here into a wheel the
    nodes install, its sdist's sha256 kept; simplejson 3.0.0 (an sdist with C code)
    would build for this machine, not the nodes: refused, named."""
    platform = Platform.for_wheels("3.11", "x86_64")
    said: list[str] = []
    found = cluster_packages.resolve(tmp_path, platform, ["docopt==0.6.2"], {}, said.append)
    assert found.install == {"docopt": "0.6.2"}
    (wheel,) = found.files
    assert wheel.startswith("docopt-0.6.2-") and wheel.endswith("-none-any.whl")
    manifest = json.loads((found.path / "manifest.json").read_text())
    assert list(manifest["sources"]) == ["docopt-0.6.2.tar.gz"]
    assert len(manifest["sources"]["docopt-0.6.2.tar.gz"]) == 64
    kept = sorted(p.name for p in found.path.iterdir() if not p.name.startswith("."))
    assert kept == sorted([wheel, "manifest.json"])  # no sdist, no build folder left
    assert any("Building docopt==0.6.2 from its source" in line for line in said), said
    with pytest.raises(UsageError, match=r"simplejson==3\.0\.0 comes only as source and compiles"):
        cluster_packages.resolve(
            tmp_path / "compiled", platform, ["simplejson==3.0.0"], {}, said.append
        )
