"""The local cluster's spec: each node's Debian release, its image and box."""

from __future__ import annotations

import json

from mpicluster.local.spec import LocalSpec
from mpicluster.local.vagrant import vagrant_env


def test_one_release_for_all_nodes_or_one_per_node():
    plain = LocalSpec(name="a", nodes=2)
    assert plain.node_releases == ["bookworm", "bookworm"]
    mixed = LocalSpec(name="m", nodes=3, releases=("bookworm", "trixie", "trixie"))
    assert mixed.images == [
        "localhost/mpicluster-node:bookworm",
        "localhost/mpicluster-node:trixie",
        "localhost/mpicluster-node:trixie",
    ]
    assert mixed.boxes == ["debian/bookworm64", "debian/trixie64", "debian/trixie64"]
    env = vagrant_env(mixed, {})
    assert env["MPICLUSTER_IMAGES"] == ",".join(mixed.images)
    assert env["MPICLUSTER_BOXES"] == ",".join(mixed.boxes)


def test_a_spec_saved_before_releases_reads_as_bookworm(tmp_path, monkeypatch):
    monkeypatch.setenv("MPICLUSTER_HOME", str(tmp_path))
    old = LocalSpec(name="old", nodes=2)
    old.dir.mkdir(parents=True)
    saved = {"name": "old", "nodes": 2, "subnet": old.subnet, "provider": "docker"}
    saved |= {"image": "localhost/mpicluster-node:bookworm", "cuda": None}
    (old.dir / "spec.json").write_text(json.dumps(saved))
    assert LocalSpec.saved("old") == LocalSpec(name="old", nodes=2)
    LocalSpec(name="old", nodes=2, releases=("trixie", "bookworm")).save()
    assert LocalSpec.saved("old").node_releases == ["trixie", "bookworm"]
