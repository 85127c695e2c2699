"""A site's own UCX (stack.ucx.prefix: HPC-X's, DOCA's in /usr) instead of one built into
the stack (issue 54): the inventory's checks, Open MPI's configure line and build spec,
the fingerprint, the nodes' library path, and up's check that every node has it."""

from __future__ import annotations

from pathlib import Path

import pytest

from mpicluster.cluster.inventory import InventoryError, parse_inventory
from mpicluster.nodes import facts as node_facts
from mpicluster.remote.plugins.module_utils import mpicluster_envblock as envblock
from mpicluster.stack import disk_need, recipe, sources
from mpicluster.stack.builds import plan_builds
from mpicluster.stack.fingerprint import fingerprint, platform_of
from mpicluster.stack.prepare import _group_spec, nvml_requirements
from mpicluster.stack.wheels import Wheelhouse
from mpicluster.util.errors import UsageError
from tests.shipped import load
from tests.unit.plans import FACTS, plan_of

DATA = Path(__file__).parent / "data" / "ucx"
NODES = "cluster: t\nnodes:\n  - {name: node1}\n  - {name: node2}\n  - {name: node3}\n"
HPCX = "/opt/hpcx/ucx"
SHA = "a" * 64


def problems(text: str) -> list[str]:
    with pytest.raises(InventoryError) as caught:
        parse_inventory(text, source="inv.yaml")
    return [line.removeprefix("inv.yaml:") for line in caught.value.lines()]


def site(ucx: str, extra: str = "", nodes: str = NODES):
    return plan_of(f"{nodes}stack:\n  ucx: {ucx}\n{extra}")


# --- the inventory --------------------------------------------------------------------


def test_a_prefix_is_an_absolute_folder_and_means_ucx_is_on():
    plan = site("{prefix: /opt/hpcx/ucx/}")
    assert plan.stack.ucx.prefix == HPCX  # as every other path: the trailing / dropped
    # enabled stays "auto", which a prefix makes true whatever the nodes' devices
    assert plan.stack.ucx.enabled == "auto"
    assert sources.ucx_wanted(plan, {"node1": FACTS}) is True
    assert sources.ucx_wanted(site("{prefix: /usr, enabled: true}"), {}) is True
    assert problems(NODES + "stack:\n  ucx: {prefix: opt/hpcx}\n") == [
        "7: stack.ucx.prefix: must be an absolute path (got 'opt/hpcx')"
    ]
    assert problems(NODES + "stack:\n  ucx: {prefix: /opt/hpcx/../ucx}\n") == [
        "7: stack.ucx.prefix: must not contain '..' (name the folder itself) "
        "(got '/opt/hpcx/../ucx')"
    ]
    assert problems(NODES + "stack:\n  ucx: {prefix: /}\n") == [
        "7: stack.ucx.prefix: the root folder holds no UCX (the distribution's UCX: /usr) (got '/')"
    ]


def test_what_contradicts_a_site_ucx_is_said_in_one_pass():
    text = (
        NODES + "stack:\n  ucx:\n    prefix: /opt/hpcx/ucx\n    enabled: false\n"
        f"    version: 1.13.1\n    url: https://example.org/ucx.tar.gz\n    sha256: {SHA}\n"
    )
    nothing_built = "given beside stack.ucx.prefix: the site's UCX is used, no UCX is built"
    assert problems(text) == [
        "9: stack.ucx.enabled: false, but stack.ucx.prefix names a UCX to use: remove one",
        f"10: stack.ucx.version: {nothing_built} (remove version)",
        f"11: stack.ucx.url: {nothing_built} (remove url)",
        f"12: stack.ucx.sha256: {nothing_built} (remove sha256)",
    ]
    # a url alone is not also "needs a sha256 beside it": nothing of UCX is fetched
    assert problems(NODES + "stack:\n  ucx: {prefix: /usr, url: 'https://x.org/u.tgz'}\n") == [
        f"7: stack.ucx.url: {nothing_built} (remove url)"
    ]
    # a prefix that failed still contradicts a version beside it
    assert problems(NODES + "stack:\n  ucx: {prefix: usr, version: 1.20.1}\n") == [
        "7: stack.ucx.prefix: must be an absolute path (got 'usr')",
        f"7: stack.ucx.version: {nothing_built} (remove version)",
    ]
    assert problems(NODES + "stack:\n  install: packages\n  ucx: {prefix: /usr}\n") == [
        "8: stack.ucx.prefix: needs stack.install: source "
        "(the distribution's Open MPI has its own UCX)"
    ]


