"""Pure logic of source installs: lockfile resolution, the cache, recipes, plans."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from mpicluster.cluster import lockfile
from mpicluster.cluster.lockfile import Debian, LockfileError, Pypi, Url, resolve
from mpicluster.stack import cache as cache_module
from mpicluster.stack import recipe, sources
from mpicluster.stack.builds import plan_builds
from mpicluster.stack.cache import ChecksumMismatch, SourceCache
from mpicluster.stack.fingerprint import Platform, fingerprint, platform_of
from mpicluster.stack.prepare import _group_spec, nvml_requirements, platforms_unasked
from mpicluster.stack.wheels import Wheelhouse
from mpicluster.util.errors import MpiclusterError, UsageError
from tests.unit.plans import FACTS, plan_of


def test_lockfile_pins_every_release_with_a_sha256():
    lock = lockfile.lockfile()
    for component in lockfile.COMPONENTS:
        entry = lock[component]
        assert str(entry["default"]) in {str(v) for v in entry["releases"]}
        for release in entry["releases"].values():
            for pin in [release, *release.get("alternates", [])]:
                assert len([k for k in ("url", "pypi", "debian") if k in pin]) == 1, pin
                assert len(pin["sha256"]) == 64
                if "url" in pin:
                    assert pin["url"].startswith("https://")
                else:
                    assert pin["filename"]
    for release in lock["openmpi"]["releases"].values():
        assert release["url"].startswith("https://download.open-mpi.org/release/open-mpi/v")


def test_lockfile_names_no_package_registry_host():
    """sdists come through pip, Debian files through apt: the user's configuration picks
    the index or mirror, so no registry's host is written down anywhere in mpicluster."""
    package = Path(sources.__file__).resolve().parents[1]
    for path in [*package.rglob("*.py"), *package.rglob("*.yaml")]:
        text = path.read_text()
        for host in ("pythonhosted", "pypi.org", "deb.debian.org"):
            assert host not in text, f"{path} names {host}"


def test_pinned_sources_come_through_the_ecosystems_own_tools():
    mpi4py = lockfile.resolve("mpi4py", None, None, None)
    assert mpi4py.origin == Pypi("mpi4py", "4.1.2")
    assert mpi4py.filename == "mpi4py-4.1.2.tar.gz" and mpi4py.url == ""
    horovod = lockfile.resolve("horovod", "0.28.1", None, None)
    assert horovod.origin.requirement == "horovod==0.28.1"
    openmpi = lockfile.resolve("openmpi", "4.1.4", None, None)
    assert openmpi.origin == Url(
        "https://download.open-mpi.org/release/open-mpi/v4.1/openmpi-4.1.4.tar.bz2"
    )
    (debian,) = openmpi.alternates
    assert debian.origin == Debian("openmpi", "4.1.4-3", "bookworm")
    assert debian.filename == "openmpi_4.1.4.orig.tar.xz"
    assert (debian.component, debian.version) == ("openmpi", "4.1.4")


def test_series_resolves_to_the_newest_pinned_release():
    assert lockfile.resolve("openmpi", "4.1.x", None, None).version == "4.1.8"
    assert lockfile.resolve("openmpi", "5.0.x", None, None).version == "5.0.10"
    # the default is the release CI builds (from Debian's copy of its tree), not the newest
    default = lockfile.resolve("openmpi", None, None, None)
    assert default.version == "5.0.7"
    (debian,) = default.alternates
    assert debian.origin == Debian("openmpi", "5.0.7-1", "trixie")
    assert lockfile.resolve("nccl", "2.29.x", None, None).filename == "nccl-2.29.7-1.tar.gz"
    with pytest.raises(UsageError, match="not pinned"):
        lockfile.resolve("openmpi", "4.1.5", None, None)


def test_an_unresolvable_version_is_a_structured_error_the_inventory_reports():
    with pytest.raises(LockfileError) as caught:
        lockfile.resolve("openmpi", "3.x", None, None)
    assert caught.value.field == "stack.openmpi.version"
    assert caught.value.reason.startswith("no pinned openmpi release in 3.x (pinned: 4.1.4,")
    assert caught.value.message == f"{caught.value.field}: {caught.value.reason}"
    with pytest.raises(UsageError) as bad:
        plan_of("cluster: t\nnodes: [{name: a}]\nstack:\n  openmpi: {version: 4.1.5}\n")
    assert bad.value.lines() == [
        "<inventory>:4: stack.openmpi.version: openmpi 4.1.5 is not pinned "
        "(pinned: 4.1.4, 4.1.8, 5.0.7, 5.0.8, 5.0.10); give url and sha256 beside it"
    ]


