"""The one-box proof's GPU runs. tests/gpu/onebox.py starts each as soon as what it needs
is built; they take the GPU one at a time, so that no run's figures share it.

- gpu-probes (at once; the box's own Python and PyTorch, gpu_probes.py): what the box
  itself moves without MPI (a device-to-device copy; a copy through CUDA IPC between two
  processes) and where pinning host memory fails (cuMemHostRegister of 128 MiB, the size
  smcuda registers, on anonymous memory and on files in /dev/shm and in the folder Open
  MPI's session files go to);
- ucx-perftest (after UCX): UCX's own tag bandwidth between two processes on device
  memory, 64 MiB messages, and the protocols and transports UCX used;
- torch (after Open MPI): torch_allreduce.py, a world of one, as in the first round;
- cuda (after the CUDA allreduce program): the smoke test's MPI_Allreduce on device
  pointers, 2 ranks sharing the GPU, four ways (CUDA_VARIANTS): the stack's defaults
  (coll/ucc on), coll_ucc_enable 0 (the first round's coll/cuda path), pml ucx
  (point-to-point on UCX's CUDA transports), and coll/cuda with Open MPI's shared-memory
  files moved to /dev/shm (does smcuda's cuMemHostRegister work there?); then the
  issue's goal: 10 GB/s at 64 MiB carried by coll/ucc;
- nccl-tests (after nccl-tests): all_reduce_perf, one rank (NCCL wants a GPU per rank);
- mpi4py (after the python lane; mpi4py_cuda.py): the stack's mpi4py on PyTorch CUDA
  tensors, Allreduce, Bcast and Sendrecv, float32 and float16.

Each MPI run says what carried it: the PML each rank selected (pml_base_verbose), the coll
components Open MPI stacked on each communicator (coll_base_verbose 9,
coll_base_comm_select.c: "coll:base:comm_select: selecting ucc, priority 100, Enabled"),
coll/ucc's word on each call (coll_ucc_verbose 3, coll_ucc_allreduce.c and its kin:
"running ucc allreduce", then "running fallback allreduce" where UCC declined), UCC's
transport layer for each collective (UCC_COLL_TRACE=info, rank 0, src/core/ucc_coll.c:
"coll_init: Allreduce sum inplace: dst={0x.., 16777216, float32, cuda}; CL_BASIC
{TL_CUDA}, team_id 1"), and the protocols UCX used (UCX_PROTO_INFO=used: a table per
operation, "... from cuda/GPU0", with its transports, printed as a UCP worker closes,
src/ucp/proto/proto_debug.c). UCC's and UCX's logs go to standard error (UCC_LOG_FILE,
UCX_LOG_FILE): rank 0's standard output holds its JSON line alone, whatever the C and the
Python buffers do. These formats are read from the sources and not yet seen on a GPU: a
parser that finds nothing records nothing, and every run's whole output is in logs.tar.gz.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: The programs the runs start besides the stack's own.
TORCH_PROGRAM = REPO / "mpicluster" / "remote" / "rank_programs" / "torch_allreduce.py"
PROBES = Path(__file__).with_name("gpu_probes.py")
MPI4PY_PROGRAM = Path(__file__).with_name("mpi4py_cuda.py")
#: The issue's goal: MPI_Allreduce of 64 MiB on device memory, 2 ranks on the one GPU.
GOAL_GBS = 10.0
LARGE = 16777216  # floats: 64 MiB, the largest of the smoke test's GPU sizes
#: The coll framework's selection and coll/ucc's word on each call.
WHO_CARRIED = ("--mca", "coll_base_verbose", "9", "--mca", "coll_ucc_verbose", "3")
#: UCC's transport layer per collective and UCX's protocols, on standard error.
TRACES = (
    "UCC_COLL_TRACE=info",
    "UCC_LOG_FILE=stderr",
    "UCX_PROTO_INFO=used",
    "UCX_LOG_FILE=stderr",
)
#: The CUDA allreduce's four runs: the options each adds to the stack's defaults.
CUDA_VARIANTS = {
    "cuda": (),
    "cuda-coll-cuda": ("--mca", "coll_ucc_enable", "0"),
    "cuda-pml-ucx": ("--mca", "pml", "ucx"),
    # opal's mmap shmem puts its files in the session folder unless told (-1: try /dev/shm)
    "cuda-shm": (
        "--mca", "coll_ucc_enable", "0", "--mca", "shmem_mmap_relocate_backing_file", "-1",
    ),
}  # fmt: skip
#: Seconds a run needs at least; one that would start later is recorded as not run.
LEAST = 15

#: Open MPI's own warnings in a run's output ("The call to cuMemHostRegister(...) failed").
OMPI_WARNING = re.compile(r"The call to (\w+)\(")
COLL_SELECTED = re.compile(
    r"coll:base:comm_select: selecting\s+(\w+), priority\s+(-?\d+), (Enabled|Disabled)"
)
UCC_CALL = re.compile(r"\(\) running (ucc|fallback) (\w+)\s*$", re.MULTILINE)
UCC_TRACE = re.compile(r"coll_init: (\w+)([^;\n]*); (\w+) \{([^}]*)\}")
UCC_BUFFER = re.compile(r"(src|dst)=\{[^,}]*, (\d+), (\w+), (\w+)\}")
#: ucx_perftest -f -v: its CSV line (iterations, latencies, average and overall MB/s, rates).
PERFTEST_CSV = re.compile(r"^\s*\d+,[\d.]+,[\d.]+,[\d.]+,([\d.]+),([\d.]+),[\d.]+,[\d.]+\s*$")


def run_env(stack: str, cuda_home: str) -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{stack}/bin:{env['PATH']}"
    env["LD_LIBRARY_PATH"] = ":".join(
        p for p in (f"{stack}/lib", f"{cuda_home}/lib64", env.get("LD_LIBRARY_PATH")) if p
    )
    env.pop("PYTHONPATH", None)  # the box's own Python packages for torch, not the carried ones
    return env


class Runs:
    """The GPU runs of one proof: `plan()` gives each with the lane it waits for."""

    def __init__(self, rec, logs: Path, extra: dict, cuda_home: str, ends: float, sh):
        self.rec, self.logs, self.ends, self.sh = rec, logs, ends, sh
        layout, fingerprint = extra["mpicluster_layout"], extra["mpicluster_stack_fingerprint"]
        self.stack = f"{layout['stacks']}/{fingerprint}"
        self.env = run_env(self.stack, cuda_home)
        self.mpirun = [f"{self.stack}/bin/mpirun", "--allow-run-as-root", "--oversubscribe"]
        self.exports = ["-x", "LD_LIBRARY_PATH", "-x", "PATH"]
        self.traces = [arg for variable in TRACES for arg in ("-x", variable)]
        self.gpu = threading.Lock()

    def plan(self) -> dict:
        return {
            "gpu-probes": (None, self.probes),
            "ucx-perftest": ("ucx", self.ucx_perftest),
            "torch": ("mpi", self.torch),
            "cuda": ("cuda_allreduce", self.cuda),
            "nccl-tests": ("nccl_tests", self.nccl_tests),
            "mpi4py": ("python", self.mpi4py),
        }

    def command(self, kind: str, argv: list[str], timeout: float) -> tuple[int, str] | None:
        """`argv` with the GPU to itself, its output kept in logs; None (recorded as not
        run) when the proof has no time left for it."""
        with self.gpu:
            left = self.ends - time.monotonic()
            if left < LEAST:
                self.rec.step(f"run:{kind}", False, 0, not_run="the proof's time ran out")
                return None
            code, out = self.sh(argv, timeout=min(timeout, left), env=self.env)
        (self.logs / f"run-{kind}.txt").write_text(" ".join(argv) + "\n\n" + out)
        return code, out

    def judged(self, kind: str, code: int, out: str):
        from mpicluster.smoke import steps as smoke

        stdout = "\n".join(line for line in out.splitlines() if not line.startswith("["))
        base = smoke.AllreduceResult(False, "box", "cuda" if kind.startswith("cuda") else kind)
        judge = smoke.judge_nccl_tests if kind == "nccl-tests" else smoke.judge_report
        return judge(base, code, stdout, out, [])

    def record(self, kind: str, judged, code: int, seconds: float, **details) -> bool:
        result = {k: v for k, v in vars(judged).items() if k not in ("output_tail", "head")}
        ok = judged.ok and not judged.skipped
        self.rec.step(f"run:{kind}", ok, seconds, exit=code, result=result, **details)
        self.rec.data["figures"][kind] = figures(judged)
        return ok

    def smoke_program(
        self, kind: str, argv: list[str], program: str, timeout: float = 60, traced: bool = True
    ):
        """Run and judge one of the smoke test's programs: (judged, what carried it where
        `traced`: an MPI run with the settings above), or None where it did not run."""
        if not Path(program).exists() or not Path(self.mpirun[0]).exists():
            self.rec.step(f"run:{kind}", False, 0, not_run=f"not built: {program}")
            return None
        start = time.monotonic()
        got = self.command(kind, argv, timeout)
        if got is None:
            return None
        code, out = got
        judged = self.judged(kind, code, out)
        if not traced:
            self.record(kind, judged, code, time.monotonic() - start)
            return judged, {}
        who = carried(out)
        self.record(kind, judged, code, time.monotonic() - start, carried=who)
        self.rec.data["figures"][kind]["carried_by"] = who["allreduce"]
        return judged, who

    def torch(self) -> None:
        from mpicluster.smoke import steps as smoke

        program = str(TORCH_PROGRAM)
        nccl_env = ["-x", "NCCL_DEBUG=INFO", "-x", "NCCL_DEBUG_SUBSYS=INIT,NET"]
        argv = [
            *self.mpirun, "-np", "1", *self.exports, *nccl_env, sys.executable, program,
            "127.0.0.1", "29511", *map(str, smoke.GPU_SIZES),
        ]  # fmt: skip
        self.smoke_program("torch", argv, program, traced=False)

    def nccl_tests(self) -> None:
        from mpicluster.smoke import nccl_tests

        program = f"{self.stack}/bin/all_reduce_perf"
        nccl_env = ["-x", "NCCL_DEBUG=INFO", "-x", "NCCL_DEBUG_SUBSYS=INIT,NET"]
        # ONLY_FUNCS built the ring/simple kernels alone: NCCL must not pick another
        nccl_env += ["-x", "NCCL_ALGO=Ring", "-x", "NCCL_PROTO=Simple"]
        argv = [
            *self.mpirun, "-np", "1", *self.exports, *nccl_env, program,
            *nccl_tests.ALL_REDUCE_ARGS,
        ]  # fmt: skip
        self.smoke_program("nccl-tests", argv, program, traced=False)

    def cuda(self) -> None:
        """The CUDA allreduce, its four ways in turn; then the goal."""
        from mpicluster.cluster.layout import CUDA_ALLREDUCE
        from mpicluster.smoke import steps as smoke

        program = f"{self.stack}/{CUDA_ALLREDUCE}"
        rates: dict[str, float | None] = {}
        carriers: dict[str, str] = {}
        for kind, options in CUDA_VARIANTS.items():
            argv = [
                *self.mpirun, "-np", "2", *self.exports, *self.traces, *smoke.PML_VERBOSE,
                *WHO_CARRIED, *options, program, *map(str, smoke.GPU_SIZES),
            ]  # fmt: skip
            got = self.smoke_program(kind, argv, program)
            if got is not None:
                rates[kind] = rate_at(got[0].sizes, LARGE)
                carriers[kind] = got[1]["allreduce"]
        self.goal(rates, carriers)

    def goal(self, rates: dict[str, float | None], carriers: dict[str, str]) -> None:
        """The issue's figure: the default run's 64 MiB allreduce, carried by coll/ucc."""
        self.rec.data["figures"]["allreduce_64mib_gbs"] = rates
        reached = rates.get("cuda")
        ok = reached is not None and reached >= GOAL_GBS and carriers.get("cuda") == "coll/ucc"
        self.rec.step(
            "goal:allreduce_64mib",
            ok,
            0,
            wanted=f">= {GOAL_GBS} GB/s by coll/ucc, 2 ranks on one GPU",
            reached_gbs=reached,
            carried_by=carriers.get("cuda"),
            by_variant=rates,
        )

    def ucx_perftest(self) -> None:
        """UCX's tag bandwidth on device memory between two processes of this box (a
        server and a client on the loopback), with the protocols UCX chose."""
        perftest = f"{self.stack}/bin/ucx_perftest"
        if not Path(perftest).exists():
            self.rec.step("run:ucx-perftest", False, 0, not_run=f"not built: {perftest}")
            return
        common = ["-t", "tag_bw", "-m", "cuda", "-s", str(LARGE * 4), "-n", "20", "-w", "3"]
        common += ["-f", "-v", "-p", "13337"]
        env = {**self.env, "UCX_PROTO_INFO": "used", "UCX_LOG_FILE": "stderr"}
        argv = [perftest, "127.0.0.1", *common]
        start = time.monotonic()
        with self.gpu:
            if self.ends - time.monotonic() < LEAST:
                self.rec.step("run:ucx-perftest", False, 0, not_run="the proof's time ran out")
                return
            code, out = self.client_server(perftest, common, argv, env)
        (self.logs / "run-ucx-perftest.txt").write_text(" ".join(argv) + "\n\n" + out)
        rates = [float(m.group(2)) for m in map(PERFTEST_CSV.match, out.splitlines()) if m]
        gbs = round(rates[-1] * 2**20 / 1e9, 2) if rates else None
        self.rec.data["figures"]["ucx-perftest"] = {"bytes": LARGE * 4, "gbs": gbs}
        self.rec.step(
            "run:ucx-perftest",
            code == 0 and gbs is not None,
            time.monotonic() - start,
            exit=code,
            gbs=gbs,
            protocols=ucx_protocols(out),
        )

    def client_server(self, perftest: str, common: list[str], argv: list[str], env: dict):
        server = subprocess.Popen(
            [perftest, *common],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            env=env,
            start_new_session=True,
        )
        time.sleep(2)  # listening before the client connects
        code, out = self.sh(argv, timeout=60, env=env)
        try:
            server_out, _ = server.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGKILL)
            server_out, _ = server.communicate()
        return code, f"[client]\n{out}\n[server, exit {server.returncode}]\n{server_out}"

    def probes(self) -> None:
        from mpicluster.util.text import json_line

        program = PROBES
        # where Open MPI's session files go by default (PRRTE's prte_tmpdir_base)
        folders = ["/dev/shm", os.environ.get("TMPDIR") or "/tmp"]
        start = time.monotonic()
        got = self.command("gpu-probes", [sys.executable, str(program), *folders], 150)
        if got is None:
            return
        code, out = got
        report = json_line(out)
        ok = code == 0 and bool(report) and bool(report.get("ok"))
        self.rec.step(
            "run:gpu-probes",
            ok,
            time.monotonic() - start,
            exit=code,
            result=report or {"tail": out[-1500:]},
        )
        if report:
            self.rec.data["figures"]["box"] = {
                key: report.get(key) for key in ("d2d_copy", "cuda_ipc", "host_register")
            }

    def mpi4py(self) -> None:
        from mpicluster.smoke import steps as smoke
        from mpicluster.util.text import json_line

        found = importlib.util.find_spec("torch")
        if found is None or not found.origin:
            self.rec.step("run:mpi4py", False, 0, not_run="no PyTorch in the box's Python")
            return
        torch_site = str(Path(found.origin).parents[1])
        program = str(MPI4PY_PROGRAM)
        python = f"{self.stack}/venv/bin/python"
        argv = [
            *self.mpirun, "-np", "2", *self.exports, *self.traces, *smoke.PML_VERBOSE,
            *WHO_CARRIED, python, program, "--torch-path", torch_site,
        ]  # fmt: skip
        got = self.smoke_program("mpi4py", argv, python, timeout=120)
        if got is None:
            return
        stdout = (self.logs / "run-mpi4py.txt").read_text(errors="replace").splitlines()
        report = json_line("\n".join(x for x in stdout if not x.startswith("["))) or {}
        where = report.get("mpi4py", "")
        self.rec.data["figures"]["mpi4py"].update(
            mpi4py=where, stack_own=where.startswith(self.stack), checks=report.get("checks")
        )
        if not where.startswith(self.stack):
            self.rec.step("run:mpi4py:whose", False, 0, mpi4py=where, wanted_under=self.stack)


def rate_at(sizes: list[dict], elements: int) -> float | None:
    return next((s.get("algbw_gbs") for s in sizes if s.get("elements") == elements), None)


def figures(judged) -> dict:
    """The largest size's bandwidths, for the GPU tables (docs/gpu.md, docs/measurements.md)."""
    if not judged.sizes:
        return {}
    last = judged.sizes[-1]
    return {
        key: last.get(key) for key in ("bytes", "algbw_gbs", "busbw_gbs", "seconds") if key in last
    }


