"""The from-source stack on a real 3-node cluster, built ONCE and installed on all nodes
by copy: Open MPI (Debian's copy of the upstream tree), mpi4py and Horovod with PyTorch
on CPU; a checksum mismatch, a build interrupted (Ctrl-C), then its builder lost (the
container killed), the build resumed where it stopped, doctor on the result, a node
added later; then faults of the install by copy on that node: a damaged artifact, the
node killed during the copy, its disk full during the copy.

In CI the stack is the one `make demo` builds on CPU nodes: Open MPI 5.0.7 (PRRTE
launches over ssh), mpi4py, PyTorch (CPU) and Horovod. On demand, the same tests on
`local up --cuda` nodes (this machine's CUDA toolkit, no GPU: `pytest -m cuda_build`),
so that one build serves both paths: Open MPI 5.0.7 CUDA-aware with UCX, NCCL for
sm_90 (the inventory's only_funcs: float sum allreduce and send/receive) and nccl-tests
with MPI, with the CPU smoke test (mpi4py, Horovod) on it; on Open MPI 4.1.4 without
CUDA (`pytest -m openmpi4`); and with NCCL built in full, every collective
(`pytest -m nccl_full`; NCCL alone compiles for about 28 minutes on 2 cores). NCCL and
nccl-tests come from ../shared/sources.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from mpicluster.cluster.layout import PEERMEM_CONF
from tests.cluster.conftest import NAME, PREFIX, SUBNET, with_stack
from tests.cluster.fabric_runs import check_ucx
from tests.cluster.nodes import Started, half_written, podman, podman_exec, wait_for_ssh
from tests.cluster.test_doctor import doctor, problems
from tests.cluster.test_nccl_build import ELF, PTX, fatbin_entries
from tests.conftest import mpicluster, start_local_cluster

pytestmark = pytest.mark.cluster
#: Faults injected into a run of `up` (Ctrl-C, a container killed, a full disk): each
#: costs runs of `up` of its own, so CI leaves them out; `pytest -m faults` runs them.
FAULTS = pytest.mark.faults


def on_path(cluster, node: str) -> str:
    """What a non-interactive ssh login on `node` resolves mpirun to ('' for nothing)."""
    return cluster.ssh(node, "command -v mpirun || true").stdout.strip()


def test_checksum_mismatch_is_refused_and_nothing_installed(build, tmp_path):
    bad = dict(build["openmpi"], sha256="0" * 64)
    empty_cache = tmp_path / "cache"
    inventory = with_stack(
        build["generated"],
        tmp_path / "bad.yaml",
        build["variant"],
        bad,
        empty_cache,
        tmp_path / "artifacts",
    )
    done = mpicluster("up", str(inventory), check=False)
    assert done.returncode == 1, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "does not match the pin " + "0" * 64 in last and "nothing was installed" in last
    # no partial file, and nothing of Open MPI's (the others download at the same time:
    # what they leave is verified)
    left = sorted(p.name for p in empty_cache.iterdir()) if empty_cache.exists() else []
    assert not [n for n in left if n.endswith((".part", ".d")) or "openmpi" in n], left
    for node in ("node1", "node2", "node3"):
        assert build["cluster"].ssh(node, f"test -e {PREFIX}", check=False).returncode == 1


#: Where the build is stopped: Ctrl-C in the second component built (Open MPI done), the
#: builder's container killed in the last (every other component done). Without CUDA
#: both are in the Python component.
STOPS = {True: ("Compile NCCL", "Build mpi4py"), False: ("Build mpi4py", "Build Horovod with")}


def built_components(cluster) -> list[str]:
    """The components node1's unfinished build records as built."""
    done = cluster.ssh("node1", "ls /var/tmp/mpicluster/build-*/done 2>/dev/null; true")
    return sorted(done.stdout.split())