def test_the_inventory_does_not_import_the_stack_sources():
    code = (
        "import sys, mpicluster.cluster.inventory as i; "
        "i.parse_inventory('cluster: t\\nnodes: [{name: a}]\\n'"
        "  'stack: {openmpi: {version: 4.1.x}}'); "
        "assert 'mpicluster.stack.sources' not in sys.modules, sorted(sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _source(tmp_path: Path, content: bytes, *, sha: str | None = None) -> lockfile.Source:
    upstream = tmp_path / "upstream" / "thing-1.0.tar.gz"
    upstream.parent.mkdir()
    upstream.write_bytes(content)
    digest = sha or hashlib.sha256(content).hexdigest()
    return lockfile.Source("openmpi", "1.0", Url(f"file://{upstream}"), digest)


def test_cache_downloads_verifies_and_reuses(tmp_path):
    source = _source(tmp_path, b"real bytes")
    cache = SourceCache(tmp_path / "cache")
    first = cache.ensure(source, lambda m: None)
    assert first.fetched and first.path.read_bytes() == b"real bytes"
    again = cache.ensure(source, lambda m: None)
    assert not again.fetched and again.path == first.path


def test_cache_refuses_a_mismatching_download_and_keeps_nothing(tmp_path):
    source = _source(tmp_path, b"tampered", sha="a" * 64)
    cache = SourceCache(tmp_path / "cache")
    with pytest.raises(ChecksumMismatch, match=r"does not match the pin a{64}"):
        cache.ensure(source, lambda m: None)
    assert list((tmp_path / "cache").iterdir()) == []


def test_cache_uses_the_mirror_first_and_offline_mode_never_downloads(tmp_path):
    source = _source(tmp_path, b"bytes")
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / source.filename).write_bytes(b"bytes")
    (tmp_path / "upstream" / source.filename).unlink()  # upstream gone: only the mirror has it
    seen = []
    cache = SourceCache(tmp_path / "cache", mirror=f"file://{mirror}")
    assert cache.ensure(source, seen.append).fetched
    assert str(mirror) in seen[0]
    with pytest.raises(MpiclusterError, match="not in the source cache"):
        SourceCache(tmp_path / "other").ensure(source, seen.append, offline=True)


NO_BUILD = (
    "--enable-mca-no-build=coll-monitoring,osc-monitoring,pml-monitoring,common-monitoring,"
    "topo-treematch,pml-v,vprotocol-pessimist"
)


def test_openmpi_configure_args_follow_the_series():
    four = lockfile.Source("openmpi", "4.1.4", Url("https://x/o.tar.bz2"), "a" * 64)
    five = lockfile.Source("openmpi", "5.0.10", Url("https://x/o.tar.bz2"), "a" * 64)
    args4 = recipe.openmpi_configure_args(four, "/p", cuda_home=None, fortran=False, extra=[])
    assert args4 == [
        "--prefix=/p",
        "--disable-dependency-tracking",
        "--enable-mpirun-prefix-by-default",
        "--disable-mpi-fortran",
        "--without-cuda",
        "--without-ucx",
        "--with-pmix=internal",
        "--with-hwloc=internal",
        "--with-libevent=internal",
        # 4.1 has these three of the cuts; 5.x's PMIx tools and Sphinx it has not
        "--disable-io-romio",
        "--disable-oshmem",
        NO_BUILD,
    ]
    args5 = recipe.openmpi_configure_args(
        five,
        "/p",
        cuda_home="/usr/local/cuda",
        fortran=True,
        extra=["--enable-io-romio"],
        ucx="/p",
        ucc=True,
    )
    assert args5 == [
        "--prefix=/p",
        "--disable-dependency-tracking",
        "--enable-prte-prefix-by-default",
        "--with-cuda=/usr/local/cuda",
        "--with-ucx=/p",
        "--with-ucc=/p",
        "--with-pmix=internal",
        "--with-prrte=internal",
        "--with-hwloc=internal",
        "--with-libevent=internal",
        "--disable-io-romio",
        "--disable-oshmem",
        NO_BUILD,
        "--without-treematch",
        "--disable-static",
        "--disable-pmix-binaries",
        "--disable-sphinx",
        # the inventory's own come last: configure takes the last, ROMIO is back
        "--enable-io-romio",
    ]
    # 5.x's --with-cuda-libdir is found on the builder, from these places
    cuda5 = recipe.openmpi_cuda(five, "/usr/local/cuda", gpus_present=True)
    assert cuda5["libdir"] and not cuda5["link_stub"]
    assert cuda5["libdir_candidates"][0] == "/usr/local/cuda/lib64/stubs"
    # the GPU smoke test's MPI_Allreduce on device memory, where Layout.cuda_allreduce finds it
    assert cuda5["allreduce_program"] == "libexec/mpicluster/cuda_allreduce"
    assert recipe.openmpi_cuda(five, "/c", gpus_present=False)["link_stub"]
    cuda4 = recipe.openmpi_cuda(four, "/c", gpus_present=False)
    assert not cuda4["libdir"] and not cuda4["link_stub"]


#: Components the smoke test, the seed workloads, mpi4py's suite (MPI-IO included) and
#: Horovod load, or that carry a job's traffic: never among the cuts.
KEPT = {
    "io-ompio",
    "fs-ufs",
    "fbtl-posix",
    "fcoll-vulcan",
    "fcoll-dynamic_gen2",
    "sharedfp-individual",
    "sharedfp-lockedfile",
    "sharedfp-sm",
    "pml-ob1",
    "pml-ucx",
    "btl-self",
    "btl-sm",
    "btl-tcp",
    "osc-sm",
    "osc-rdma",
    "osc-ucx",
    "coll-basic",
    "coll-han",
    "coll-tuned",
    "coll-libnbc",
    "coll-ftagree",
    "part-persist",
    "op-avx",
    "topo-basic",
    "accelerator-cuda",
}


