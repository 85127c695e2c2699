"""The smoke test: proves a provisioned cluster works, and names what is broken when not.

(a) From every node to every node, a non-interactive `ssh peer` must see the MPI
    bin directory in PATH, the library directory in LD_LIBRARY_PATH, and `mpirun`
    resolving to the managed install: a node x node matrix. Above pairs.SAMPLE_ABOVE
    nodes each node logs in to its ring neighbour, a seeded sample and itself (every
    node's environment is seen through a fresh login; doctor judges every pair's
    trust from the nodes' files); `--all-pairs` keeps the whole N x N.
(b) An MPI allreduce across all nodes, launched from the head node with
    `mpirun --hostfile`, exact result checked at several sizes, timings reported
    (at the same time as (a), and counted only when (a) passed; beside it the stack's
    ucx_info lists what UCX offers a rank, where the stack has UCX); then Horovod's, when
    the stack has it (a no-op `up`, whose probes proved the stack unchanged, says it
    is skipped: `--full` runs it).
(c) On GPU nodes (a source stack with stack.gpus_present), one rank per GPU:
    nccl-tests' all_reduce_perf, MPI_Allreduce on device memory (the stack's
    CUDA-aware Open MPI) and torch.distributed over NCCL.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from mpicluster import remote
from mpicluster.cluster import layout, mpirun
from mpicluster.cluster.inventory import Node
from mpicluster.cluster.layout import Layout
from mpicluster.cluster.mpi_settings import mpirun_network_args
from mpicluster.cluster.mpirun import Mpirun
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.nodes import head_mpi, mpi_version, pairs, ssh_failures, transport
from mpicluster.slurm import SlurmSmoke, run_slurm_smoke
from mpicluster.smoke import nccl_tests, ucx_info
from mpicluster.util.text import json_line, last_line

ALLREDUCE_SIZES = [1, 1024, 65536, 1048576]
PAIR_TIMEOUT = 10
#: Logins a node has open at once in the ssh matrix (the peers' sshd see about as many).
PAIR_WORKERS = 4
#: The GPU runs (NCCL's setup across nodes takes a while before the first size).
GPU_KINDS = ("nccl-tests", "cuda", "torch")
GPU_TIMEOUT = 300
GPU_SIZES = [1, 1024, 1048576, 16777216]
#: torch.distributed's rendezvous on the first GPU node (PyTorch's usual port).
TORCH_MASTER_PORT = 29500
GPUS_ABSENT = "stack.gpus_present is false: built for GPUs, none to run on"


@dataclass
class PairResult:
    source: str
    target: str
    ok: bool
    problem: str = ""


@dataclass
class AllreduceResult:
    ok: bool
    head: str
    kind: str = "mpi4py"
    ranks: int = 0
    hosts: list[str] = field(default_factory=list)
    library: str = ""
    sizes: list[dict] = field(default_factory=list)
    problem: str = ""
    cause: str = ""
    output_tail: str = ""
    command: str = ""
    seconds: float = 0.0
    #: Why this run was left out (then ok is true and nothing else is set).
    skipped: str = ""
    #: The GPU of each rank, by name (GPU runs).
    devices: list[str] = field(default_factory=list)
    #: What a kind reports beyond the table: nccl-tests' average bus bandwidth,
    #: the NCCL that PyTorch was built with and the one it loaded.
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class GpuSmoke:
    """The GPU part: the runs made, or why none was."""

    not_run: str = ""
    runs: list[AllreduceResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(run.ok for run in self.runs)

    def to_dict(self) -> dict:
        return {
            "ok": self.ok,
            "not_run": self.not_run or None,
            "runs": [asdict(run) for run in self.runs],
        }


@dataclass
class SmokeReport:
    nodes: list[str]
    pairs: list[PairResult]
    allreduce: AllreduceResult | None
    seconds: float = 0.0
    horovod: AllreduceResult | None = None
    #: None when the inventory lists no GPUs.
    gpu: GpuSmoke | None = None
    #: The seed of the matrix's ring and sample; None when it tried every pair.
    seed: int | None = None
    #: None without a scheduler.
    slurm: SlurmSmoke | None = None
    #: Seconds each part took (the ssh env matrix and mpi4py run at once).
    parts: dict[str, float] = field(default_factory=dict)

    @property
    def sampled(self) -> bool:
        return self.seed is not None

    @property
    def matrix_ok(self) -> bool:
        return all(p.ok for p in self.pairs)

    @property
    def ok(self) -> bool:
        mpi_ok = self.matrix_ok and self.allreduce is not None and self.allreduce.ok
        extras = (self.horovod, self.gpu, self.slurm)
        return mpi_ok and all(extra is None or extra.ok for extra in extras)

    def pair(self, source: str, target: str) -> PairResult | None:
        return next((p for p in self.pairs if p.source == source and p.target == target), None)

    def to_dict(self) -> dict:
        return {
            "ok": self.ok,
            "nodes": self.nodes,
            "matrix_ok": self.matrix_ok,
            "pairs": [asdict(p) for p in self.pairs],
            "allreduce": asdict(self.allreduce) if self.allreduce else None,
            "horovod": asdict(self.horovod) if self.horovod else None,
            "gpu": self.gpu.to_dict() if self.gpu else None,
            "sampled": self.sampled,
            "seed": self.seed,
            "slurm": self.slurm.to_dict() if self.slurm else None,
            "seconds": self.seconds,
            "parts": self.parts,
        }


#: Why the framework-level runs (Horovod's, torch.distributed's) are left out of a no-op
#: `up`: the probes proved every node's stack the one these runs passed on.
UNCHANGED = (
    "the stack is unchanged since the up that ran it (the probes verified its files by its "
    "manifest); `mpicluster up --full` or `mpicluster smoke` runs it"
)
#: The MPI runs that need more than MPI: a framework on top of it.
FRAMEWORK_KINDS = ("horovod", "torch")


def run_smoke(
    plan: ClusterPlan, on_progress=None, *, all_pairs: bool = False, frameworks: bool = True
) -> SmokeReport:
    """`frameworks` false: Horovod's and torch.distributed's runs are reported skipped
    (a no-op `up`, whose probes proved the stack unchanged); the rest runs."""
    progress = on_progress or (lambda message: None)
    started = time.monotonic()
    count = len(plan.nodes)
    seed = pairs.seed_for(plan.cluster) if pairs.is_sampled(count, all_pairs) else None
    parts: dict[str, float] = {}
    tried, allreduce = _matrix_and_allreduce(plan, progress, seed, parts)
    horovod = gpu = None
    if allreduce.ok and plan.layout.install == "source" and plan.stack.horovod.enabled:
        if frameworks:
            progress("Smoke test: Horovod allreduce across all nodes (PyTorch)")
            horovod = _timed(parts, "horovod", run_allreduce, plan, kind="horovod")
        else:
            progress(f"Smoke test: Horovod allreduce skipped: {UNCHANGED}")
            horovod = AllreduceResult(True, plan.nodes[0].name, "horovod", skipped=UNCHANGED)
    if plan.has_gpus:
        gpu = _timed(parts, "gpu", run_gpu_smoke, plan, allreduce, progress, frameworks)
    slurm = None
    if plan.scheduler:
        slurm = _timed(parts, "slurm", run_slurm_smoke, plan, progress)
    report = SmokeReport(
        [n.name for n in plan.nodes], tried, allreduce, 0.0, horovod, gpu, seed, slurm
    )
    report.parts = {part: round(seconds, 1) for part, seconds in parts.items()}
    report.seconds = time.monotonic() - started
    return report


def _timed(parts: dict[str, float], part: str, function, *args, **kwargs):
    started = time.monotonic()
    try:
        return function(*args, **kwargs)
    finally:
        parts[part] = time.monotonic() - started


def _matrix_and_allreduce(
    plan: ClusterPlan, progress, seed: int | None, parts: dict[str, float]
) -> tuple[list[PairResult], AllreduceResult]:
    """The ssh env matrix and the MPI allreduce, at once (neither waits on the other:
    the cluster's ssh config bounds how long an mpirun over a broken login can take).
    A failed matrix leaves the allreduce uncounted, whatever it did: mpirun may start
    a node whose logins see the wrong PATH (by its prefix) and a user's job may not."""
    count = len(plan.nodes)
    if seed is not None:
        progress(
            f"Smoke test: ssh env from every node to its ring neighbour, {pairs.PER_NODE - 1} "
            f"sampled nodes and itself ({count} nodes, seed {seed}; --all-pairs for "
            f"{count}x{count}), and the MPI allreduce across all nodes (mpi4py), at once"
        )
    else:
        progress(
            f"Smoke test: ssh env from every node to every node ({count}x{count}) and the MPI "
            "allreduce across all nodes (mpi4py), at once"
        )
    order = peer_order([n.name for n in plan.nodes], seed)
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="smoke") as pool:
        matrix = pool.submit(_timed, parts, "ssh env matrix", env_matrix, plan, order)
        mpi = pool.submit(_timed, parts, "mpi4py", run_allreduce, plan)
        tried, allreduce = matrix.result(), mpi.result()
    bad = sum(not p.ok for p in tried)
    if bad:
        did = "passed" if allreduce.ok else f"failed: {allreduce.problem}"
        allreduce.ok = False
        allreduce.problem = (
            f"not counted: {bad} node pair(s) failed the env check (it ran beside it and {did})"
        )
        allreduce.cause = (
            "mpirun needs working ssh and PATH between every pair; fix the matrix first"
        )
    return tried, allreduce