@FAULTS
def test_interrupted_build_leaves_nothing_on_path(build):
    cluster = build["cluster"]
    interrupt_at, _ = STOPS[build["variant"].cuda]
    run = Started("up", str(build["inventory"]))
    run.wait_for(interrupt_at, timeout=1800)
    time.sleep(20)  # make is running on the builder now
    run.interrupt(signal.SIGINT)  # what Ctrl-C does to the whole command
    assert run.finish(180) == 130, run.stderr[-3000:]
    for node in ("node1", "node2", "node3"):
        assert on_path(cluster, node) == "", node
        assert cluster.ssh(node, f"test -e {PREFIX}/current", check=False).returncode == 1
        complete = cluster.ssh(node, f"ls {PREFIX}/stacks/*/FINGERPRINT.json 2>/dev/null; true")
        assert complete.stdout.strip() == "", node
    assert "openmpi" in built_components(cluster)  # kept for the next run


@FAULTS
def test_a_builder_lost_mid_build_is_named_and_the_next_up_keeps_what_it_built(build):
    """node1's container killed while it builds the last component: node1 named with the
    step, node2 and node3 finish trust, environment and hostfiles and say why they have
    no stack; node1 keeps the components it finished (the next test's `up` resumes)."""
    cluster = build["cluster"]
    _, kill_at = STOPS[build["variant"].cuda]
    run = Started("up", str(build["inventory"]), "--json")
    run.wait_for("[stack_build] " + kill_at, timeout=1800)
    assert "Compile Open MPI" not in run.stderr  # resumed after the Ctrl-C
    time.sleep(5)
    podman(cluster, "node1", "kill")
    try:
        assert run.finish() == 3, run.stderr[-3000:]
        hosts = json.loads(run.stdout)["hosts"]
        lost = hosts["node1"]
        assert lost["status"] == "unreachable", lost
        assert lost["failures"][0].startswith(f"stack_build: {kill_at}"), lost
        for node in ("node2", "node3"):
            assert hosts[node]["status"] == "failed", hosts[node]
            (failure,) = hosts[node]["failures"]
            assert "not installed: its build on node1 did not finish" in failure, failure
            hostfile = podman_exec(cluster, node, "cat /etc/mpicluster/hostfile").stdout
            assert "node1" in hostfile  # trust, environment and hostfiles went on
        mesh = cluster.ssh("node2", "ssh -o BatchMode=yes node3 hostname", check=False)
        assert mesh.stdout.strip() == "node3", mesh.stderr
    finally:
        podman(cluster, "node1", "start")
    wait_for_ssh(cluster, "node1")
    assert on_path(cluster, "node1") == ""
    complete = cluster.ssh("node1", f"ls {PREFIX}/stacks/*/FINGERPRINT.json 2>/dev/null; true")
    assert complete.stdout.strip() == ""
    built = built_components(cluster)
    assert "openmpi" in built and "python" not in built, built
    if build["variant"].cuda:
        assert {"nccl", "nccl_tests", "cuda_allreduce"} <= set(built), built
    assert half_written(cluster, "node1") == []