def test_openmpi_cuts_leave_what_jobs_load():
    five = lockfile.Source("openmpi", "5.0.7", Url("https://x/o.tar.bz2"), "a" * 64)
    args = recipe.openmpi_configure_args(five, "/p", cuda_home=None, fortran=False, extra=[])
    no_build = next(a for a in args if a.startswith("--enable-mca-no-build="))
    cut = set(no_build.split("=", 1)[1].split(","))
    assert cut == set(recipe.OPENMPI_NO_BUILD)
    assert all(len(item.split("-", 1)) == 2 for item in cut)  # type-component pairs
    assert not cut & KEPT, cut & KEPT
    # ROMIO goes, OMPIO stays; the MPI and C++ wrappers (Horovod's build) are not touched
    assert "--disable-io-romio" in args
    assert not [a for a in args if a.startswith(("--disable-io-ompio", "--disable-mpi-cxx"))]
    assert len(args) == len(set(args))
    # the HTML manuals go, the man pages (share/man) and help texts stay
    assert "share/doc/openmpi" in recipe.OPENMPI_DOCS_LEFT_OUT
    assert not [d for d in recipe.OPENMPI_DOCS_LEFT_OUT if not d.startswith("share/doc/")]


def _cpu_spec(stack: str = "") -> dict:
    """The build spec of a one-node CPU cluster (the demo's Open MPI; no PyTorch, whose
    wheel the spec would look up)."""
    inventory = plan_of(
        "cluster: t\nnodes:\n  - {name: a}\n"
        f"stack: {{pytorch: {{enabled: false}}, horovod: {{enabled: false}}, {stack}}}\n"
    )
    needed = sources.needed(inventory)
    (group,) = plan_builds(inventory, {"a": FACTS}, needed, {"cp311-x86_64": "w"}, "r", Path("/c"))
    files = {s.component: Path("/f") for s in needed}
    house = Wheelhouse(Path("/w"), (), {})
    stack_dir = inventory.layout.stack_dir(group.fingerprint)
    return _group_spec(inventory, stack_dir, group, needed, files, house)


def test_the_build_spec_carries_the_cuts_and_an_inventory_takes_one_back():
    spec = _cpu_spec()
    args = spec["openmpi_configure_args"]
    assert {"--disable-io-romio", "--disable-oshmem", "--disable-sphinx"} <= set(args)
    assert spec["openmpi_docs_left_out"] == list(recipe.OPENMPI_DOCS_LEFT_OUT)
    # stack.openmpi.configure_args come after the cuts: configure takes the last
    back = _cpu_spec("openmpi: {configure_args: [--enable-io-romio, --enable-oshmem]}")
    tail = back["openmpi_configure_args"][-2:]
    assert tail == ["--enable-io-romio", "--enable-oshmem"]


def test_nvcc_gencode_builds_each_present_arch_once_plus_ptx():
    assert recipe.nvcc_gencode(["9.0", "8.0", "9.0"]) == (
        "-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90 "
        "-gencode=arch=compute_90,code=compute_90"
    )


def _inventory(extra: str = "") -> object:
    return plan_of("cluster: t\nnodes:\n  - {name: a}\n  - {name: b}\n  - {name: c}\n" + extra)


def test_ucx_is_built_where_asked_or_where_a_node_has_rdma():
    auto = _inventory()
    plain = {"a": FACTS | {"rdma": []}, "b": FACTS, "c": FACTS}
    assert sources.ucx_wanted(auto, plain) is False
    # one node with an InfiniBand HCA: the whole cluster gets UCX (one PML for all ranks)
    assert sources.ucx_wanted(auto, plain | {"b": FACTS | {"rdma": ["mlx5_0"]}}) is True
    assert sources.ucx_wanted(_inventory("stack: {ucx: {enabled: true}}\n"), plain) is True
    off = _inventory("stack: {ucx: {enabled: false}}\n")
    assert sources.ucx_wanted(off, {"b": FACTS | {"rdma": ["mlx5_0"]}}) is False
    assert "ucx" not in [s.component for s in sources.needed(auto)]
    with_ucx = sources.needed(auto, ucx=True)
    ucx = next(s for s in with_ucx if s.component == "ucx")
    # the default: upstream's tag archive (the git tree, configure made by autogen.sh)
    assert (ucx.version, ucx.filename) == ("1.22.0", "ucx-1.22.0.tar.gz")
    assert ucx.url == "https://github.com/openucx/ucx/archive/refs/tags/v1.22.0.tar.gz"
    assert ucx.sha256[:8] == "675ed3c9"
    # 1.13.1 stays a release an inventory can ask for, with Debian's copy as alternate
    old = resolve("ucx", "1.13.1", None, None)
    assert (old.filename, old.alternates[0].filename) == (
        "ucx-1.13.1.tar.gz",
        "ucx_1.13.1.orig.tar.xz",
    )
    assert old.alternates[0].sha256[:8] == "1a88e09c"
    assert resolve("ucx", "1.20.1", None, None).sha256[:8] == "4732aab4"
    # UCX is in the fingerprint: a build with it is another build
    platform = platform_of(FACTS, auto, 0)
    assert (
        fingerprint(platform, with_ucx, auto, "w", "r")[0]
        != fingerprint(platform, sources.needed(auto), auto, "w", "r")[0]
    )
    args = recipe.ucx_configure_args("/p")
    assert args[0] == "--prefix=/p"
    assert {"--with-verbs", "--with-rdmacm", "--disable-numa", "--without-cuda"} <= set(args)
    assert "--enable-mt" in args  # pml ucx declines a UCX without MPI_THREAD_MULTIPLE
    cuda = recipe.ucx_configure_args("/p", "/usr/local/cuda")
    assert "--with-cuda=/usr/local/cuda" in cuda
    # with CUDA: no GDA-KI nor device code, which compile a git submodule the tag archive
    # lacks (found by the CUDA build); without, the same arguments as before (the
    # stacks built without CUDA keep their fingerprint)
    assert "--without-gda" in cuda and "ac_cv_path_NVCC=" in cuda
    assert not {"--without-gda", "ac_cv_path_NVCC="} & set(args)