def peer_order(names: list[str], seed: int | None = None) -> dict[str, list[str]]:
    """Each node's peers in round-robin order, itself last: in round r node i logs in to
    node i+r, so with a few logins at once per node every sshd sees a few at a time.
    (The same list on every node sent all N logins into node1's sshd at once: beyond its
    MaxStartups, 10 by default, sshd drops them; seen on 32 local nodes.) With a seed:
    doctor's plan of a ring and a seeded sample (every pair when there are few nodes)."""
    plan = pairs.plan(names, all_pairs=seed is None, seed=seed or 0)
    return {name: [*targets, name] for name, targets in plan.items()}


def env_matrix(plan: ClusterPlan, order: dict[str, list[str]]) -> list[PairResult]:
    names = [n.name for n in plan.nodes]

    def command(node: Node) -> str:
        spec = {"peers": order[node.name], "timeout": PAIR_TIMEOUT, "workers": PAIR_WORKERS}
        return f"{remote.PYTHON} - {shlex.quote(json.dumps(spec))}"

    # logins run PAIR_WORKERS at a time: give a large cluster's rounds time to finish
    timeout = PAIR_TIMEOUT * 3 + 30 + max(len(peers) for peers in order.values()) // 2
    results = transport.run_everywhere(
        plan, command, stdin=remote.script("rank_programs/env_probe"), timeout=timeout
    )
    judged: list[PairResult] = []
    for source in names:
        result = results[source]
        targets = [name for name in names if name in order[source]]  # in inventory order
        if not result.ok:
            reason = result.error or last_line(result.stderr) or f"exited {result.exit_code}"
            judged += [
                PairResult(source, target, False, f"cannot run the probe on {source}: {reason}")
                for target in targets
            ]
            continue
        try:
            probes = {p["peer"]: p for p in json.loads(result.stdout)}
        except (json.JSONDecodeError, KeyError, TypeError):
            bad = f"bad probe output on {source}"
            judged += [PairResult(source, target, False, bad) for target in targets]
            continue
        judged += [_judge(source, target, probes.get(target), plan.layout) for target in targets]
    return judged


