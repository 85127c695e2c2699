"""doctor on 16 nodes with its default settings: the mesh logs in on a ring and a seeded
sample, and judges every other pair from both nodes' facts. One pair broken is still
found and named, whether or not it was among the logins. The smoke test's ssh matrix
samples the same way, and still finds the one node whose environment is wrong.

Marked `doctor_scale` (on demand): 16 Podman nodes, about 16 minutes on 2 cores.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from mpicluster.nodes import pairs
from tests.cluster.nodes import podman_exec
from tests.conftest import LocalCluster, inventory_with, mpicluster, start_local_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.on_demand, pytest.mark.doctor_scale]

NAME, SUBNET, COUNT = "scale", "192.168.62.0/24", 16
NODES = [f"node{i}" for i in range(1, COUNT + 1)]
ADDRESS = {n: f"192.168.62.{10 + i}" for i, n in enumerate(NODES, 1)}
SAVED = "/root/scale-saved"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[LocalCluster]:
    inventory = tmp_path_factory.mktemp("scale") / "raw.yaml"
    mpicluster("local", "down", "--name", NAME, check=False)
    yield start_local_cluster(NAME, COUNT, SUBNET, inventory)
    mpicluster("local", "down", "--name", NAME, check=False)


@pytest.fixture(scope="module")
def inventory(cluster) -> Path:
    path = inventory_with(
        cluster.inventory, cluster.inventory.parent / "packages.yaml", stack={"install": "packages"}
    )
    mpicluster("up", str(path), timeout=3600)
    return path


def doctor(inventory: Path, *args: str) -> tuple[int, dict]:
    done = mpicluster("doctor", str(inventory), "--json", *args, check=False, timeout=900)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def problems(report: dict) -> dict[tuple[str, str | None, str | None], dict]:
    return {
        (c["name"], r["node"], r["peer"]): r
        for c in report["checks"]
        for r in c["results"]
        if r["status"] != "pass"
    }


def test_a_healthy_16_node_cluster_passes_with_a_sampled_mesh(inventory):
    code, report = doctor(inventory)
    assert (code, problems(report)) == (0, {}), json.dumps(report)[-4000:]
    mesh = next(c for c in report["checks"] if c["name"] == "mesh")
    assert all("ring" in r["evidence"] for r in mesh["results"]), mesh


@pytest.mark.parametrize(
    ("source", "target", "breaks", "words"),
    [
        # node2's key line no longer lets node9's address in
        ("node9", "node2", "from", ("from=", ADDRESS["node9"])),
        # node5 holds a stale copy of node12's host key
        ("node5", "node12", "known_hosts", ("stale",)),
    ],
    ids=["from-list", "stale-host-key"],
)
def test_one_broken_pair_is_found_with_the_default_settings(
    inventory, source, target, breaks, words
):
    plan = pairs.plan(NODES, seed=pairs.seed_for(NAME))
    logged_in = target in plan[source]
    if breaks == "from":
        keys = "/home/vagrant/.ssh/authorized_keys"
        node, path = target, keys
        edit = (
            f"runuser -u vagrant -- sed -i 's/{ADDRESS[source]},//; s/,{ADDRESS[source]}\"/\"/' "
            f"{keys}"
        )
    else:
        known = "/etc/ssh/ssh_known_hosts"
        node, path = source, known
        edit = (
            "rm -f /root/scale-key* && ssh-keygen -q -t ed25519 -N '' -f /root/scale-key && "
            "key=$(cut -d' ' -f1,2 /root/scale-key.pub) && "
            f'sed -i "/^{target}[ ,]/s| ssh-ed25519 .*| $key|" {known}'
        )
    podman_exec(NAME, node, f"mkdir -p {SAVED} && cp -a {path} {SAVED}/file && {edit}")
    try:
        code, report = doctor(inventory)
        found = problems(report)
        shown = json.dumps(list(found.values()), indent=1)[-5000:]
        assert code == 5, shown
        assert set(found) <= {("mesh", source, target), ("launch", target, source)}, shown
        result = found[("mesh", source, target)]
        for word in words:
            assert word in result["fix"] + result["evidence"], (word, result)
        if not logged_in:
            assert "judged from both nodes' facts" in result["evidence"], result
    finally:
        podman_exec(NAME, node, f"cat {SAVED}/file > {path}")
    code, report = doctor(inventory)
    assert (code, problems(report)) == (0, {}), json.dumps(report)[-4000:]


def smoke(inventory: Path, *args: str) -> tuple[int, dict]:
    done = mpicluster("smoke", str(inventory), "--json", *args, check=False, timeout=900)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def test_the_smoke_matrix_samples_and_still_finds_one_node_with_another_mpirun(inventory):
    code, report = smoke(inventory)
    tried = {(p["source"], p["target"]) for p in report["pairs"]}
    assert (code, report["sampled"]) == (0, True), json.dumps(report)[-3000:]
    assert len(tried) == COUNT * (pairs.PER_NODE + 1)  # not 16 x 16
    assert {t for _, t in tried} == set(NODES) and all((n, n) in tried for n in NODES)
    # another mpirun ahead of the managed one in node7's PATH (/usr/local/bin comes first)
    podman_exec(
        NAME,
        "node7",
        "printf '#!/bin/sh\\n' > /usr/local/bin/mpirun; chmod +x /usr/local/bin/mpirun",
    )
    try:
        code, report = smoke(inventory)
        bad = {(p["source"], p["target"]): p["problem"] for p in report["pairs"] if not p["ok"]}
        assert code == 5, json.dumps(report)[-3000:]
        assert set(bad) == {(s, t) for s, t in tried if t == "node7"}, bad
        assert all("/usr/local/bin/mpirun" in problem for problem in bad.values()), bad
        assert report["allreduce"]["problem"].startswith("not counted: ")
    finally:
        podman_exec(NAME, "node7", "rm -f /usr/local/bin/mpirun")
    code, report = smoke(inventory, "--all-pairs")
    assert (code, report["sampled"], len(report["pairs"])) == (0, False, COUNT * COUNT)