def _ucx_spec(stack: str, facts: dict) -> dict:
    """The build spec of a one-node GPU cluster whose stack has UCX."""
    inventory = plan_of(
        "cluster: t\nnodes:\n  - {name: a, gpus: 1}\n"
        f"stack: {{ucx: {{enabled: true}}, pytorch: {{enabled: false}}, "
        f"horovod: {{enabled: false}}, {stack}}}\n"
    )
    needed = sources.needed(inventory, ucx=True)
    (group,) = plan_builds(inventory, {"a": facts}, needed, {"cp311-x86_64": "w"}, "r", Path("/c"))
    files = {s.component: Path("/f") for s in needed}
    house = Wheelhouse(Path("/w"), (), {})
    stack_dir = inventory.layout.stack_dir(group.fingerprint)
    return _group_spec(inventory, stack_dir, group, needed, files, house)["ucx"]


def test_ucx_beside_a_cuda_aware_open_mpi_is_built_with_cuda():
    gpus = plan_of("cluster: t\nnodes:\n  - {name: a, gpus: 1}\n  - {name: b, gpus: 1}\n")
    cuda = {"a": FACTS | {"cuda": "13.0", "rdma": ["mlx5_0"]}, "b": FACTS | {"cuda": "13.0"}}
    # "auto" follows the RDMA device, CUDA or not: UCX then carries GPU buffers too
    assert sources.ucx_wanted(gpus, cuda) is True
    ucx = _ucx_spec("gpus_present: true", cuda["a"])
    assert "--with-cuda=/usr/local/cuda" in ucx["configure_args"]
    assert ucx["cuda"]["home"] == "/usr/local/cuda" and not ucx["cuda"]["link_stub"]
    assert ucx["cuda"]["libdir_candidates"][0] == "/usr/local/cuda/lib64/stubs"
    assert "test/apps" not in ucx["subdirs"] and ucx["subdirs"][0] == "src/ucm"
    # nodes without GPUs (the local cluster's --cuda nodes) link against stubs
    stub = "gpus_present: false, nccl: {cuda_archs: ['9.0']}"
    assert _ucx_spec(stub, cuda["a"])["cuda"]["link_stub"]
    # NVML's header where the toolkit has none: the wheel for the toolkit's CUDA release
    assert recipe.nvml_requirement("13.0") == "nvidia-nvml-dev==13.0.*"
    assert recipe.nvml_requirement("12.4.1") == "nvidia-nvml-dev-cu12==12.4.*"
    # Open MPI without CUDA keeps UCX without it
    off = _ucx_spec("openmpi: {cuda: false}", cuda["a"])
    assert "--without-cuda" in off["configure_args"] and off["cuda"] is None


def test_nvml_header_wheel_follows_the_cuda_release_not_the_rdma_devices():
    gpus = plan_of("cluster: t\nnodes:\n  - {name: a, gpus: 1}\n  - {name: b}\n")
    thirteen = Platform.for_wheels("3.11", "x86_64", "13.0")
    assert nvml_requirements(gpus, [thirteen]) == ["nvidia-nvml-dev==13.0.*"]
    assert nvml_requirements(gpus, [thirteen, Platform.for_wheels("3.11", "x86_64")]) == [
        "nvidia-nvml-dev==13.0.*"
    ]
    for off in ("ucx: {enabled: false}", "openmpi: {cuda: false}"):
        inventory = plan_of(f"cluster: t\nnodes:\n  - {{name: a, gpus: 1}}\nstack: {{{off}}}\n")
        assert nvml_requirements(inventory, [thirteen]) == [], off
    assert nvml_requirements(_inventory(), [thirteen]) == []  # no GPU nodes
    # fetch without the nodes: their CUDA release is needed for GPU inventories only
    (platform,) = platforms_unasked(gpus, "3.11", "x86_64", "12.4")
    assert (platform.python, platform.cuda) == ("3.11", "12.4")
    with pytest.raises(UsageError, match="give their CUDA release with --cuda"):
        platforms_unasked(gpus, "3.11", "x86_64", None)
    with pytest.raises(UsageError, match="--cuda 'latest'"):
        platforms_unasked(gpus, "3.11", "x86_64", "latest")
    assert platforms_unasked(_inventory(), "3.11", "x86_64", None)[0].cuda is None