def _judge(source: str, target: str, probe: dict | None, lay: Layout) -> PairResult:
    if probe is None:
        return PairResult(source, target, False, "no probe result")
    if probe["rc"] != 0:
        return PairResult(source, target, False, _ssh_problem(source, target, probe))
    env = probe["env"]
    missing, missing_libs = lay.missing_dirs(env.get("PATH"), env.get("LD_LIBRARY_PATH"))
    if missing:
        return PairResult(
            source,
            target,
            False,
            f"PATH on {target} (non-interactive ssh) lacks {', '.join(missing)}: the "
            f"mpicluster block in {target}:{layout.ENVIRONMENT_FILE} is missing or overridden; "
            "rerun `mpicluster up`",
        )
    if missing_libs:
        return PairResult(
            source,
            target,
            False,
            f"LD_LIBRARY_PATH on {target} (non-interactive ssh) lacks {', '.join(missing_libs)}: "
            f"check {target}:{layout.ENVIRONMENT_FILE}",
        )
    mpirun = env.get("MPIRUN", "")
    if mpirun != f"{lay.mpi_bin}/mpirun":
        found = mpirun or "nothing"
        return PairResult(
            source,
            target,
            False,
            f"`command -v mpirun` on {target} gives {found}, not {lay.mpi_bin}/mpirun: "
            "another MPI comes first in PATH, or the install is missing",
        )
    return PairResult(source, target, True)


