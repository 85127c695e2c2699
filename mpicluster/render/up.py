"""`up` and `smoke`: the per-host table, the ssh env matrix, the allreduce figures (CPU,
then GPU)."""

from __future__ import annotations

from rich.markup import escape

from mpicluster.down.teardown import DownResult
from mpicluster.nodes.ansible_run import PlaybookResult
from mpicluster.render.display import Display, mark, styled
from mpicluster.slurm.smoke_steps import SlurmSmoke
from mpicluster.smoke import ucx_info
from mpicluster.smoke.steps import AllreduceResult, GpuSmoke, SmokeReport
from mpicluster.up.preview import UpPreview
from mpicluster.up.provision import UpResult
from mpicluster.util.text import message_size

TITLES = {
    "mpi4py": "MPI allreduce",
    "horovod": "Horovod allreduce",
    "nccl-tests": "NCCL all_reduce_perf (nccl-tests)",
    "cuda": "CUDA-aware MPI allreduce (device memory)",
    "torch": "torch.distributed allreduce (NCCL)",
}


def show_up(display: Display, result: UpResult) -> None:
    _show_hosts(display, f"mpicluster up: {result.cluster}", result.playbook)
    if result.smoke is not None:
        show_smoke(display, result.smoke)


def show_down(display: Display, result: DownResult) -> None:
    if result.rest is not None:
        display.info(f"the other nodes, provisioned again without {', '.join(result.nodes)}:")
        show_up(display, result.rest)
        if result.playbook is None:
            display.error(
                f"{', '.join(result.nodes)} not taken down: the other nodes still trust it",
                "fix what failed above and run the same `mpicluster down --node` again",
            )
    _show_hosts(display, f"mpicluster down: {result.cluster}", result.playbook, log=False)
    if result.playbook is None:
        return
    for name, stats in result.playbook.hosts.items():
        for path, action in sorted(stats.actions.items()):
            display.detail(f"{name}: {action} {path}")
    if result.state == "removed":
        display.info("the cluster's key and state on this machine: removed")
    else:
        display.info(f"log: {result.playbook.log}")
        if result.playbook.unreachable_hosts or result.playbook.failed_hosts:
            display.info(
                "the cluster's key and state on this machine are kept: run the same "
                "`mpicluster down` again once every node can be reached"
            )


def show_preview(display: Display, result: UpPreview) -> None:
    """`up --dry-run`: one line per node, then what would change on it."""
    rows = [
        [
            escape(node.name),
            escape(node.system),
            _record_word(node.record, node.changed_since),
            escape(node.stack),
            f"{len(node.files)} of {len(node.files) + node.files_same}",
        ]
        for node in result.nodes
    ]
    display.table(
        f"mpicluster up --dry-run: {result.cluster} (nothing was changed)",
        ["node", "system", "last up", "MPI stack", "files to write"],
        rows,
    )
    reasons = {node.record for node in result.nodes if node.record}
    for node in result.nodes:
        if node.record and len(reasons) > 1:
            display.info(f"{node.name}: {node.record}")
        for path in node.changed_since:
            display.info(f"{node.name}: {path} changed since the last up: up puts it back")
        for change in node.files:
            display.info(f"{node.name}: {change.path}: {PREVIEW_STATES[change.state]}")
        for words in node.users:
            display.info(f"{node.name}: {words}")
        if node.cordon:
            display.info(f"{node.name}: {node.cordon}: left out of the smoke test")
    for note in result.notes:
        display.info(note)
    if result.runs_playbooks:
        display.info(f"up would run every task: {result.why}")
    else:
        display.info("up would change nothing: every node matches the last up's record")


def _record_word(record: str, changed_since: list[str]) -> str:
    """The node against the last up's record, in a word: none (no record), differs (this
    run's inputs are not the record's), edited (a file changed on it since), matches."""
    if "has no record" in record:
        return "none"
    if record:
        return "differs"
    return "edited" if changed_since else "matches"


PREVIEW_STATES = {
    "new": "would be written (not there yet)",
    "differs": "would be rewritten (its content differs)",
    "mode": "its mode would be set again",
    "unreadable": "cannot be read here: up decides on the node",
}