def test_same_platform_same_fingerprint_and_options_change_it():
    inv = _inventory()
    needed = sources.needed(inv)
    platform = platform_of(FACTS, inv, 0)
    fp1, _ = fingerprint(platform, needed, inv, "w1", "r1")
    assert fingerprint(platform, needed, inv, "w1", "r1")[0] == fp1
    assert fingerprint(platform, needed, inv, "w2", "r1")[0] != fp1
    assert fingerprint(platform, needed, inv, "w1", "r2")[0] != fp1
    other = _inventory("stack:\n  openmpi: {configure_args: [--disable-io-romio]}\n")
    assert fingerprint(platform, sources.needed(other), other, "w1", "r1")[0] != fp1
    newer_os = platform_of(FACTS | {"os": {"id": "debian", "version_id": "13"}}, inv, 0)
    assert fingerprint(newer_os, needed, inv, "w1", "r1")[0] != fp1


def test_plan_builds_once_per_fingerprint_and_skips_what_is_active(tmp_path):
    inv = _inventory()
    needed = sources.needed(inv)
    facts = {"a": FACTS, "b": FACTS, "c": FACTS | {"os": {"id": "ubuntu", "version_id": "24.04"}}}
    groups = plan_builds(inv, facts, needed, {"cp311-x86_64": "w"}, "r", tmp_path)
    assert [(g.nodes, g.builder) for g in groups] == [(["a", "b"], "a"), (["c"], "c")]

    done = groups[0].fingerprint
    facts["a"] = FACTS | {"current": {"fingerprint": done}}
    (tmp_path / f"stack-{done}.tar.gz").write_bytes(b"pack")
    groups = plan_builds(inv, facts, needed, {"cp311-x86_64": "w"}, "r", tmp_path)
    assert (groups[0].install, groups[0].builder) == (["b"], None)  # by copy, no build


def test_gpu_nodes_without_cuda_are_refused(tmp_path):
    inv = plan_of("cluster: t\nnodes:\n  - {name: g, gpus: 8}\n")
    with pytest.raises(UsageError, match="no CUDA toolkit"):
        plan_builds(inv, {"g": FACTS}, sources.needed(inv), {"cp311-x86_64": "w"}, "r", tmp_path)


def test_a_gcc_version_the_probe_could_not_read_is_refused_not_fingerprinted(tmp_path):
    """Seen on 32 loaded nodes: apt-cache timed out on 30 of them, their gcc read as
    "none", and a second fingerprint sent a warm cluster to build the whole stack."""
    inv = plan_of("cluster: t\nnodes:\n  - {name: a}\n  - {name: b}\n")
    slow = FACTS | {"gcc": None, "gcc_error": "apt-cache policy gcc did not answer: timed out"}
    with pytest.raises(MpiclusterError, match=r"^b: which gcc .*timed out.*nothing was changed"):
        plan_builds(
            inv, {"a": FACTS, "b": slow}, sources.needed(inv), {"cp311-x86_64": "w"}, "r", tmp_path
        )
    none = FACTS | {"gcc": None, "gcc_error": None}  # no gcc to be had: a fingerprint of its own
    groups = plan_builds(
        inv, {"a": FACTS, "b": none}, sources.needed(inv), {"cp311-x86_64": "w"}, "r", tmp_path
    )
    assert len(groups) == 2


def test_recipe_digest_covers_existing_role_files_and_the_configure_lines(tmp_path):
    from mpicluster.stack.fingerprint import RECIPE_MODULE, recipe_digest

    assert len(recipe_digest()) == 64
    # a configure argument changed in recipe.py is another build
    changed = tmp_path / "recipe.py"
    changed.write_text(RECIPE_MODULE.read_text().replace('"--disable-static",', ""))
    assert changed.read_text() != RECIPE_MODULE.read_text()
    assert recipe_digest(changed) != recipe_digest()


def test_fingerprints_hash_version_and_sha256_not_where_a_file_comes_from():
    """Moving a pin from a URL to `pypi:` (or a mirror) must not invalidate builds."""
    inv = _inventory()
    platform = platform_of(FACTS, inv, 0)
    needed = sources.needed(inv)
    assert {s.component: (s.version, s.sha256[:12]) for s in needed} == {
        "openmpi": ("5.0.7", "119f2009936a"),
        "mpi4py": ("4.1.2", "56860286dc45"),
        "horovod": ("0.28.1", "92a43f5a94c4"),
    }
    fp, document = fingerprint(platform, needed, inv, "w", "r")
    assert document["sources"]["mpi4py"] == {"version": "4.1.2", "sha256": needed[1].sha256}
    moved = [
        lockfile.Source(
            s.component,
            s.version,
            Url(f"https://elsewhere/{s.filename}"),
            s.sha256,
            patches=s.patches,
        )
        for s in needed
    ]
    assert fingerprint(platform, moved, inv, "w", "r")[0] == fp


