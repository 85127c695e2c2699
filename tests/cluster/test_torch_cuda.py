"""PyTorch's CUDA build and Horovod with GPU operations, built by `up` on `--cuda` local
nodes (this machine's CUDA toolkit, no GPU), with PyTorch loading the stack's NCCL.

On demand (`pytest -m torch_cuda`): PyPI's CUDA build of PyTorch 2.13.0 brings about
3 GB of wheels (torch and NVIDIA's CUDA libraries) and a venv of about 5 GB on every
node. Its wheels pin NCCL 2.29.7, the stack's release, so `stack.pytorch.nccl: stack`
can link PyTorch to the NCCL `up` built; NCCL and nccl-tests come from ../shared/sources.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from tests.cluster.test_doctor import doctor, problems
from tests.conftest import inventory_with, mpicluster, start_local_cluster
from tests.seed import seed_cache, seed_gpu_sources

pytestmark = [pytest.mark.cluster, pytest.mark.on_demand, pytest.mark.torch_cuda]

NAME, SUBNET = "pytest-torch", "192.168.64.0/24"
PREFIX = "/opt/mpicluster"
NODES = ("node1", "node2")
VENV_NCCL = f"{PREFIX}/current/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2"
TORCH_NCCL = (
    "import json, torch; v = torch.cuda.nccl.version(); "
    "m = [l.split()[-1] for l in open('/proc/self/maps') if 'libnccl.so' in l]; "
    "print(json.dumps({'cuda': torch.version.cuda, 'nccl': '.'.join(map(str, v)), "
    "'loaded': sorted(set(m))}))"
)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    work = tmp_path_factory.mktemp("torch")
    cache, artifacts = work / "sources", work / "artifacts"
    openmpi = seed_cache(cache, "5.0.7")
    seed_gpu_sources(cache)
    generated = work / "generated.yaml"
    mpicluster("local", "down", "--name", NAME, check=False)
    cluster = start_local_cluster(NAME, len(NODES), SUBNET, generated, "--cuda")
    stack = yaml.safe_load(generated.read_text())["stack"]
    stack["openmpi"] = openmpi
    stack["pytorch"] = {"cuda": True, "nccl": "stack"}
    inventory = inventory_with(
        generated,
        work / "torch.yaml",
        stack=stack,
        sources={"cache": str(cache), "artifacts": str(artifacts)},
    )
    done = mpicluster("up", str(inventory), "--json", check=False, timeout=5400)
    sys.stderr.write(done.stderr[-4000:])  # its timings, shown with pytest -s
    yield {"cluster": cluster, "inventory": inventory, "up": done}
    mpicluster("local", "down", "--name", NAME, check=False)


def test_up_builds_horovod_gpu_operations_and_links_pytorch_to_the_stacks_nccl(built):
    done, cluster = built["up"], built["cluster"]
    assert done.returncode == 0, done.stderr[-6000:]
    assert "PyTorch loads the stack's NCCL (its wheel's NCCL 2.29.7 is replaced" in done.stderr
    assert "Horovod without GPU operations" not in done.stderr
    result = json.loads(done.stdout)
    assert result["smoke"]["ok"] and result["smoke"]["horovod"]["ok"]
    for node in NODES:
        record = json.loads(cluster.ssh(node, f"cat {PREFIX}/current/FINGERPRINT.json").stdout)
        assert record["pytorch"]["cuda"] is True and record["pytorch"]["nccl"] == "stack"
        measured = record["pytorch"]["nccl_loaded"]
        assert measured["version"] == "2.29.7"
        assert measured["loaded"][0].startswith(f"{PREFIX}/stacks/{record['fingerprint']}/lib/")
        # what a login's python (the stack's, on PATH) loads, without a GPU
        seen = json.loads(cluster.ssh(node, f'python -c "{TORCH_NCCL}"').stdout)
        assert seen["cuda"].startswith("13.") and seen["nccl"] == "2.29.7", seen
        assert seen["loaded"] == [f"{PREFIX}/stacks/{record['fingerprint']}/lib/libnccl.so.2.29.7"]
        check = cluster.ssh(node, "horovodrun --check-build").stdout
        operations = check.split("Available Tensor Operations:")[1]
        assert "[X] NCCL" in operations and "[X] MPI" in operations, check


def test_second_up_changes_nothing(built):
    done = mpicluster("up", str(built["inventory"]), "--json", "--full", check=False, timeout=1800)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout)
    assert {n: h["changed"] for n, h in result["hosts"].items()} == dict.fromkeys(NODES, 0)


def test_doctor_says_which_nccl_pytorch_loads_and_finds_a_lost_link(built):
    inventory, cluster = built["inventory"], built["cluster"]
    code, report = doctor(inventory)
    assert (code, problems(report)) == (0, set()), json.dumps(report, indent=1)[-6000:]
    versions = next(c for c in report["checks"] if c["name"] == "versions")
    assert all("PyTorch's NCCL stack 2.29.7" in r["evidence"] for r in versions["results"])
    # a `pip install` in the stack's Python puts the wheel's own file back
    target = cluster.ssh("node2", f"readlink {VENV_NCCL}").stdout.strip()
    cluster.ssh("node2", f"sudo rm {VENV_NCCL} && sudo cp {target} {VENV_NCCL}")
    try:
        code, report = doctor(inventory)
        assert code == 5
        # the stack check sees the same by the stack's manifest: a file where a link was
        assert problems(report) == {("versions", "node2", "fail"), ("stack", "node2", "fail")}
        stack = next(c for c in report["checks"] if c["name"] == "stack")
        (changed,) = [r for r in stack["results"] if r["node"] == "node2"]
        assert "libnccl.so.2 changed (kind (a file, was a link))" in changed["evidence"]
        versions = next(c for c in report["checks"] if c["name"] == "versions")
        node2 = next(r for r in versions["results"] if r["node"] == "node2")
        assert "PyTorch loads its wheel's NCCL 2.29.7" in node2["evidence"]
        assert node2["fix"].startswith(f"on node2: ln -sf {PREFIX}/stacks/"), node2
    finally:
        cluster.ssh("node2", f"sudo rm -f {VENV_NCCL} && sudo ln -s {target} {VENV_NCCL}")


def test_an_older_stack_nccl_is_refused_before_anything_changes(built, tmp_path: Path):
    """PyTorch 2.14.1's wheels pin NCCL 2.30.7, newer than the stack's 2.29.7."""
    data = yaml.safe_load(built["inventory"].read_text())
    data["stack"]["pytorch"]["version"] = "2.14.1"
    newer = tmp_path / "newer.yaml"
    newer.write_text(yaml.safe_dump(data))
    done = mpicluster("up", str(newer), check=False, timeout=1800)
    assert done.returncode == 1, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()
    assert any("built against NCCL 2.30.7, newer than the stack's 2.29.7" in x for x in last)
    assert "Traceback" not in done.stderr