def test_rerun_builds_once_installs_everywhere_and_verifies(build):
    cluster = build["cluster"]
    # what the fault tests before it left (marker faults; CI leaves them out)
    kept = built_components(cluster)
    done = mpicluster("up", str(build["inventory"]), "--json", check=False, timeout=3600)
    assert done.returncode == 0, done.stderr[-6000:]
    assert "build on node1, then install on node1, node2, node3" in done.stderr
    if "openmpi" in kept:
        # resumed: the components the lost builder finished are not built again
        assert "Compile Open MPI" not in done.stderr and "Compile NCCL" not in done.stderr
    else:
        assert "Compile Open MPI" in done.stderr
    assert "Build mpi4py" in done.stderr
    result = json.loads(done.stdout)
    # node1 built it; node2 got the pack from the control machine and passed it on
    log = Path(result["log"]).read_text()
    assert '\\"node\\": \\"node3\\", \\"ok\\": true' in log, log[-3000:]
    smoke = result["smoke"]
    assert smoke["ok"], smoke
    version = build["openmpi"]["version"]
    assert smoke["allreduce"]["ranks"] == 3
    assert f"Open MPI v{version}" in smoke["allreduce"]["library"]
    # with UCX built in, pml ucx still declines by itself without an RDMA device
    assert smoke["allreduce"]["details"]["pml"] == "ob1"
    hvd = smoke["horovod"]
    assert hvd["ok"] and hvd["ranks"] == 3
    assert sorted(set(hvd["hosts"])) == ["node1", "node2", "node3"]
    assert all(r["exact"] for r in hvd["sizes"])

    prints = {
        n: json.loads(cluster.ssh(n, f"cat {PREFIX}/current/FINGERPRINT.json").stdout)
        for n in ("node1", "node2", "node3")
    }
    fingerprints = {p["fingerprint"] for p in prints.values()}
    assert len(fingerprints) == 1
    fp = fingerprints.pop()
    assert {p["builder"] for p in prints.values()} == {"node1"}
    assert (build["artifacts"] / f"stack-{fp}.tar.gz").is_file()
    for node in ("node1", "node2", "node3"):
        assert on_path(cluster, node) == f"{PREFIX}/current/bin/mpirun"
        stacks = cluster.ssh(node, f"ls -A {PREFIX}/stacks").stdout.split()
        assert stacks == [fp], node  # nothing half-installed beside it
        library = cluster.ssh(node, "python -m mpi4py --mpi-lib-version").stdout
        assert f"Open MPI v{version}" in library
        marked = cluster.ssh(
            node, "grep -l MPICLUSTER_BUILD= /proc/[0-9]*/environ 2>/dev/null | wc -l"
        ).stdout.strip()
        assert marked == "0", f"{node}: build processes still running"
    check_cuts(cluster, "node3")
    # Built once: only the builder has a compiler; the others got the tree by copy.
    assert cluster.ssh("node1", "command -v gcc", check=False).returncode == 0
    for node in ("node2", "node3"):
        assert cluster.ssh(node, "command -v gcc", check=False).returncode != 0, node
    assert cluster.ssh("node1", "ls -A /var/tmp/mpicluster").stdout.strip() == ""
    if build["variant"].ucx:
        check_ucx(cluster, cuda=build["variant"].cuda)
    if build["variant"].cuda:
        assert "Horovod without GPU operations (NCCL)" in done.stderr  # CPU PyTorch here
        assert "(CPU build)" in done.stderr  # the plan names the PyTorch build it installs
        check_gpu_stack(cluster, version, build["work"])
        for node in ("node1", "node2", "node3"):  # no GPU, no RDMA: no peer-memory module
            assert cluster.ssh(node, f"test ! -e {PEERMEM_CONF}", check=False).returncode == 0


def check_cuts(cluster, node: str) -> None:
    """What the stack leaves unbuilt (stack/recipe.py: OPENMPI_CUTS), on a node that got
    the tree by copy: MPI-IO is OMPIO's, no ROMIO (4.1's romio321, 5.x's romio341); the
    HTML manuals left out, the man pages kept."""
    info = cluster.ssh(node, f"{PREFIX}/current/bin/ompi_info --parsable").stdout
    assert "mca:io:ompio:version:" in info and "mca:io:romio" not in info, info[-2000:]
    kept = cluster.ssh(node, f"ls {PREFIX}/current/share/doc/openmpi", check=False)
    assert kept.returncode != 0, kept.stdout
    man = cluster.ssh(node, f"ls {PREFIX}/current/share/man/man1/mpirun.1*", check=False)
    assert man.returncode == 0, man.stderr