def _ssh_problem(source: str, target: str, probe: dict) -> str:
    cause = ssh_failures.classify(probe["stderr"], probe["rc"])
    why = ssh_failures.why(cause, target, command="env")
    seen = ssh_failures.evidence(probe["stderr"], probe["rc"])
    return f"ssh {source} -> {target}: {why} ({seen})"


def gpu_not_run(plan: ClusterPlan, mpi: AllreduceResult | None) -> str:
    """Why the GPU runs are left out on an inventory with GPUs ("" when they run)."""
    if plan.stack.install != "source":
        return (
            "stack.install is packages: the distribution's MPI comes without NCCL, "
            "nccl-tests or a CUDA-aware build"
        )
    if not plan.stack.gpus_present:
        return GPUS_ABSENT
    if mpi is None or not mpi.ok:
        return "the MPI allreduce failed: the GPU runs need MPI across the nodes first"
    return ""


def gpu_skipped(plan: ClusterPlan, kind: str) -> str:
    """Why one GPU run is left out: what the inventory did not build ("" when it runs)."""
    stack = plan.stack
    if kind == "nccl-tests" and not stack.nccl_tests.enabled:
        return "stack.nccl_tests.enabled is false: all_reduce_perf is not built"
    if kind == "cuda" and stack.openmpi.cuda is False:
        return "stack.openmpi.cuda is false: Open MPI is not CUDA-aware"
    if kind == "torch" and not stack.pytorch.enabled:
        return "stack.pytorch.enabled is false: the stack's Python has no PyTorch"
    return ""


def run_gpu_smoke(
    plan: ClusterPlan, mpi: AllreduceResult | None, progress, frameworks: bool = True
) -> GpuSmoke:
    reason = gpu_not_run(plan, mpi)
    if reason:
        return GpuSmoke(not_run=reason)
    head = plan.nodes[0].name
    runs: list[AllreduceResult] = []
    for kind in GPU_KINDS:
        hung = next((r.kind for r in runs if r.problem.startswith("mpirun hung")), None)
        skipped = gpu_skipped(plan, kind) or (
            f"not run: the {hung} run hung (and would again)" if hung else ""
        )
        if not skipped and not frameworks and kind in FRAMEWORK_KINDS:
            progress(f"Smoke test: {kind} allreduce skipped: {UNCHANGED}")
            skipped = UNCHANGED
        if skipped:
            runs.append(AllreduceResult(True, head, kind, skipped=skipped))
            continue
        progress(f"Smoke test: {kind} allreduce on {plan.total_gpus} GPU(s)")
        runs.append(run_allreduce(plan, GPU_TIMEOUT, kind))
    return GpuSmoke(runs=runs)


PROGRAM = {"mpi4py": "allreduce.py", "horovod": "hvd_allreduce.py", "torch": "torch_allreduce.py"}
SIZES = {"mpi4py": ALLREDUCE_SIZES, "horovod": [1, 1024, 1048576], "torch": GPU_SIZES}