# --- the build ------------------------------------------------------------------------


def spec_of(plan, facts: dict | None = None) -> dict:
    """The build spec of the plan's one stack group (every node the same platform)."""
    facts = facts or {n.name: FACTS for n in plan.nodes}
    needed = sources.needed(plan, sources.ucx_wanted(plan, facts))
    (group,) = plan_builds(plan, facts, needed, {"cp311-x86_64": "w"}, "r", Path("/c"))
    files = {s.component: Path("/f") for s in needed}
    house = Wheelhouse(Path("/w"), (), {})
    stack_dir = plan.layout.stack_dir(group.fingerprint)
    return _group_spec(plan, stack_dir, group, needed, files, house)


def test_open_mpi_is_configured_against_the_sites_ucx_and_none_is_built():
    off = "  horovod: {enabled: false}\n  pytorch: {enabled: false}\n"
    plan = site("{prefix: /opt/hpcx/ucx}", off)
    assert "ucx" not in [s.component for s in sources.needed(plan, ucx=True)]
    spec = spec_of(plan)
    assert f"--with-ucx={HPCX}" in spec["openmpi_configure_args"]
    assert "--without-ucx" not in spec["openmpi_configure_args"]
    # nothing of UCX is built (build_deps then skips UCX's autotools and rdma headers)
    assert spec["ucx"] is None and "ucx" not in spec["sources"]
    assert spec["site_ucx"] == HPCX
    # the builder's runs of the new Open MPI (ompi_info, mpi4py) load the site's libucp
    assert spec["build_env"] == {"LD_LIBRARY_PATH": f"{HPCX}/lib"}
    assert disk_need.installed_gib(spec) == disk_need.INSTALLED["mpi"]  # no UCX in the tree
    # the distribution's UCX: no folder to Open MPI's configure, nothing to add to the path
    usr = spec_of(site("{prefix: /usr}", off))
    assert "--with-ucx" in usr["openmpi_configure_args"]
    assert (usr["site_ucx"], usr["build_env"]) == ("/usr", {})
    # the stack's own UCX as before
    built = spec_of(site("{enabled: true}", off))
    assert built["ucx"]["version"] and built["site_ucx"] is None and built["build_env"] == {}
    stack_dir = next(a for a in built["openmpi_configure_args"] if a.startswith("--prefix="))
    assert f"--with-ucx={stack_dir.removeprefix('--prefix=')}" in built["openmpi_configure_args"]


def test_the_configure_option_for_each_ucx():
    five = sources.needed(plan_of(NODES))[0]
    assert five.component == "openmpi"

    def option(ucx: str | None) -> list[str]:
        args = recipe.openmpi_configure_args(five, "/p", cuda_home=None, fortran=False, extra=[])
        with_ucx = recipe.openmpi_configure_args(
            five, "/p", cuda_home=None, fortran=False, extra=[], ucx=ucx
        )
        return [a for a in with_ucx if a not in args]

    assert option(HPCX) == [f"--with-ucx={HPCX}"]
    assert option("/usr/local") == ["--with-ucx=/usr/local"]
    assert option("/usr") == ["--with-ucx"]  # Debian's multiarch folder: pkg-config finds it
    assert option(None) == []  # --without-ucx, as before


def test_a_site_ucx_needs_no_nvml_header_for_ucxs_cuda_support():
    gpus = "cluster: t\nnodes:\n  - {name: a, gpus: 1}\n"
    platforms = [platform_of(FACTS | {"cuda": "13.0"}, plan_of(gpus), 1)]
    assert nvml_requirements(plan_of(gpus), platforms) == ["nvidia-nvml-dev==13.0.*"]
    hpcx = site("{prefix: /opt/hpcx/ucx}", nodes=gpus)
    assert nvml_requirements(hpcx, platforms) == []


def test_the_sites_ucx_and_its_folder_are_in_the_fingerprint():
    def fp(plan) -> str:
        needed = sources.needed(plan, sources.ucx_wanted(plan, {}))
        return fingerprint(platform_of(FACTS, plan, 0), needed, plan, "w", "r")[0]

    hpcx, usr = site(f"{{prefix: {HPCX}}}"), site("{prefix: /usr}")
    built, without = site("{enabled: true}"), site("{enabled: false}")
    prints = {fp(p) for p in (hpcx, usr, built, without)}
    assert len(prints) == 4  # each another build
    assert fp(site("{prefix: /opt/hpcx-2.21/ucx}")) != fp(hpcx)
    assert fp(site(f"{{prefix: {HPCX}/}}")) == fp(hpcx)  # the same folder
    # without a site's UCX the document is as it was: no key for it
    needed = sources.needed(built, True)
    document = fingerprint(platform_of(FACTS, built, 0), needed, built, "w", "r")[1]
    assert "ucx" not in document["options"] and "ucx" in document["sources"]
    document = fingerprint(platform_of(FACTS, hpcx, 0), [], hpcx, "w", "r")[1]
    assert document["options"]["ucx"] == {"prefix": HPCX}