def check_gpu_stack(cluster, version: str, work: Path) -> None:
    """What `up` built for the GPU path, on nodes without a GPU: a CUDA-aware Open MPI,
    NCCL with device code for sm_90, nccl-tests linked against that NCCL and MPI."""
    for node in ("node1", "node2", "node3"):
        info = cluster.ssh(node, f"{PREFIX}/current/bin/ompi_info --parsable --all").stdout
        assert "mpi_built_with_cuda_support:value:true" in info, node
        assert f"ompi:version:full:{version}" in info
        # a login's PATH and LD_LIBRARY_PATH (/etc/environment) find the stack's programs
        ldd = cluster.ssh(node, "ldd $(command -v all_reduce_perf)").stdout
        found = {
            line.split("=>")[0].strip(): line.split("=>")[1].split("(")[0].strip()
            for line in ldd.splitlines()
            if "=>" in line
        }
        assert found["libnccl.so.2"].startswith(f"{PREFIX}/"), ldd
        mpi = next(path for name, path in found.items() if name.startswith("libmpi.so"))
        assert mpi.startswith(f"{PREFIX}/"), ldd
        assert "not found" not in ldd, ldd
    real = cluster.ssh("node2", f"readlink -f {PREFIX}/current/lib/libnccl.so").stdout.strip()
    library = work / "libnccl.so"
    assert copy_out("node2", real, library), f"could not copy {real} out of node2"
    assert {(ELF, 90), (PTX, 90)} <= fatbin_entries(library)  # SASS and PTX for sm_90
    # the link stub of libcuda (no driver here) stayed in the build folder
    stub = cluster.ssh("node1", f"find {PREFIX} -name 'libcuda.so*' | head -1").stdout
    assert stub.strip() == ""


def copy_out(node: str, source: str, target: Path) -> bool:
    """Copy a binary file out of a node's container (podman cp)."""
    from mpicluster.local.host import podman_env

    def podman(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["podman", *args], capture_output=True, text=True, env=podman_env(), check=False
        )

    label = f"label=io.mpicluster.network=mpicluster-{NAME}"
    names = podman("ps", "--filter", label, "--format", "{{.Names}}").stdout.split()
    name = next((n for n in names if f"_{node}_" in n), None)
    if name is None:
        return False
    return podman("cp", f"{name}:{source}", str(target)).returncode == 0 and target.exists()


