"""Pure logic of source installs: lockfile resolution, the cache, recipes, plans."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from mpicluster.errors import MpiclusterError, UsageError
from mpicluster.inventory import parse_inventory
from mpicluster.stack import recipe, sources
from mpicluster.stack.cache import ChecksumMismatch, SourceCache
from mpicluster.stack.fingerprint import fingerprint, platform_of
from mpicluster.stack.plan import plan

FACTS = {
    "nproc": 2,
    "os": {"id": "debian", "version_id": "12"},
    "arch": "x86_64",
    "python": "3.11",
    "gcc": "4:12.2.0-3",
    "cuda": None,
    "gpus": [],
    "current": None,
}


def test_lockfile_pins_every_release_with_a_sha256():
    lock = sources.lockfile()
    for component in sources.COMPONENTS:
        entry = lock[component]
        assert str(entry["default"]) in {str(v) for v in entry["releases"]}
        for release in entry["releases"].values():
            assert release["url"].startswith("https://")
            assert len(release["sha256"]) == 64
    for release in lock["openmpi"]["releases"].values():
        assert release["url"].startswith("https://download.open-mpi.org/release/open-mpi/v")


def test_series_resolves_to_the_newest_pinned_release():
    assert sources.resolve("openmpi", "4.1.x", None, None).version == "4.1.8"
    assert sources.resolve("openmpi", None, None, None).version == "5.0.10"
    assert sources.resolve("nccl", "2.29.x", None, None).filename == "nccl-2.29.7-1.tar.gz"
    with pytest.raises(UsageError, match="not pinned"):
        sources.resolve("openmpi", "4.1.5", None, None)


def _source(tmp_path: Path, content: bytes, *, sha: str | None = None) -> sources.Source:
    upstream = tmp_path / "upstream" / "thing-1.0.tar.gz"
    upstream.parent.mkdir()
    upstream.write_bytes(content)
    digest = sha or hashlib.sha256(content).hexdigest()
    return sources.Source("openmpi", "1.0", f"file://{upstream}", digest)


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


def test_openmpi_configure_args_follow_the_series():
    four = sources.Source("openmpi", "4.1.4", "https://x/o.tar.bz2", "a" * 64)
    five = sources.Source("openmpi", "5.0.10", "https://x/o.tar.bz2", "a" * 64)
    args4 = recipe.openmpi_configure_args(four, "/p", cuda_home=None, fortran=False, extra=[])
    assert args4 == [
        "--prefix=/p",
        "--enable-mpirun-prefix-by-default",
        "--disable-mpi-fortran",
        "--without-cuda",
    ]
    args5 = recipe.openmpi_configure_args(
        five, "/p", cuda_home="/usr/local/cuda", fortran=True, extra=["--disable-io-romio"]
    )
    assert args5 == [
        "--prefix=/p",
        "--enable-prte-prefix-by-default",
        "--with-cuda=/usr/local/cuda",
        "--with-cuda-libdir=/usr/local/cuda/lib64/stubs",
        "--disable-io-romio",
    ]


def test_nvcc_gencode_builds_each_present_arch_once_plus_ptx():
    assert recipe.nvcc_gencode(["9.0", "8.0", "9.0"]) == (
        "-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90 "
        "-gencode=arch=compute_90,code=compute_90"
    )


def _inventory(extra: str = "") -> object:
    return parse_inventory(
        "cluster: t\nnodes:\n  - {name: a}\n  - {name: b}\n  - {name: c}\n" + extra
    )


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
    groups = plan(inv, facts, needed, {"cp311-x86_64": "w"}, "r", tmp_path)
    assert [(g.nodes, g.builder) for g in groups] == [(["a", "b"], "a"), (["c"], "c")]

    done = groups[0].fingerprint
    facts["a"] = FACTS | {"current": {"fingerprint": done}}
    (tmp_path / f"stack-{done}.tar.gz").write_bytes(b"pack")
    groups = plan(inv, facts, needed, {"cp311-x86_64": "w"}, "r", tmp_path)
    assert (groups[0].install, groups[0].builder) == (["b"], None)  # by copy, no build


def test_gpu_nodes_without_cuda_are_refused(tmp_path):
    inv = parse_inventory("cluster: t\nnodes:\n  - {name: g, gpus: 8}\n")
    with pytest.raises(UsageError, match="no CUDA toolkit"):
        plan(inv, {"g": FACTS}, sources.needed(inv), {"cp311-x86_64": "w"}, "r", tmp_path)


def test_recipe_digest_covers_existing_role_files():
    from mpicluster.stack.fingerprint import recipe_digest

    assert len(recipe_digest()) == 64


def test_cache_falls_back_to_an_alternate_file_of_the_same_release(tmp_path):
    alt = tmp_path / "debian" / "thing_1.0.orig.tar.xz"
    alt.parent.mkdir()
    alt.write_bytes(b"same tree, other packing")
    source = sources.Source(
        "openmpi",
        "1.0",
        f"file://{tmp_path}/nowhere/thing-1.0.tar.bz2",
        "c" * 64,
        alternates=((f"file://{alt}", hashlib.sha256(alt.read_bytes()).hexdigest(), ""),),
    )
    got = SourceCache(tmp_path / "cache").ensure(source, lambda m: None)
    assert got.fetched and got.path.name == "thing_1.0.orig.tar.xz"
    assert got.source.sha256 == hashlib.sha256(alt.read_bytes()).hexdigest()
    assert SourceCache(tmp_path / "cache").ensure(source, lambda m: None).fetched is False