# --- the nodes' environment -----------------------------------------------------------


def test_the_sites_ucx_library_folder_is_on_the_nodes_library_path():
    layout = site(f"{{prefix: {HPCX}}}").layout
    assert layout.library_dirs == ["/opt/mpicluster/current/lib", f"{HPCX}/lib"]
    assert layout.as_vars()["library_dirs"] == layout.library_dirs  # ld.so.conf's too
    block = envblock.render(
        "", "# BEGIN", "# END", layout.path_dirs, layout.library_dirs, {}, ["/usr/bin"]
    )
    assert f'LD_LIBRARY_PATH="/opt/mpicluster/current/lib:{HPCX}/lib"' in block
    assert f'LD_LIBRARY_PATH="/opt/mpicluster/current/lib:{HPCX}/lib' in layout.shell_exports({})
    # doctor and the smoke test judge a login's environment by the same folders
    assert layout.missing_dirs(None, "/opt/mpicluster/current/lib")[1] == [f"{HPCX}/lib"]
    # beside the CUDA toolkit's
    gpus = site(f"{{prefix: {HPCX}}}", nodes="cluster: t\nnodes:\n  - {name: a, gpus: 1}\n")
    assert gpus.layout.library_dirs[-2:] == ["/usr/local/cuda/lib64", f"{HPCX}/lib"]
    # the distribution's (/usr) is in the dynamic linker's own folders; /usr/local/lib is
    # named (Red Hat's linker does not look there)
    assert site("{prefix: /usr}").layout.library_dirs == ["/opt/mpicluster/current/lib"]
    assert site("{prefix: /usr/local}").layout.library_dirs[-1] == "/usr/local/lib"
    assert plan_of(NODES).layout.library_dirs == ["/opt/mpicluster/current/lib"]


def test_ucx_info_is_where_the_stacks_ucx_is():
    assert site(f"{{prefix: {HPCX}}}").layout.ucx_info == f"{HPCX}/bin/ucx_info"
    assert site("{prefix: /usr}").layout.ucx_info == "/usr/bin/ucx_info"
    assert plan_of(NODES).layout.ucx_info == "/opt/mpicluster/current/bin/ucx_info"
    packages = plan_of(NODES + "stack: {install: packages}\n")
    assert packages.layout.ucx_info == "/usr/bin/ucx_info"


def test_the_nodes_health_check_builds_the_same_layout_from_ups_record():
    from mpicluster.up.provision import health_record

    plan = site(f"{{prefix: {HPCX}}}")
    health = load("health")
    record = health_record(plan, {"node1": 1, "node2": 1, "node3": 1})
    rebuilt = health.layout_of(record)
    assert rebuilt.library_dirs == plan.layout.library_dirs
    assert rebuilt.site_ucx == HPCX
    # a record an older up wrote has no site_ucx: the layout without one
    del record["layout"]["site_ucx"]
    assert health.layout_of(record) == plan_of(NODES).layout


# --- up's check that every node has it ------------------------------------------------


def debian_tree(root: Path) -> Path:
    """libucx0's files (dpkg -L on Debian 12, tests/unit/data/ucx) under `root`: a node
    with Debian's UCX run-time package and not its development one."""
    for line in (DATA / "dpkg-L-libucx0.txt").read_text().splitlines():
        path = root / line.lstrip("/")
        if ".so" in path.name:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
    return root / "usr"


def test_the_probe_finds_libucp_in_lib_lib64_or_the_multiarch_folder(tmp_path):
    nodeinfo = load("nodeinfo")
    usr = debian_tree(tmp_path / "debian")
    assert nodeinfo.site_ucx(str(usr)) == {
        "prefix": str(usr),
        "libucp": f"{usr}/lib/x86_64-linux-gnu/libucp.so.0",
    }
    hpcx = tmp_path / "hpcx" / "ucx"
    (hpcx / "lib").mkdir(parents=True)
    assert nodeinfo.site_ucx(str(hpcx))["libucp"] is None
    (hpcx / "lib" / "libucp.so.0").touch()
    assert nodeinfo.site_ucx(str(hpcx))["libucp"] == f"{hpcx}/lib/libucp.so.0"
    assert nodeinfo.site_ucx(str(tmp_path / "none")) == {
        "prefix": str(tmp_path / "none"),
        "libucp": None,
    }