def test_cache_falls_back_to_an_alternate_file_of_the_same_release(tmp_path):
    alt = tmp_path / "debian" / "thing_1.0.orig.tar.xz"
    alt.parent.mkdir()
    alt.write_bytes(b"same tree, other packing")
    digest = hashlib.sha256(alt.read_bytes()).hexdigest()
    source = lockfile.Source(
        "openmpi",
        "1.0",
        Url(f"file://{tmp_path}/nowhere/thing-1.0.tar.bz2"),
        "c" * 64,
        alternates=(lockfile.Source("openmpi", "1.0", Url(f"file://{alt}"), digest),),
    )
    got = SourceCache(tmp_path / "cache").ensure(source, lambda m: None)
    assert got.fetched and got.path.name == "thing_1.0.orig.tar.xz"
    assert got.source.sha256 == digest
    assert SourceCache(tmp_path / "cache").ensure(source, lambda m: None).fetched is False


SDIST = b"an sdist"


class FakeTools:
    """Stands in for pip and apt-get: records each command, leaves the files they would."""

    def __init__(self, monkeypatch, files: dict[str, bytes]):
        self.calls: list[tuple[list[str], Path | None]] = []
        self.files = files
        monkeypatch.setattr(cache_module, "_tool", self)
        monkeypatch.setattr(cache_module.shutil, "which", lambda name: f"/usr/bin/{name}")

    def __call__(self, argv: list[str], name: str, cwd: Path | None = None) -> str:
        self.calls.append((argv, cwd))
        if "download" in argv:
            dest = Path(argv[argv.index("--dest") + 1])
        elif "source" in argv:
            dest = cwd
        else:
            return "Hit:1 http://mirror/debian bookworm InRelease\n"
        for name_, content in self.files.items():
            (dest / name_).write_bytes(content)
        return ""


def _pypi_source(sha: str | None = None) -> lockfile.Source:
    digest = sha or hashlib.sha256(SDIST).hexdigest()
    return lockfile.Source(
        "mpi4py", "4.1.2", Pypi("mpi4py", "4.1.2"), digest, "mpi4py-4.1.2.tar.gz"
    )


def test_an_sdist_is_fetched_with_pip_download_then_verified(tmp_path, monkeypatch):
    tools = FakeTools(monkeypatch, {"mpi4py-4.1.2.tar.gz": SDIST})
    seen: list[str] = []
    got = SourceCache(tmp_path / "cache").ensure(_pypi_source(), seen.append)
    assert got.fetched and got.path == tmp_path / "cache" / "mpi4py-4.1.2.tar.gz"
    assert got.path.read_bytes() == SDIST
    ((argv, _),) = tools.calls
    assert argv[:4] == [sys.executable, "-m", "pip", "download"]
    assert argv[-1] == "mpi4py==4.1.2"
    # the sdist of mpi4py itself; its build requirements (Cython) may come as wheels
    assert ":all:" not in argv
    for flags in (["--no-binary", "mpi4py"], ["--no-deps"]):
        assert argv[argv.index(flags[0]) : argv.index(flags[0]) + len(flags)] == flags
    assert "pip download mpi4py==4.1.2" in seen[0]
    assert [p.name for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")] == [
        "mpi4py-4.1.2.tar.gz"
    ]
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.endswith((".d", ".part"))]


def test_an_sdist_that_does_not_match_its_pin_is_deleted_and_refused(tmp_path, monkeypatch):
    FakeTools(monkeypatch, {"mpi4py-4.1.2.tar.gz": b"tampered"})
    with pytest.raises(ChecksumMismatch, match=r"pip download mpi4py==4\.1\.2: sha256"):
        SourceCache(tmp_path / "cache").ensure(_pypi_source(), lambda m: None)
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_failing_pip_is_reported_with_its_error_line(tmp_path, monkeypatch):
    def fail(argv, name, cwd=None):
        raise cache_module.FetchFailed(f"`{name}` failed (1): ERROR: No matching distribution")

    monkeypatch.setattr(cache_module, "_tool", fail)
    with pytest.raises(MpiclusterError, match="No matching distribution") as caught:
        SourceCache(tmp_path / "cache").ensure(_pypi_source(), lambda m: None)
    assert "could not download mpi4py 4.1.2" in caught.value.message


ORIG = b"upstream tree, Debian's packing"


def _openmpi_with_debian_alternate(tmp_path: Path) -> lockfile.Source:
    debian = lockfile.Source(
        "openmpi",
        "4.1.4",
        Debian("openmpi", "4.1.4-3", "bookworm"),
        hashlib.sha256(ORIG).hexdigest(),
        "openmpi_4.1.4.orig.tar.xz",
    )
    unreachable = Url(f"file://{tmp_path}/unreachable/openmpi-4.1.4.tar.bz2")
    return lockfile.Source("openmpi", "4.1.4", unreachable, "b" * 64, alternates=(debian,))