def test_second_up_builds_and_changes_nothing(build):
    done = mpicluster("up", str(build["inventory"]), "--json", check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "already active on node1, node2, node3" in done.stderr
    result = json.loads(done.stdout)
    assert (result["path"], result["hosts"]) == ("unchanged", {}), result["why"]
    # The no-op proves MPI (the matrix and mpi4py at once) and says Horovod waits.
    smoke = result["smoke"]
    assert smoke["ok"] and smoke["allreduce"]["ok"], smoke
    assert smoke["horovod"]["skipped"].startswith("the stack is unchanged"), smoke["horovod"]
    # (the GPU part: its reason not to run, on these --cuda nodes without GPUs)
    assert set(smoke["parts"]) - {"gpu"} == {"ssh env matrix", "mpi4py"}, smoke["parts"]
    assert "Horovod allreduce skipped: the stack is unchanged" in done.stderr
    done = mpicluster("up", str(build["inventory"]), "--json", "--full", check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout)
    assert {n: h["changed"] for n, h in result["hosts"].items()} == {
        "node1": 0,
        "node2": 0,
        "node3": 0,
    }
    horovod = result["smoke"]["horovod"]
    assert horovod["ok"] and not horovod["skipped"] and horovod["sizes"], horovod


def test_doctor_passes_on_the_built_stack_and_finds_a_dropping_firewall(build):
    """Doctor's checks against the built stack (versions from its fingerprint, the env
    block with the runtime's variables), then the classic hidden hang: a node dropping
    the high ports mpirun's daemons (ORTE's orted, PRRTE's prted) call back on."""
    inventory, cluster, version = build["inventory"], build["cluster"], build["openmpi"]["version"]
    code, report = doctor(inventory)
    assert (code, problems(report)) == (0, set()), json.dumps(report, indent=1)[-6000:]
    versions = next(c for c in report["checks"] if c["name"] == "versions")
    assert all(f"Open MPI {version} (fingerprint " in r["evidence"] for r in versions["results"])
    # the fabric check read the built Open MPI's components with its own ompi_info
    fabric = next(c for c in report["checks"] if c["name"] == "fabric")
    assert all(
        "no RDMA devices" in r["evidence"] and "Open MPI has " in r["evidence"]
        for r in fabric["results"]
    ), fabric
    if build["variant"].ucx:
        assert all("pml:ucx" in r["evidence"] for r in fabric["results"]), fabric
    if build["variant"].cuda:  # GPUs built for, not there: no health or GPUDirect to judge
        gpus = next(c for c in report["checks"] if c["name"] == "gpus")
        assert [r["evidence"] for r in gpus["results"]] == [
            "stack.gpus_present is false: the GPU stack is built for these nodes, "
            "their GPUs are not expected (no nvidia-smi check)"
        ], gpus
    launch = next(c for c in report["checks"] if c["name"] == "launch")
    across = next(r for r in launch["results"] if r["node"] is None)
    assert (
        f"one rank on each of 3 nodes: allreduce exact, Open MPI v{version}" in across["evidence"]
    )
    rule = "INPUT -p tcp --dport 1024:65535 -j DROP"
    cluster.ssh("node2", f"sudo iptables -I {rule}")
    try:
        code, report = doctor(inventory)
        assert code == 5
        found = problems(report)
        assert ("ports", "node2", "fail") in found
        # the launch across nodes hangs and is put on node2, with what ports saw
        assert ("launch", "node2", "fail") in found
        allowed = {
            ("ports", "node2", "fail"),
            ("mesh", "node2", "fail"),
            ("launch", "node2", "fail"),
        }
        assert found <= allowed, found
        launch = next(c for c in report["checks"] if c["name"] == "launch")
        (result,) = [r for r in launch["results"] if r["status"] == "fail"]
        assert "the ports check saw:" in result["evidence"], result
        # the hung launches' daemons on node2 never heard mpirun: doctor ended them
        # (PRRTE's; ORTE's end when their connection gives up)
        if not version.startswith("4."):
            left = cluster.ssh("node2", "pgrep -a -f '[/]prted ' || true").stdout
            assert left.strip() == "", left
    finally:
        cluster.ssh("node2", f"sudo iptables -D {rule}")


def test_a_damaged_stack_is_named_by_doctor_and_up_installs_it_again_from_the_pack(build):
    """Files of the built stack changed after `up` on each node (a library truncated, a
    program's mode, mpi4py deleted from the venv): doctor's stack check names each by its
    manifest; `up` installs those nodes' trees again from the pack, without a rebuild;
    then doctor passes and the next `up` is a no-op again."""
    cluster, inventory = build["cluster"], build["inventory"]
    root = f"{PREFIX}/current"
    library = cluster.ssh("node2", f"readlink -f {root}/lib/libmpi.so").stdout.strip()
    cluster.ssh("node2", f"sudo truncate -s 4096 {library}")
    cluster.ssh("node3", f"sudo chmod 0644 {root}/bin/prted")
    find = "import mpi4py, os; print(os.path.dirname(mpi4py.__file__))"
    site = cluster.ssh("node1", f"{root}/venv/bin/python -c '{find}'").stdout.strip()
    cluster.ssh("node1", f"sudo rm -rf {site}")
    code, report = doctor(inventory, "--check", "stack")
    assert code == 5
    assert problems(report) == {("stack", n, "fail") for n in ("node1", "node2", "node3")}
    evidence = {r["node"]: r["evidence"] for r in report["checks"][0]["results"]}
    name = library.rsplit("/", 1)[1]
    assert f"lib/{name} changed (size (4096 bytes, was " in evidence["node2"], evidence
    assert "bin/prted changed (mode (0644, was 0755))" in evidence["node3"], evidence
    assert "/site-packages/mpi4py/ missing (" in evidence["node1"], evidence

    done = mpicluster("up", str(inventory), "--json", check=False, timeout=1800)
    assert done.returncode == 0, done.stderr[-6000:]
    assert "install from the artifact cache on node1, node2, node3" in done.stderr
    assert "node2's files differ from the stack's manifest" in done.stderr
    assert "build on" not in done.stderr and "Compile Open MPI" not in done.stderr
    assert json.loads(done.stdout)["smoke"]["ok"]
    code, report = doctor(inventory, "--check", "stack", "--deep")
    assert (code, problems(report)) == (0, set()), report
    assert all("sha256 of every file" in r["evidence"] for r in report["checks"][0]["results"])
    done = mpicluster("up", str(inventory), "--json", check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout)
    assert (result["path"], result["hosts"]) == ("unchanged", {}), result["why"]


def test_a_corrupted_or_truncated_artifact_is_refused_with_its_path(build, tmp_path):
    """node4 joins the cluster (no stack yet), then `up` from a copy of the artifact cache
    with the pack damaged: refused before any change, the file named, nothing installed
    on node4 (the next test's `up` installs it from the good cache)."""
    cluster = build["cluster"]
    start_local_cluster(NAME, 4, SUBNET, build["generated"], *build["variant"].local_options)
    build["rewrite"]()
    assert cluster.ssh("node4", f"test -e {PREFIX}", check=False).returncode == 1
    copy = tmp_path / "artifacts"
    shutil.copytree(build["artifacts"], copy)
    (pack,) = copy.glob("stack-*.tar.gz")
    whole = pack.read_bytes()
    inventory = with_stack(
        build["generated"],
        tmp_path / "damaged.yaml",
        build["variant"],
        build["openmpi"],
        build["work"] / "sources",
        copy,
    )
    for damage in ("one bit flipped", "truncated"):
        pack.write_bytes(
            whole[: len(whole) // 2]
            if damage == "truncated"
            else whole[:4096] + bytes([whole[4096] ^ 1]) + whole[4097:]
        )
        done = mpicluster("up", str(inventory), check=False)
        assert done.returncode == 1, (damage, done.stderr[-3000:])
        assert f"artifact cache: {pack} does not match the sha256 recorded" in done.stderr
        assert "Running playbooks/site.yml" not in done.stderr, damage
        left = cluster.ssh("node4", f"ls -A {PREFIX} 2>/dev/null; true").stdout.strip()
        assert left == "", (damage, left)


def test_node_added_later_installs_from_the_cache(build):
    # node4 joined in the test before (again here when run alone: `local up` keeps it)
    start_local_cluster(NAME, 4, SUBNET, build["generated"], *build["variant"].local_options)
    inventory = build["rewrite"]()
    done = mpicluster("up", str(inventory), "--json", check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "install from the artifact cache on node4" in done.stderr
    result = json.loads(done.stdout)
    assert result["hosts"]["node4"]["changed"] > 0
    assert result["smoke"]["ok"] and result["smoke"]["horovod"]["ranks"] == 4
    cluster = build["cluster"]
    assert on_path(cluster, "node4") == f"{PREFIX}/current/bin/mpirun"
    assert cluster.ssh("node4", "command -v gcc", check=False).returncode != 0
    assert "build on" not in done.stderr  # from the artifact cache, no rebuild


@FAULTS
def test_a_node_killed_during_the_copy_is_named_and_the_next_up_finishes(build):
    cluster, inventory = build["cluster"], str(build["inventory"])
    done = mpicluster("down", inventory, "--nodes", "node4", check=False)  # the copy to do
    assert done.returncode == 0, done.stderr[-4000:]
    assert cluster.ssh("node4", f"test -e {PREFIX}", check=False).returncode == 1
    run = Started("up", inventory, "--json")
    run.wait_for("[stack_install] Copy the pack")
    time.sleep(1)
    podman(cluster, "node4", "kill")
    try:
        assert run.finish() == 4, run.stderr[-3000:]
        hosts = json.loads(run.stdout)["hosts"]
        assert hosts["node4"]["status"] == "unreachable"
        assert hosts["node4"]["failures"][0].startswith("stack_install: "), hosts["node4"]
        assert {hosts[n]["status"] for n in ("node1", "node2", "node3")} <= {"ok", "changed"}
    finally:
        podman(cluster, "node4", "start")
    wait_for_ssh(cluster, "node4")
    assert on_path(cluster, "node4") == ""
    assert cluster.ssh("node4", f"test -e {PREFIX}/current", check=False).returncode == 1
    done = mpicluster("up", inventory, check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "install from the artifact cache on node4" in done.stderr  # no rebuild
    fp = json.loads(cluster.ssh("node4", f"cat {PREFIX}/current/FINGERPRINT.json").stdout)
    stacks = cluster.ssh("node4", f"ls -A {PREFIX}/stacks").stdout.split()
    assert stacks == [fp["fingerprint"]]  # what the killed copy left is gone
    assert half_written(cluster, "node4") == []


#: node4's active tree moved aside and made to look older, and its stacks folder a
#: symbolic link into /dev/shm (a tmpfs) with 100 MiB left: the pack does not fit.
SMALL_DISK = f"""
set -e
cd {PREFIX}
fp=$(readlink current | sed 's|^stacks/||')
mv stacks/$fp previous && rmdir stacks && ln -sfn previous current
cp previous/FINGERPRINT.json /root/FINGERPRINT.json.saved
sed -i "s/\\"$fp\\"/\\"0ld$fp\\"/" previous/FINGERPRINT.json
mkdir -p /dev/shm/stacks && ln -s /dev/shm/stacks stacks
free=$(df --output=avail -k /dev/shm | tail -1)
fallocate -l $(( (free - 102400) * 1024 )) /dev/shm/filler
echo $fp
"""

RESTORE = f"""
set -e
cd {PREFIX}
rm -f /dev/shm/filler stacks && rm -rf /dev/shm/stacks && mkdir stacks
mv previous stacks/$FP && cp /root/FINGERPRINT.json.saved stacks/$FP/FINGERPRINT.json
ln -sfn stacks/$FP current
"""


#: A job of the MPI user on node4's active stack (its Python with mpi4py loaded).
JOB = (
    "runuser -u vagrant -- sh -c 'nohup /opt/mpicluster/current/venv/bin/python -c "
    '"import mpi4py, time; mpi4py.rc.initialize = False; from mpi4py import MPI; '
    "time.sleep(600)\" >/dev/null 2>&1 & echo $!'"
)


@FAULTS
def test_a_full_disk_during_the_copy_names_node_and_path_and_keeps_the_active_stack(build):
    """node4's active stack made to look older: first `up` refuses to switch it under a
    running job, then (the job gone) the switch fails on a full disk and names both."""
    cluster, inventory = build["cluster"], str(build["inventory"])
    fp = podman_exec(cluster, "node4", SMALL_DISK).stdout.split()[-1]
    try:
        job = podman_exec(cluster, "node4", JOB).stdout.split()[-1]
        time.sleep(3)  # mpi4py loaded
        done = mpicluster("up", inventory, check=False)
        podman_exec(cluster, "node4", f"kill {job}")
        assert done.returncode == 1, done.stderr[-3000:]
        assert f"node4: a job is running on the active stack (pid {job}: " in done.stderr
        assert "switching to the new stack would pull the stack from under it" in done.stderr
        assert "Running playbooks/site.yml" not in done.stderr
        done = mpicluster("up", inventory, "--json", check=False)
        assert done.returncode == 3, done.stderr[-4000:]
        hosts = json.loads(done.stdout)["hosts"]
        assert {n for n, h in hosts.items() if h["status"] == "failed"} == {"node4"}
        failure = " ".join(hosts["node4"]["failures"])
        assert f"stack {fp} not installed in {PREFIX}/stacks" in failure, failure
        assert "No space left on device" in failure or "ENOSPC" in failure, failure
        assert "the active stack is unchanged" in failure
        assert cluster.ssh("node4", f"readlink {PREFIX}/current").stdout.strip() == "previous"
        assert on_path(cluster, "node4") == f"{PREFIX}/current/bin/mpirun"
        assert podman_exec(cluster, "node4", "ls -A /dev/shm/stacks").stdout.strip() == ""
    finally:
        podman_exec(cluster, "node4", f"FP={fp}\n{RESTORE}")
    # node4 as it was: test_stack_run's first `up` finds every node's stack active