def carried(out: str) -> dict:
    """What carried an MPI run, from the lines the verbose settings above print."""
    from mpicluster.smoke import steps as smoke

    calls = Counter(f"{path} {coll}" for path, coll in UCC_CALL.findall(out))
    return {
        "allreduce": allreduce_carrier(calls),
        "pml": smoke.selected_pmls(out),
        "coll_selected": sorted(
            {f"{name} {priority} {state}" for name, priority, state in COLL_SELECTED.findall(out)},
            key=lambda item: -int(item.split()[1]),
        ),
        "coll_ucc_calls": dict(calls),
        "ucc_collectives": ucc_collectives(out),
        "ucx_protocols": ucx_protocols(out),
        "open_mpi_warnings": sorted(set(OMPI_WARNING.findall(out))),
    }


def allreduce_carrier(calls: Counter) -> str:
    """coll/ucc says "running ucc allreduce" on every call it takes, and then "running
    fallback allreduce" where UCC declined and the next component ran it."""
    taken, declined = calls["ucc allreduce"], calls["fallback allreduce"]
    if taken and not declined:
        return "coll/ucc"
    if taken:
        return f"coll/ucc for {taken - declined} of {taken} calls, the next component for the rest"
    return "not coll/ucc"


def ucc_collectives(out: str) -> dict[str, int]:
    """UCC's collectives as rank 0 traced them, "Allreduce 16777216 float32 cuda -> CL_BASIC
    {TL_CUDA}", with how often."""
    seen: Counter = Counter()
    for coll, args, cl, tls in UCC_TRACE.findall(out):
        buffers = {kind: info for kind, *info in UCC_BUFFER.findall(args)}
        buffer = buffers.get("dst") or buffers.get("src")
        label = f"{coll} {' '.join(buffer)}" if buffer else coll
        seen[f"{label} -> {cl} {{{tls}}}"] += 1
    return dict(seen.most_common(30))


def ucx_protocols(out: str) -> list[str]:
    """The rows of UCX's used-protocol tables whose operation names device memory ("...
    from cuda/GPU0"), each as "<operation>: <count> | <range> | <description> | <config>"."""
    found: list[str] = []
    title: list[str] = []
    in_body = False
    for line in out.splitlines():
        at = line.find("| ")
        if at < 0 or not line.rstrip().endswith("|"):
            continue
        cells = [cell.strip() for cell in line[at:].strip().strip("|").split("|")]
        if len(cells) == 1:
            title, in_body = ([] if in_body else title) + [cells[0]], False
            continue
        if cells[0] in ("Count", "Range") or not title:
            continue
        in_body = True
        if "cuda" in " ".join(title).lower():
            found.append(f"{' / '.join(title)}: {' | '.join(cells)}")
    return list(dict.fromkeys(found))[:40]