def test_upstream_unreachable_falls_through_to_apt_get_source(tmp_path, monkeypatch):
    monkeypatch.setenv("MPICLUSTER_DEBIAN_MIRROR", "http://mirror.example/debian/")
    tools = FakeTools(
        monkeypatch,
        {
            "openmpi_4.1.4.orig.tar.xz": ORIG,
            "openmpi_4.1.4-3.debian.tar.xz": b"packaging",
            "openmpi_4.1.4-3.dsc": b"dsc",
        },
    )
    root = tmp_path / "cache"
    got = SourceCache(root).ensure(_openmpi_with_debian_alternate(tmp_path), lambda m: None)
    assert got.fetched and got.path == root / "openmpi_4.1.4.orig.tar.xz"
    assert got.source.origin == Debian("openmpi", "4.1.4-3", "bookworm")
    assert sorted(p.name for p in root.iterdir()) == [".apt", "openmpi_4.1.4.orig.tar.xz"]
    (update, _), (source, cwd) = tools.calls
    assert update[0] == "apt-get" and update[-1] == "update"
    assert source[-3:] == ["source", "--download-only", "openmpi=4.1.4-3"]
    assert cwd is not None and cwd.parent == root and not cwd.exists()
    options = dict(update[i + 1].split("=", 1) for i, word in enumerate(update) if word == "-o")
    assert options == {
        "Dir::Etc::SourceList": str(root / ".apt" / "sources.list"),
        "Dir::Etc::SourceParts": "/nonexistent",
        "Dir::State::Lists": str(root / ".apt" / "lists"),
        "Dir::Cache": str(root / ".apt" / "cache"),
    }
    listed = (root / ".apt" / "sources.list").read_text().splitlines()
    assert listed[-1] == "deb-src http://mirror.example/debian bookworm main"


def test_debian_sources_need_apt_get_and_say_why_they_were_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(cache_module.shutil, "which", lambda name: None)
    with pytest.raises(MpiclusterError) as caught:
        SourceCache(tmp_path / "cache").ensure(
            _openmpi_with_debian_alternate(tmp_path), lambda m: None
        )
    message = caught.value.message
    assert "unreachable/openmpi-4.1.4.tar.bz2: " in message
    assert "Debian source package openmpi=4.1.4-3 (bookworm): apt-get is not on this" in message


def test_the_mirror_is_tried_first_for_every_kind_of_file(tmp_path, monkeypatch):
    tools = FakeTools(monkeypatch, {})
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "mpi4py-4.1.2.tar.gz").write_bytes(SDIST)
    (mirror / "openmpi_4.1.4.orig.tar.xz").write_bytes(ORIG)
    cache = SourceCache(tmp_path / "cache", mirror=f"file://{mirror}")
    assert cache.ensure(_pypi_source(), lambda m: None).fetched
    got = cache.ensure(_openmpi_with_debian_alternate(tmp_path), lambda m: None)
    assert got.path.name == "openmpi_4.1.4.orig.tar.xz"
    assert tools.calls == []  # neither pip nor apt-get was needed


def test_the_relay_plan_is_a_tree_in_the_plan_order():
    from mpicluster.stack.distribute import depth, tree

    assert tree([]) is None
    assert tree(["a"]) == {"node": "a", "children": []}
    chain = tree(["a", "b", "c"], fan_out=1)
    assert chain == {
        "node": "a",
        "children": [{"node": "b", "children": [{"node": "c", "children": []}]}],
    }
    nodes = [f"n{i}" for i in range(32)]
    plan = tree(nodes)
    seen, stack = [], [plan]
    while stack:
        entry = stack.pop()
        seen.append(entry["node"])
        assert len(entry["children"]) <= 2
        stack += entry["children"]
    assert sorted(seen) == sorted(nodes) and len(seen) == 32  # each node once
    assert plan["node"] == "n0" and [c["node"] for c in plan["children"]] == ["n1", "n2"]
    assert depth(plan) == 5 and depth(tree(nodes, fan_out=1)) == 31
    assert depth(tree([f"n{i}" for i in range(200)])) == 7


def test_a_node_whose_stack_differs_from_its_manifest_is_installed_again(tmp_path):
    """Its fingerprint is active, but up's probe found its files changed: it installs
    from the pack; without a pack, a node with the stack intact packs its tree."""
    inv = _inventory()
    needed = sources.needed(inv)
    facts = {"a": FACTS, "b": FACTS, "c": FACTS}
    (done,) = {
        g.fingerprint for g in plan_builds(inv, facts, needed, {"cp311-x86_64": "w"}, "r", tmp_path)
    }
    damaged = {
        "problems": [{"path": "lib/libmpi.so.40.40.7", "what": "changed", "how": "size"}],
        "counts": {"changed": 1, "missing": 3, "added": 0},
    }
    active = FACTS | {"current": {"fingerprint": done}}
    facts = {"a": active, "b": active | {"current_files": damaged}, "c": active}
    (group,) = plan_builds(inv, facts, needed, {"cp311-x86_64": "w"}, "r", tmp_path)
    assert group.install == ["b"]
    assert group.repair == {"b": "lib/libmpi.so.40.40.7 changed (size), 3 more file(s)"}
    assert group.builder == "a"  # no pack in the cache: a packs its intact tree
    (tmp_path / f"stack-{done}.tar.gz").write_bytes(b"pack")
    (group,) = plan_builds(inv, facts, needed, {"cp311-x86_64": "w"}, "r", tmp_path)
    assert (group.install, group.builder) == (["b"], None)
    intact = {"problems": [], "counts": {"changed": 0, "missing": 0, "added": 0}}
    facts["b"] = active | {"current_files": intact}
    (group,) = plan_builds(inv, facts, needed, {"cp311-x86_64": "w"}, "r", tmp_path)
    assert (group.install, group.repair) == ([], {})