def gpu_placement(plan: ClusterPlan) -> list[str]:
    """One rank per GPU. The hostfile's slots are each node's GPUs unless the inventory
    sets slots (or lists nodes without GPUs): then the GPU nodes are named instead."""
    if all(n.gpus and n.slots in (None, n.gpus) for n in plan.nodes):
        hosts = ["--hostfile", layout.HOSTFILE, "-np", str(plan.total_gpus)]
    else:
        hosts = mpirun.hosts({n.name: n.gpus for n in plan.gpu_nodes})
    return [*hosts, "--map-by", "slot"]


def smoke_program(plan: ClusterPlan, kind: str) -> list[str]:
    """What each rank runs."""
    if kind == "nccl-tests":
        return [f"{plan.layout.mpi_bin}/all_reduce_perf", *nccl_tests.ALL_REDUCE_ARGS]
    if kind == "cuda":
        return [plan.layout.cuda_allreduce, *map(str, GPU_SIZES)]
    program = [plan.layout.python, f"{layout.SMOKE_DIR}/{PROGRAM[kind]}"]
    if kind == "torch":  # rank 0 runs on the first GPU node, where the rendezvous is
        program += [plan.gpu_nodes[0].host, str(TORCH_MASTER_PORT)]
    return [*program, *map(str, SIZES[kind])]


#: Runs whose mpirun asks Open MPI to say which PML each rank selected: the transport
#: that carried the allreduce (ob1: Open MPI's own BTLs, TCP between nodes without a
#: fast fabric; ucx: UCX, InfiniBand or RoCE where the nodes have it).
PML_REPORTED = frozenset({"mpi4py", "cuda"})
PML_VERBOSE = ("--mca", "pml_base_verbose", "10")
#: pml_base_select.c's lines at that level ("[node1:123] select: component ob1 selected");
#: the framework's own (about 25 lines a rank: "mca: base: components_open: ...") and the
#: peers' check come with them. None of it belongs in what a failure shows.
PML_SELECTED = re.compile(r"select: component (\w+) selected")
PML_CHATTER = re.compile(r"\] (select: |selected \w+ best priority|mca: base: |check:select: )")


def selected_pmls(output: str) -> list[str]:
    """The PMLs the ranks selected (one, unless ranks disagree)."""
    return sorted(set(PML_SELECTED.findall(output)))


#: The CPU runs' ranks per node: each node's slots, up to this many. Several ranks on
#: each of several nodes is a case of its own: Horovod hung in hvd.init() with two ranks
#: on each of two nodes while one per node passed (Open MPI 5.0.7's default binding).
#: More than two would only slow the smoke test on big nodes.
RANKS_PER_NODE = 2


def cpu_placement(plan: ClusterPlan, slots: dict[str, int] | None = None) -> list[str]:
    """Every node, min(its slots, RANKS_PER_NODE) ranks on each; `slots` from the head's
    hostfile (the inventory's slots or GPUs when it could not be read, else 1). No
    --map-by: mpirun's own mapping and binding, as a user's plain mpirun gets them."""
    found = slots or {}
    per_node = {
        n.name: min(found.get(n.name) or n.slots or n.gpus or 1, RANKS_PER_NODE) for n in plan.nodes
    }
    return mpirun.hosts(per_node)


def mpirun_command(
    plan: ClusterPlan,
    major: int,
    user: str,
    kind: str = "mpi4py",
    slots: dict[str, int] | None = None,
) -> str:
    placement = gpu_placement(plan) if kind in GPU_KINDS else cpu_placement(plan, slots)
    options = mpirun_network_args(plan.network, major)
    if kind in PML_REPORTED:
        options += PML_VERBOSE
    if kind == "nccl-tests":
        options += mpirun.exports(nccl_tests.DEBUG_ENV)
    command = Mpirun.of(plan.layout, major, root=user == "root")
    return shlex.join(command.argv(placement, options, smoke_program(plan, kind)))