def test_the_probe_says_so_when_up_names_a_site_ucx(tmp_path):
    """The probe as `up` runs it (remote.script, on stdin), MPICLUSTER_SITE_UCX set."""
    import json
    import os
    import subprocess
    import sys

    from mpicluster import remote

    def probe(**env: str) -> dict:
        argv = [sys.executable, "-", str(tmp_path / "mpicluster"), str(tmp_path / "cuda")]
        done = subprocess.run(
            argv,
            input=remote.script("nodeinfo"),
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, **env},
            timeout=60,
        )
        return json.loads(done.stdout)

    usr = str(debian_tree(tmp_path))
    assert probe(MPICLUSTER_SITE_UCX=usr)["site_ucx"]["libucp"].endswith("libucp.so.0")
    assert "site_ucx" not in probe()


def test_up_stops_before_any_change_where_a_node_lacks_the_sites_ucx(tmp_path):
    nodeinfo = load("nodeinfo")
    usr = str(debian_tree(tmp_path))
    plan = site(f"{{prefix: {HPCX}}}")
    has = {"site_ucx": {"prefix": HPCX, "libucp": f"{HPCX}/lib/libucp.so.0"}}
    lacks = {"site_ucx": nodeinfo.site_ucx(str(tmp_path / "opt/hpcx/ucx"))}
    node_facts.check_site_ucx(plan, {"node1": has, "node2": has, "node3": has})
    with pytest.raises(UsageError) as caught:
        node_facts.check_site_ucx(plan, {"node1": has, "node2": lacks, "node3": has})
    assert caught.value.message == (
        "stack.ucx.prefix: node2 has no /opt/hpcx/ucx/lib/libucp.so*: install the site's "
        "UCX there on every node, or remove stack.ucx.prefix to build UCX"
    )
    assert caught.value.exit_code == 2
    with pytest.raises(UsageError, match=r"node1 has no .* \(and 2 more node\(s\)\): install"):
        node_facts.check_site_ucx(plan, {"node1": lacks, "node2": {}})
    # Debian's libucx0 (no development link) is a site's UCX too
    debian = {"site_ucx": nodeinfo.site_ucx(usr)}
    node_facts.check_site_ucx(
        site("{prefix: /usr}"), dict.fromkeys(("node1", "node2", "node3"), debian)
    )
    # no prefix, nothing to check (a probe asked nothing)
    node_facts.check_site_ucx(plan_of(NODES), {"node1": {}, "node2": {}, "node3": {}})


def test_the_probe_is_asked_about_the_sites_ucx_only_when_there_is_one(monkeypatch):
    from mpicluster.nodes import transport

    commands = []

    def run_everywhere(plan, command, **_):
        commands.append(command)
        return {}

    monkeypatch.setattr(transport, "run_everywhere", run_everywhere)
    node_facts.gather(site(f"{{prefix: {HPCX}}}"))
    node_facts.gather(plan_of(NODES))
    assert commands[0].startswith(f"MPICLUSTER_SITE_UCX={HPCX} ")
    assert "MPICLUSTER_SITE_UCX" not in commands[1]


def test_ups_plan_says_the_stack_is_built_against_the_sites_ucx():
    from mpicluster.stack.prepare import StackPlan
    from mpicluster.up.provision import describe_plan

    plan = site(f"{{prefix: {HPCX}}}", "  horovod: {enabled: false}\n  pytorch: {enabled: false}\n")
    facts = {n.name: FACTS for n in plan.nodes}
    (group,) = plan_builds(
        plan, facts, sources.needed(plan, True), {"cp311-x86_64": "w"}, "r", Path("/c")
    )
    spec = spec_of(plan, facts)
    lines = describe_plan(
        StackPlan([group], {"mpicluster_stack_groups": {group.fingerprint: spec}})
    )
    assert lines == [
        f"Stack {group.fingerprint} (debian-12, x86_64): build on node1, then install on "
        "node1, node2, node3",
        f"Stack {group.fingerprint}: Open MPI built against the site's UCX in {HPCX} "
        "(stack.ucx.prefix)",
    ]