def preview_summary(result: UpPreview) -> str:
    changing = sum(1 for node in result.nodes if node.files or node.changed_since or node.users)
    if not result.runs_playbooks:
        return f"cluster {result.cluster}: up would change nothing (dry run, nothing changed)"
    return (
        f"cluster {result.cluster}: up would run every task; files would change on "
        f"{changing} of {len(result.nodes)} node(s) (dry run, nothing changed)"
    )


def up_summary(result: UpResult) -> str:
    done = "verified" if result.smoke is not None else "left unverified (--no-smoke)"
    nodes = f"cluster {result.cluster}: {result.nodes} node(s)"
    if result.path == "unchanged":
        return f"{nodes} unchanged since the last up and {done} in {result.seconds:.0f} s"
    return f"{nodes} provisioned ({result.changes} change(s)) and {done} in {result.seconds:.0f} s"


def down_summary(result: DownResult) -> str:
    changes = sum(s.changed for s in result.playbook.hosts.values()) if result.playbook else 0
    where = ", ".join(result.nodes)
    tail = "; key and state removed" if result.state == "removed" else ""
    return f"cluster {result.cluster}: {where} taken down ({changes} change(s)){tail}"


def _show_hosts(
    display: Display, title: str, playbook: PlaybookResult | None, *, log: bool = True
) -> None:
    if playbook is not None:
        rows = [
            [
                escape(name),
                styled(stats.status),
                stats.ok,
                stats.changed,
                stats.failed,
                stats.unreachable,
                f"{stats.seconds:.0f}s",
            ]
            for name, stats in playbook.hosts.items()
        ]
        display.table(
            f"{title} ({playbook.seconds:.0f} s)",
            ["host", "status", "ok", "changed", "failed", "unreachable", "time"],
            rows,
        )
        for name, stats in playbook.hosts.items():
            for failure in stats.failures[:3]:
                display.error(f"{name}: {failure}")
        if log:
            display.info(f"log: {playbook.log}")
        display.info(f"rerun by hand: {playbook.command}")


def show_smoke(display: Display, report: SmokeReport) -> None:
    nodes = report.nodes
    if len(nodes) <= 32:
        rows = []
        for source in nodes:
            cells = []
            for target in nodes:
                pair = report.pair(source, target)
                cells.append("-" if pair is None else mark(pair.ok, "ok", "X"))
            rows.append([escape(source), *cells])
        display.table("ssh env matrix (row: from, column: to)", ["from \\ to", *nodes], rows)
    else:
        good = sum(p.ok for p in report.pairs)
        display.info(f"ssh env matrix: {good}/{len(report.pairs)} pairs ok")
    if report.sampled:
        display.info(
            f"ssh env matrix: {len(report.pairs)} of {len(nodes)}x{len(nodes)} pairs tried (ring "
            f"and a sample, seed {report.seed}); `mpicluster smoke --all-pairs` tries every pair"
        )
    for pair in report.pairs:
        if not pair.ok:
            display.error(f"{pair.source} -> {pair.target}: {pair.problem}")
    for run in (report.allreduce, report.horovod):
        if run is not None:
            _show_allreduce(display, run)
    if report.gpu is not None:
        _show_gpu(display, report.gpu)
    if report.slurm is not None:
        _show_slurm(display, report.slurm)


def _show_slurm(display: Display, slurm: SlurmSmoke) -> None:
    rows = [
        [step.name, mark(step.ok, "ok", "FAILED"), escape(step.detail or step.problem)]
        for step in slurm.steps
    ]
    display.table(f"Slurm (controller {escape(slurm.controller)})", ["step", "", "seen"], rows)
    for step in slurm.steps:
        if not step.ok:
            display.error(f"Slurm {step.name}: {step.problem}")
            if step.cause:
                display.info(f"likely cause: {step.cause}")
            if step.command:
                display.info(f"command: {step.command}")


def _show_gpu(display: Display, gpu: GpuSmoke) -> None:
    if gpu.not_run:
        display.info(f"GPU smoke test not run: {gpu.not_run}")
    for run in gpu.runs:
        _show_allreduce(display, run)