def run_allreduce(plan: ClusterPlan, timeout: float = 180, kind: str = "mpi4py") -> AllreduceResult:
    head = plan.nodes[0]
    user = plan.node_ssh(head).user
    try:
        mpi = head_mpi.ask(plan)
    except head_mpi.HeadMpiError as exc:
        return AllreduceResult(False, head.name, kind, problem=exc.problem, cause=exc.cause)
    major, slots = mpi.major, mpi.slots
    command = mpirun_command(plan, major, user, kind, slots)
    beside = ucx_node(plan, kind)
    # ucx_info on a node of the run while the ranks run: it adds no time to the smoke
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ucx_info") as pool:
        ucx = pool.submit(ucx_record, plan, beside) if beside else None
        started = time.monotonic()
        result = transport.run_on(
            plan, head, f"timeout -k 10 {int(timeout)} {command}", timeout=timeout + 30
        )
        seconds = time.monotonic() - started
    said = result.stdout + "\n" + result.stderr
    output = "\n".join(
        x
        for x in said.splitlines()
        if not PML_CHATTER.search(x) and not nccl_tests.INFO_LINE.search(x)
    ).strip()
    base = AllreduceResult(
        False,
        head.name,
        kind,
        command=command,
        seconds=seconds,
        output_tail="\n".join(output.splitlines()[-15:]),
    )
    if ucx is not None and (record := ucx.result()):
        base.details["ucx"] = record
    if result.error:
        base.problem, base.cause = "could not run mpirun on the head node", result.error
        return base
    if result.exit_code in (124, 137):
        base.problem = f"mpirun hung for {timeout:.0f} s"
        base.cause = HUNG_CAUSE["gpu" if kind in GPU_KINDS else "cpu"]
        return base
    expected = plan.gpu_nodes if kind in GPU_KINDS else plan.nodes
    judge = judge_nccl_tests if kind == "nccl-tests" else judge_report
    judged = judge(base, result.exit_code, result.stdout, output, expected)
    pmls = selected_pmls(said) if kind in PML_REPORTED else []
    if pmls:
        judged.details["pml"] = ",".join(pmls)
    if kind == "nccl-tests" and (chosen := nccl_tests.networks(said)):
        judged.details["nccl_network"] = chosen
    if kind == "nccl-tests" and (direct := nccl_tests.gpudirect(said)):
        judged.details["gpudirect_rdma"] = direct
    if not judged.ok and (mixed := mixed_mpi(plan)):
        judged.cause = mixed
    return judged


def ucx_node(plan: ClusterPlan, kind: str) -> Node | None:
    """Where ucx_info runs beside a run whose ranks name their PML: the head for the CPU
    run, the first GPU node for the CUDA-aware one (where UCX's CUDA transports show)."""
    if kind not in PML_REPORTED:
        return None
    return plan.gpu_nodes[0] if kind in GPU_KINDS and plan.gpu_nodes else plan.nodes[0]


def ucx_record(plan: ClusterPlan, node: Node) -> dict | None:
    """What the stack's UCX offers a rank on `node`: {"node", "version", "transports"}
    (smoke/ucx_info.py), with "problem" when ucx_info failed or hung; None where the
    stack has no UCX. It only informs: nothing in it fails the smoke."""
    path = f"{plan.layout.mpi_bin}/ucx_info"
    said = transport.run_on(plan, node, ucx_info.command(path), timeout=ucx_info.TIMEOUT + 15)
    record = ucx_info.parse(said.stdout) or {}
    if not said.ok:
        hung = said.exit_code in (124, 137)
        record["problem"] = said.error or (
            f"ucx_info gave no answer in {ucx_info.TIMEOUT} s"
            if hung
            else f"ucx_info exited {said.exit_code}: {last_line(said.stderr) or 'no message'}"
        )
    return {"node": node.name, **record} if record else None


def mixed_mpi(plan: ClusterPlan) -> str | None:
    """Where the nodes' mpirun differ (a mixed cluster with each release's own Open
    MPI), why no MPI world can span them; None where they agree or cannot be asked."""
    command = f"{shlex.quote(plan.layout.mpi_bin + '/mpirun')} --version"
    answers = transport.run_everywhere(plan, command, timeout=30)
    found: dict[str, list[str]] = {}
    for name, answer in answers.items():
        if answer.ok:
            found.setdefault(mpi_version.parse(answer.stdout).name, []).append(name)
    if len(found) < 2:
        return None
    said = "; ".join(f"{', '.join(nodes)}: {mpi}" for mpi, nodes in found.items())
    return (
        f"the nodes run different MPI builds ({said}), and one MPI world needs one: "
        "stack: {install: source} builds the same Open MPI on every node, whatever its release"
    )