def test_the_wheelhouse_travels_as_one_archive_of_its_wheels_named_by_its_digest(tmp_path):
    import tarfile

    from mpicluster.stack.wheels import archive

    folder = tmp_path / "cp311-x86_64"
    folder.mkdir()
    for name, data in (("a-1-py3-none-any.whl", b"a"), ("b-2-py3-none-any.whl", b"bb")):
        (folder / name).write_bytes(data)
    (folder / "manifest.json").write_text("{}")
    (folder / "stray.whl").write_bytes(b"not in the manifest")
    house = Wheelhouse(
        folder, ("a", "b"), {"a-1-py3-none-any.whl": "x", "b-2-py3-none-any.whl": "y"}
    )
    first = archive(house)
    assert first.name == f".cp311-x86_64-{house.digest}.tar"
    with tarfile.open(first) as tar:
        assert sorted(tar.getnames()) == ["a-1-py3-none-any.whl", "b-2-py3-none-any.whl"]
        assert tar.extractfile("b-2-py3-none-any.whl").read() == b"bb"
    assert archive(house) == first and first.stat().st_mode & 0o777 == 0o644
    (folder / "c-3-py3-none-any.whl").write_bytes(b"c")
    grown = Wheelhouse(folder, ("a", "b", "c"), {**house.files, "c-3-py3-none-any.whl": "z"})
    second = archive(grown)
    assert second != first and second.exists() and not first.exists()
    assert not list(tmp_path.glob("*.part"))


def test_ucc_is_built_beside_ucx_where_gpus_and_a_cuda_aware_open_mpi_are():
    gpus = _inventory("stack: {gpus_present: false}\n")
    gpu = plan_of(
        "cluster: t\nnodes:\n  - {name: a, gpus: 1}\n  - {name: b, gpus: 1}\n"
        "stack: {nccl: {cuda_archs: ['9.0']}}\n"
    )
    cpu = _inventory()
    plain = {"a": FACTS, "b": FACTS, "c": FACTS}
    # GPU nodes: UCX (its CUDA transports) and UCC, whatever the RDMA devices say
    assert sources.ucx_wanted(gpu, plain) is True
    names = [s.component for s in sources.needed(gpu, ucx=True)]
    assert {"ucx", "ucc", "nccl"} <= set(names)
    assert names.index("ucx") < names.index("ucc")
    ucc = next(s for s in sources.needed(gpu, ucx=True) if s.component == "ucc")
    assert (ucc.version, ucc.filename, ucc.sha256[:8]) == ("1.8.0", "ucc-1.8.0.tar.gz", "1fc0b7c5")
    assert ucc.url == "https://github.com/openucx/ucc/archive/refs/tags/v1.8.0.tar.gz"
    # CPU nodes with UCX (an RDMA device): no UCC; off by the inventory: none either
    assert "ucc" not in [s.component for s in sources.needed(cpu, ucx=True)]
    assert sources.ucc_wanted(gpus, False) is False
    off = plan_of("cluster: t\nnodes:\n  - {name: a, gpus: 1}\nstack: {ucc: {enabled: false}}\n")
    assert sources.ucc_wanted(off, True) is False
    # Open MPI 4.1 has no coll/ucc to build it for
    four = plan_of(
        "cluster: t\nnodes:\n  - {name: a, gpus: 1}\nstack: {openmpi: {version: 4.1.4}}\n"
    )
    assert "ucc" not in [s.component for s in sources.needed(four, ucx=True)]


def test_ucc_configure_args_name_what_it_builds():
    cpu = recipe.ucc_configure_args("/p")
    assert cpu[:2] == ["--prefix=/p", "--disable-dependency-tracking"]
    assert {"--with-ucx=/p", "--without-cuda", "--without-nccl", "--disable-static"} <= set(cpu)
    assert {"--without-sharp", "--without-rocm", "--without-rccl"} <= set(cpu)
    gpu = recipe.ucc_configure_args("/p", "/usr/local/cuda", ("9.0",), nccl=True)
    assert {"--with-cuda=/usr/local/cuda", "--with-nccl=/p"} <= set(gpu)
    # its kernels for the GPUs there are, as NCCL's (PTX of the newest for newer GPUs)
    assert (
        "--with-nvcc-gencode=-gencode=arch=compute_90,code=sm_90 "
        "-gencode=arch=compute_90,code=compute_90"
    ) in gpu
    assert recipe.UCC_DEFAULTS["coll_ucc_enable"] == "1"
    four = lockfile.Source("openmpi", "4.1.4", Url("https://x/o.tar.bz2"), "a" * 64)
    assert not any(
        "ucc" in a
        for a in recipe.openmpi_configure_args(four, "/p", cuda_home=None, fortran=False, extra=[])
    )