def _show_allreduce(display: Display, run: AllreduceResult) -> None:
    title = TITLES.get(run.kind, run.kind)
    if run.skipped:
        display.info(f"{title}: skipped ({run.skipped})")
    elif run.ok:
        rows = [
            [
                r["elements"],
                message_size(r["bytes"]),
                f"{r['seconds'] * 1e3:.3f}",
                f"{r['algbw_gbs']:.3f}",
                f"{r['busbw_gbs']:.3f}",
                _exact(r["exact"]),
            ]
            for r in run.sizes
        ]
        display.table(
            escape(
                f"{title}: {run.ranks} ranks on {len(set(run.hosts))} nodes from {run.head} "
                f"({run.library})"
            ),
            ["elements", "size", "time (ms)", "algbw (GB/s)", "busbw (GB/s)", "result"],
            rows,
        )
        for line in [*_transport(run), *_gpu_facts(run)]:
            display.info(line)
    else:
        display.error(f"{title} from {run.head}: {run.problem}", run.cause)
        if run.output_tail:
            display.detail(run.output_tail)


def _gpudirect(run: AllreduceResult) -> list[str]:
    """Whether NCCL's InfiniBand/RoCE traffic went straight from GPU memory."""
    direct = run.details.get("gpudirect_rdma")
    if not direct or set(run.details.get("nccl_network") or {}) == {"Socket"}:
        return []
    if direct["used"]:
        return [f"  GPUDirect RDMA: used ({', '.join(direct['enabled'])})"]
    return [
        "  GPUDirect RDMA: not used: NCCL staged GPU memory through host memory "
        f"(off for {', '.join(direct['disabled']) or 'every card'}; load nvidia-peermem, "
        "see `mpicluster doctor`)"
    ]


def _transport(run: AllreduceResult) -> list[str]:
    """Which of Open MPI's PMLs carried the run, or NCCL's network, as its ranks said."""
    chosen = run.details.get("nccl_network")
    if chosen:
        names = ", ".join(f"{name} {devices}".strip() for name, devices in chosen.items())
        note = (
            " (TCP sockets: no InfiniBand/RoCE NCCL could use)" if set(chosen) == {"Socket"} else ""
        )
        return [f"  NCCL's network: {names}{note}", *_gpudirect(run)]
    pml = run.details.get("pml")
    if not pml:
        return []
    what = {"ob1": "Open MPI's own BTLs: TCP between nodes", "ucx": "UCX"}.get(pml)
    if "," in pml:
        what = "ranks selected different PMLs: they cannot all talk"
    line = f"  carried by pml {pml}" + (f" ({what})" if what else "")
    ucx = run.details.get("ucx")
    return [line, _ucx_line(ucx)] if ucx and "ucx" in pml.split(",") else [line]


def _ucx_line(ucx: dict) -> str:
    """What the UCX that carried the run offers on one node, as its ucx_info listed it:
    "UCX 1.22.0 on node1: self, tcp (eth0, lo), sysv, posix, cma, cuda_copy, cuda_ipc"
    (network devices named; shared memory's and the GPU's stand-in names left out)."""
    named = []
    for transport, devices in ucx.get("transports", {}).items():
        shown = [d for d in devices if not ucx_info.PLACEHOLDER_DEVICES.fullmatch(d)]
        named.append(f"{transport} ({', '.join(shown)})" if shown else transport)
    version = f" {ucx['version']}" if ucx.get("version") else ""
    said = ", ".join(named) or "no transport listed"
    if ucx.get("problem"):
        said = f"{said}; {ucx['problem']}" if named else ucx["problem"]
    return f"  UCX{version} on {ucx['node']}: {said}"


def _exact(exact: bool | None) -> str:
    return styled("skip", "unchecked") if exact is None else mark(exact, "exact")


def _gpu_facts(run: AllreduceResult) -> list[str]:
    """The lines under a GPU run's table: its GPUs, and what the kind reports besides."""
    lines = []
    if run.devices:
        counts: dict[str, int] = {}
        for name in run.devices:
            counts[name] = counts.get(name, 0) + 1
        lines.append("  GPUs: " + ", ".join(f"{n} x {name}" for name, n in counts.items()))
    if run.details.get("avg_busbw_gbs") is not None:
        lines.append(f"  average bus bandwidth: {run.details['avg_busbw_gbs']:g} GB/s")
    nccl = run.details.get("nccl")
    if nccl:
        loaded = nccl.get("loaded") or "none mapped (linked into PyTorch?)"
        lines.append(f"  NCCL: PyTorch built with {nccl.get('torch_built_with')}, loaded {loaded}")
    return lines