HUNG_CAUSE = {
    "cpu": (
        "a firewall blocking MPI's TCP ports between nodes, or MPI using the wrong "
        "interface (set network: in the inventory); run `mpicluster doctor`"
    ),
    "gpu": (
        "a firewall blocking MPI's or NCCL's TCP ports between nodes, NCCL using the "
        "wrong interface (set network: in the inventory, which sets NCCL_SOCKET_IFNAME), "
        "or a GPU that does not answer (nvidia-smi); run `mpicluster doctor`"
    ),
}


def judge_report(
    base: AllreduceResult, exit_code: int, stdout: str, output: str, nodes: list[Node]
) -> AllreduceResult:
    """A run whose rank 0 prints one JSON report (allreduce.py and its kin)."""
    report = json_line(stdout)
    if exit_code != 0 or report is None:
        base.problem = f"mpirun exited {exit_code}"
        base.cause = _mpirun_cause(output, base.kind)
        return base
    if "skipped" in report:
        base.ok, base.skipped = True, str(report["skipped"])
        return base
    base.ranks, base.hosts = report["ranks"], report["hosts"]
    base.library, base.sizes = report["library"], report["results"]
    base.devices = report.get("devices", [])
    if "nccl" in report:
        base.details["nccl"] = report["nccl"]
    missing = _missing_nodes(nodes, base.hosts)
    wrong = [r for r in base.sizes if not r["exact"]]
    if wrong:
        base.problem = (
            f"wrong allreduce result at {wrong[0]['elements']} elements on ranks "
            f"{wrong[0]['wrong_ranks']}"
        )
        base.cause = "data corruption in transit, or ranks running different MPI builds"
    elif missing:
        base.problem = f"no rank ran on {', '.join(missing)}"
        base.cause = "check /etc/mpicluster/hostfile on the head node"
    else:
        base.ok = True
    return base


def judge_nccl_tests(
    base: AllreduceResult, exit_code: int, stdout: str, output: str, nodes: list[Node]
) -> AllreduceResult:
    """nccl-tests' all_reduce_perf: its table, footer and exit status."""
    parsed = nccl_tests.parse(stdout)
    base.sizes = [nccl_tests_size(row) for row in parsed.rows]
    base.ranks = len(parsed.devices)
    base.hosts = [d.host for d in parsed.devices]
    base.devices = [d.name for d in parsed.devices]
    if parsed.version:
        base.library = f"nccl-tests {parsed.version}, NCCL {parsed.nccl}"
    base.details = {
        "avg_busbw_gbs": parsed.avg_busbw_gbs,
        "out_of_bounds": parsed.out_of_bounds,
        "min_bw_check": parsed.min_bw_check or None,
    }
    wrong = parsed.wrong_rows
    missing = _missing_nodes(nodes, base.hosts)
    if wrong:
        elements = wrong[0].out_of_place.wrong or wrong[0].in_place.wrong
        base.problem = (
            f"wrong allreduce result at {wrong[0].bytes} bytes ({elements} wrong elements)"
        )
        base.cause = "data corruption between GPUs (NVLink, PCIe or the network)"
    elif parsed.min_bw_check == "FAILED":
        base.problem = (
            f"average bus bandwidth {parsed.avg_busbw_gbs:g} GB/s is below NCCL_TESTS_MIN_BW"
        )
        base.cause = "a slow link between GPUs or nodes, or NCCL on the wrong interface"
    elif exit_code != nccl_tests.OK:
        base.problem = f"all_reduce_perf exited {exit_code} ({nccl_tests.exit_meaning(exit_code)})"
        base.cause = parsed.failures[-1] if parsed.failures else _mpirun_cause(output, base.kind)
    elif not parsed.complete:
        base.problem = "all_reduce_perf printed no result summary"
        base.cause = _mpirun_cause(output, base.kind)
    elif missing:
        base.problem = f"no rank ran on {', '.join(missing)}"
        base.cause = "check /etc/mpicluster/hostfile and the nodes' gpus: in the inventory"
    else:
        base.ok = True
    return base


def nccl_tests_size(row: nccl_tests.Row) -> dict:
    """One row of all_reduce_perf in the shape of the allreduce programs' results
    (out-of-place figures; in-place beside them)."""
    out = row.out_of_place
    wrong = [w for w in (out.wrong, row.in_place.wrong) if w is not None]
    return {
        "elements": row.count,
        "bytes": row.bytes,
        "iterations": None,
        "seconds": out.time_us / 1e6,
        "algbw_gbs": out.algbw_gbs,
        "busbw_gbs": out.busbw_gbs,
        "exact": row.exact,
        "wrong_ranks": [],
        "wrong_elements": sum(wrong) if wrong else None,
        "in_place": asdict(row.in_place),
    }


def _missing_nodes(nodes: list[Node], hosts: list[str]) -> list[str]:
    seen = {h.split(".")[0].lower() for h in hosts}
    return [n.name for n in nodes if n.name.split(".")[0].lower() not in seen]


def _mpirun_cause(output: str, kind: str = "mpi4py") -> str:
    own = [line.strip() for line in output.splitlines() if line.startswith("cuda_allreduce: ")]
    if own:  # the CUDA-aware allreduce names host, rank and the failed call itself
        return own[0]
    text = output.lower()
    if kind == "cuda" and ("segmentation fault" in text or "signal 11" in text):
        return (
            "MPI_Allreduce crashed on device memory: Open MPI is not CUDA-aware on some "
            "node (ompi_info --parsable --all | grep cuda_support)"
        )
    checks = [
        (
            "host key verification failed",
            "the head's ssh does not trust a node's host key (known_hosts)",
        ),
        (
            "permission denied",
            "a node refused the cluster key's login (Permission denied): `mpicluster doctor` "
            "names the node and reads why there (the key's line, from=, AllowUsers, modes)",
        ),
        ("orted: command not found", "Open MPI's orted is not on a node's non-interactive PATH"),
        ("prted: command not found", "Open MPI's prted is not on a node's non-interactive PATH"),
        (
            "unable to reliably start one or more daemons",
            "mpirun could not start its daemon on a node: ssh, PATH or LD_LIBRARY_PATH there",
        ),
        ("not enough slots", "the hostfile has fewer slots than ranks"),
        ("no module named 'mpi4py'", "mpi4py is missing from the Python on some node"),
        ("no module named 'horovod'", "Horovod is missing from the Python on some node"),
        (
            "no route to host",
            "no route between two nodes (routing, an interface down, or a firewall): "
            "`mpicluster doctor` finds the pair",
        ),
        (
            "connection refused",
            "a connection between nodes was refused (a firewall rejecting MPI's ports, or "
            "nothing listening): `mpicluster doctor` finds the pair",
        ),
        (
            "could not access or execute an executable",
            "a program is missing on some node: the stack's all_reduce_perf and "
            "libexec/mpicluster/cuda_allreduce are built only with CUDA; rerun `mpicluster up`",
        ),
        (
            "error while loading shared libraries: libcudart",
            "a node cannot find CUDA's runtime (libcudart): stack.cuda_home/lib64 is not in "
            "LD_LIBRARY_PATH or /etc/ld.so.conf.d",
        ),
        (
            "error while loading shared libraries: libnccl",
            "a node cannot find NCCL (libnccl.so.2) in the stack's lib/",
        ),
        (
            "error while loading shared libraries",
            "a node cannot find the MPI libraries (LD_LIBRARY_PATH / ld.so.conf.d)",
        ),
    ]
    for needle, cause in checks:
        if needle in text:
            return cause
    lines = [line.strip() for line in output.splitlines() if any(c.isalpha() for c in line)]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or ["see the output"])[-1]
