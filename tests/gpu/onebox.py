"""The one-box GPU proof: mpicluster's GPU path on one machine with one GPU, offline.

tests/gpu/prove_on_one_gpu.sh runs it (it says how); by hand:
    python tests/gpu/onebox.py --out DIR [--carry DIR] [--build-only --cuda-archs 9.0]

Second round (issue 55): the stack as `up` builds it for GPU nodes, UCX with CUDA and UCC
beside Open MPI, and the fast path for device buffers measured.

1. Reads this box's node facts with mpicluster's own node probe (remote/nodeinfo.py);
   then, beside the build, captures the GPU as the driver shows it (nvidia-smi -q, its
   XML, nvlink, topo, the query fields doctor reads, the kernel's Xid lines) into
   DIR/captures.tar.gz with those facts: test data for the parsers.
2. Plans the stack with mpicluster.stack.prepare for an inventory of this one box (its
   GPUs as nvidia-smi counts them; UCX with CUDA and UCC on; PyTorch and Horovod off: the
   box's own PyTorch runs the torch programs), offline from the carried source cache and
   wheelhouse. `sources.autogen: control`: UCX's and UCC's tag archives have no
   configure and the box no autotools, so carry.py made their configure on the machine
   with network; the offline plan only takes what it made.
3. Builds it through the stack_build role on localhost (tests/gpu/onebox.yml), in lanes
   (LANES) as build.yml orders them: UCX, then UCC (against UCX and NCCL), then Open MPI
   (--with-ucx, --with-ucc), NCCL beside from the start (for the box's GPU
   architecture, ONLY_FUNCS to fit the time); then the CUDA allreduce program, nccl-tests
   and mpi4py; then the role's verify tasks. Each task's start is written as it happens
   (callback_plugins/onebox_timing.py), so a lane cut by the budget still says where its
   time went.
4. Runs the GPU programs as soon as what they need is built, one at a time on the GPU,
   judged by the smoke test's own judges (onebox_runs.py says which and why).

The critical path on the box's 16 cores: staging (16 s), UCX (76 s on this project's
2-core machine; not yet timed on the box), UCC (not yet timed anywhere: about 230 C files
and 9 CUDA files for one architecture; 60 to 90 s guessed), Open MPI (364 s on the box in
the first round), the CUDA allreduce program (8 s), then its four runs (about a minute):
the first coll/ucc figure about 530 to 600 s in, mpi4py (158 s of its one serial compile
was not enough on the box) about 200 s later. NCCL (49 s there) is off that path: it is
done before UCX. So UCC keeps its NCCL transport layer, as `up` builds it: building UCC
without it would save nothing here, and with two ranks on one GPU NCCL refuses the
communicator (ncclInvalidUsage) and UCC takes its next transport layer for the call
(UCC's tl_nccl_team.c), which the runs show.

The defaults (--budget 410 s for the build, --total 470 s in all) keep the proof within
480 s: they end before Open MPI is in, with UCX's and UCC's build times, the box's own
probes and ucx_perftest. --budget 540 --total 590 (ONEBOX_BUDGET, ONEBOX_TOTAL) reach the
CUDA allreduce runs within one 600 s command; mpi4py's run needs more than one command
holds. What does not fit is stopped and recorded as not run; what finished is run and
recorded.

Every step is timed and recorded in DIR/summary.json (and DIR/onebox.log) whether or
not it worked; the build's and the runs' output goes to DIR/logs.tar.gz. Exit 0 when
everything worked, 1 when a step failed, 2 on bad arguments, 3 when there is no GPU
here (one line, nothing done).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

NO_GPU = 3
#: NCCL's device code for the one collective the proof runs (nccl-tests' all_reduce_perf
#: on floats with sum; one rank takes NCCL's one-rank path, more would take a ring).
ONLY_FUNCS = "AllReduce Sum f32 RING SIMPLE"
#: nvidia-smi as doctor's GPU checks read it, kept as test data.
SMI_CAPTURES = {
    "nvidia-smi.txt": [],
    "nvidia-smi-L.txt": ["-L"],
    "nvidia-smi-q.txt": ["-q"],
    "nvidia-smi-q.xml": ["-q", "-x"],
    "nvidia-smi-q-performance.txt": ["-q", "-d", "PERFORMANCE"],
    "nvidia-smi-nvlink-s.txt": ["nvlink", "-s"],
    "nvidia-smi-topo-m.txt": ["topo", "-m"],
    "nvidia-smi-help-query-gpu.txt": ["--help-query-gpu"],
    # one query per group of fields: a field this driver lacks fails its whole query
    "query-ids.csv": [
        "--query-gpu=index,pci.bus_id,serial,uuid,name,driver_version,compute_cap,"
        "persistence_mode,memory.total,temperature.gpu,power.draw",
        "--format=csv",
    ],
    "query-pcie.csv": [
        "--query-gpu=index,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,"
        "pcie.link.width.max,pcie.link.gen.gpumax,pcie.link.gen.hostmax",
        "--format=csv",
    ],
    "query-ecc.csv": [
        "--query-gpu=index,ecc.mode.current,ecc.errors.uncorrected.volatile.total,"
        "ecc.errors.uncorrected.aggregate.total,retired_pages.pending",
        "--format=csv",
    ],
    "query-events.csv": [
        "--query-gpu=index,clocks_event_reasons.active,clocks_event_reasons.hw_slowdown,"
        "clocks_event_reasons.hw_thermal_slowdown,clocks_event_reasons.hw_power_brake_slowdown,"
        "clocks_event_reasons.sw_thermal_slowdown,clocks_event_reasons.sw_power_cap",
        "--format=csv",
    ],
    "query-throttle.csv": [
        "--query-gpu=index,clocks_throttle_reasons.active,clocks_throttle_reasons.hw_slowdown",
        "--format=csv",
    ],
    "query-remapped-rows.csv": [
        "--query-remapped-rows=gpu_bus_id,remapped_rows.correctable,"
        "remapped_rows.uncorrectable,remapped_rows.pending,remapped_rows.failure",
        "--format=csv",
    ],
}
#: Other facts of the box that the GPU checks and GPUDirect read.
SHELL_CAPTURES = {
    "driver-version.txt": "cat /proc/driver/nvidia/version",
    "modules.txt": "grep -E '^(nvidia|nvidia_peermem|nv_peer_mem|gdrdrv|ib_core)\\b' /proc/modules",
    "dmesg-xid.txt": "dmesg 2>&1 | grep -iE 'NVRM|xid' | tail -n 200",
    "rdma.txt": "ls -l /sys/class/infiniband 2>&1",
    "fabricmanager.txt": "systemctl is-active nvidia-fabricmanager 2>&1; pgrep -a nv-fabricmanager",
    "uname.txt": "uname -a; cat /etc/os-release",
    "tools.txt": "for t in gcc g++ make perl python3 nvcc ldconfig dmesg; do "
    'printf "%s: %s\\n" "$t" "$(command -v $t)"; done; gcc --version | head -1; nvcc --version',
    "libcuda.txt": "ldconfig -p | grep -E 'libcuda\\.so|libnvidia-ml'; "
    "ls -l /usr/local/nvidia/lib*",
    "dcgm.txt": "command -v dcgmi nv-hostengine; dcgmi --version 2>&1 | head -3",
    "kernel-dmabuf.txt": "(zcat /proc/config.gz 2>/dev/null || cat /boot/config-$(uname -r)) "
    "2>&1 | grep -iE 'DMA_SHARED_BUFFER|DMABUF|PCI_P2PDMA' ; ls /sys/kernel/mm/memory_peers 2>&1",
}


class Record:
    """Each step's outcome and time, written to summary.json as it goes."""

    def __init__(self, out: Path):
        self.out = out
        self.started = time.monotonic()
        self.data: dict = {"steps": {}, "figures": {}}
        self.lock = threading.Lock()

    def step(self, name: str, ok: bool, seconds: float, **details) -> None:
        with self.lock:
            self.data["steps"][name] = {"ok": ok, "seconds": round(seconds, 1), **details}
            self.say(f"{name}: {'ok' if ok else 'FAILED'} in {seconds:.0f} s")
            self.save()

    def say(self, line: str) -> None:
        stamp = time.monotonic() - self.started
        text = f"[{stamp:6.0f} s] {line}"
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
        with (self.out / "onebox.log").open("a") as log:
            log.write(text + "\n")

    def save(self) -> None:
        self.data["seconds"] = round(time.monotonic() - self.started, 1)
        (self.out / "summary.json").write_text(json.dumps(self.data, indent=2) + "\n")

    def ok(self, name: str) -> bool:
        return self.data["steps"].get(name, {}).get("ok", False)


def sh(argv, *, timeout: float, env=None, cwd=None) -> tuple[int, str]:
    """(exit status, stdout and stderr together); 124 when it ran past `timeout`, and then
    everything it started is stopped too (its own process group: a lane's make -j and
    compilers outlive a killed ansible-playbook otherwise)."""
    try:
        child = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",  # Open MPI's warnings can carry stray bytes (seen on an H200)
            env=env,
            cwd=cwd,
            shell=isinstance(argv, str),
            start_new_session=True,
        )
    except OSError as exc:
        return 127, str(exc)
    try:
        out, _ = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        out, _ = child.communicate()
        return 124, (out or "") + f"\n[timed out after {timeout:.0f} s]"
    return child.returncode, out


def stop_leftovers(extra_file: Path, marker: str) -> int:
    """Stop what a lane that ran out of time left running: Ansible's workers start
    sessions of their own, and the compilers they started run on. Each build step carries
    the role's build marker in its environment (as `up`'s interrupted builds are found);
    Ansible's own processes name the lanes' variables file. Not the GPU runs, whose
    command lines name the stack's folder: they finish and are recorded. Returns how
    many were stopped."""
    stopped = 0
    for proc in Path("/proc").glob("[0-9]*"):
        if int(proc.name) == os.getpid():
            continue
        try:
            environ = (proc / "environ").read_bytes()
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if f"MPICLUSTER_BUILD={marker}".encode() in environ or str(extra_file).encode() in cmdline:
            with contextlib.suppress(OSError):
                os.kill(int(proc.name), signal.SIGKILL)
                stopped += 1
    return stopped


def gpu_count() -> int:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return 0
    code, out = sh([smi, "-L"], timeout=60)
    return sum(1 for line in out.splitlines() if line.startswith("GPU ")) if code == 0 else 0


def node_facts(rec: Record, captures: Path, cuda_home: str, prefix: str) -> dict:
    """The box's facts as mpicluster's probe reads them on a node: the script, with its
    module_utils beside it."""
    start = time.monotonic()
    remote = REPO / "mpicluster" / "remote"
    env = {**os.environ, "PYTHONPATH": str(remote / "plugins" / "module_utils")}
    code, out = sh(
        [sys.executable, str(remote / "nodeinfo.py"), prefix, cuda_home], timeout=90, env=env
    )
    (captures / "node-facts.json").write_text(out)
    facts = json.loads(out) if code == 0 else {}
    gpus = facts.get("gpus") or {}
    rec.step(
        "facts",
        bool(gpus.get("ok")),
        time.monotonic() - start,
        gpus=gpus,
        cuda_toolkit=facts.get("cuda"),
        os=facts.get("os"),
        rdma=facts.get("rdma"),
    )
    return facts


def capture(rec: Record, captures: Path) -> None:
    """nvidia-smi's outputs and the kernel's view of the GPU, packed at once (kept even if
    the build then runs out of time). Runs beside the build."""
    start = time.monotonic()
    for name, args in SMI_CAPTURES.items():
        code, out = sh(["nvidia-smi", *args], timeout=20)
        (captures / name).write_text(out if code == 0 else f"[exit {code}]\n{out}")
    for name, command in SHELL_CAPTURES.items():
        (captures / name).write_text(sh(command, timeout=10)[1])
    pack(rec.out, captures, "captures.tar.gz")
    rec.step("capture", True, time.monotonic() - start, files=len(list(captures.iterdir())))


def box_plan(work: Path, carry: Path, gpus: int, args: argparse.Namespace):
    """This one box as mpicluster's inventory, planned as `up` plans it."""
    from mpicluster.cluster.inventory import parse_inventory
    from mpicluster.cluster.plan import ClusterPlan

    stack = {
        "install": "source",
        "prefix": str(work / "opt"),
        "cuda_home": args.cuda_home,
        "gpus_present": not args.build_only,
        "openmpi": {"version": args.openmpi, "cuda": True},
        # what `auto` gives GPU nodes, spelled out: the proof is about them
        "ucx": {"enabled": True},
        "ucc": {"enabled": True},
        "nccl": {"only_funcs": args.only_funcs} if args.only_funcs else {},
        "horovod": {"enabled": False},
        "pytorch": {"enabled": False},
    }
    if args.cuda_archs:
        stack["nccl"]["cuda_archs"] = args.cuda_archs
    document = {
        "cluster": "onebox",
        "nodes": [{"name": "box", "address": "127.0.0.1", "gpus": gpus}],
        "stack": stack,
        "sources": {
            "cache": str(carry / "cache"),
            "artifacts": str(work / "artifacts"),
            # the box has no autotools: carry.py made UCX's and UCC's configure
            "autogen": "control",
        },
    }
    return ClusterPlan.of(parse_inventory(json.dumps(document), source="onebox"))


def plan_stack(rec: Record, work: Path, carry: Path, facts: dict, gpus: int, args) -> dict | None:
    """The variables `up` would hand the stack_build role for this box."""
    from mpicluster.stack.prepare import prepare
    from mpicluster.util.errors import MpiclusterError

    start = time.monotonic()
    try:
        plan = box_plan(work, carry, gpus, args)
        planned = prepare(plan, {"box": facts}, rec.say, offline=True)
    except MpiclusterError as exc:
        rec.step("plan", False, time.monotonic() - start, error=str(exc), hint=exc.hint)
        return None
    fingerprint = planned.host_vars["box"]["mpicluster_stack_fingerprint"]
    spec = planned.variables["mpicluster_stack_groups"][fingerprint]
    found_driver_libs = driver_libs_outside(spec, work)
    extra = {
        **planned.variables,
        "mpicluster_stack_fingerprint": fingerprint,
        "mpicluster_layout": plan.layout.as_vars(),
        "stack_build_scratch": str(work / "scratch"),
        "stack_build_jobs": args.jobs,
        "ansible_python_interpreter": sys.executable,
    }
    rec.step(
        "plan",
        True,
        time.monotonic() - start,
        fingerprint=fingerprint,
        versions=spec["record"]["versions"],
        openmpi_configure=spec["openmpi_configure_args"],
        ucx_configure=(spec["ucx"] or {}).get("configure_args"),
        ucc_configure=(spec["ucc"] or {}).get("configure_args"),
        sources={name: source["filename"] for name, source in spec["sources"].items()},
        nccl=spec["nccl"],
        driver_libs_outside_candidates=found_driver_libs,
    )
    return extra


#: The driver's libraries the build links against, and which candidate lists want them
#: (Open MPI's CUDA components want libcuda.so; UCX's and UCC's CUDA support, through
#: files/cuda_link.sh, libcuda and libnvidia-ml, .so or .so.1).
DRIVER_LIBS = ("libcuda.so", "libnvidia-ml.so")


def driver_libs_outside(spec: dict, work: Path) -> dict[str, str] | None:
    """Where the build role would find the driver's libraries in none of the recipe's
    folders (a toolkit without stubs, a driver outside the usual folders, as in a
    container's /usr/local/nvidia), a folder of links to them put first among the
    candidates of Open MPI's and UCX's CUDA support; returned (name: library; empty where
    the driver's are nowhere either) as a finding, None where the recipe's folders do."""
    openmpi = (spec.get("openmpi_cuda") or {}).get("libdir_candidates")
    ucx = ((spec.get("ucx") or {}).get("cuda") or {}).get("libdir_candidates")

    def present(names: tuple[str, ...], folders: list[str] | None) -> bool:
        return not folders or any(Path(d, n).exists() for d in folders for n in names)

    ucx_ok = all(present((name, f"{name}.1"), ucx) for name in DRIVER_LIBS)
    if present(("libcuda.so",), openmpi) and ucx_ok:
        return None
    lists = [folders for folders in (openmpi, ucx) if folders]
    _, out = sh("ldconfig -p", timeout=30)
    seen = [line.split("=>")[-1].strip() for line in out.splitlines() if "=>" in line]
    seen += [str(p) for p in sorted(Path("/usr/local/nvidia").glob("lib*/lib*.so*"))]
    folder = work / "driver-libs"
    folder.mkdir(exist_ok=True)
    found = {}
    for name in DRIVER_LIBS:
        match = next((path for path in seen if Path(path).name.startswith(name)), None)
        if match:
            (folder / name).symlink_to(match)
            found[name] = match
    for candidates in lists if found else ():
        candidates.insert(0, str(folder))
    return found


class Lanes:
    """ansible-playbook runs of tests/gpu/onebox.yml, each a lane of components."""

    def __init__(self, rec: Record, logs: Path, extra: dict, deadline: float):
        self.rec, self.logs, self.deadline = rec, logs, deadline
        self.marker = extra["mpicluster_stack_fingerprint"]
        self.extra_file = logs / "extravars.json"
        self.extra_file.write_text(json.dumps(extra, indent=2))
        self.env = {
            **os.environ,
            "ANSIBLE_ROLES_PATH": str(REPO / "playbooks" / "roles"),
            "ANSIBLE_LIBRARY": str(REPO / "mpicluster/remote/plugins/modules"),
            "ANSIBLE_MODULE_UTILS": str(REPO / "mpicluster/remote/plugins/module_utils"),
            "ANSIBLE_LOCALHOST_WARNING": "false",
            "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
            "ANSIBLE_NOCOLOR": "1",
            # each task's start as it happens (a lane cut by the budget keeps its lines)
            "ANSIBLE_CALLBACK_PLUGINS": str(Path(__file__).with_name("callback_plugins")),
            "ANSIBLE_CALLBACKS_ENABLED": "onebox_timing",
            "ONEBOX_T0": str(time.time() - (time.monotonic() - rec.started)),
            "LC_ALL": "C.UTF-8",
        }

    def run(self, name: str, components: list[str], **flags) -> bool:
        start = time.monotonic()
        if start >= self.deadline:
            self.rec.step(f"build:{name}", False, 0, not_run="the build budget ran out")
            return False
        variables = {"onebox_components": components, **flags}
        argv = [
            *ansible_playbook(),
            "-i",
            "localhost,",
            "-e",
            f"@{self.extra_file}",
            "-e",
            json.dumps(variables),
            str(Path(__file__).with_name("onebox.yml")),
        ]
        timeout = max(5.0, self.deadline - time.monotonic())
        timing = self.logs / f"timing-{name}.txt"
        code, out = sh(argv, timeout=timeout, env={**self.env, "ONEBOX_TIMING_FILE": str(timing)})
        if code == 124:
            stopped = stop_leftovers(self.extra_file, self.marker)
            out += f"\n[stopped {stopped} process(es) the lane left running]"
        (self.logs / f"lane-{name}.log").write_text(out)
        failed = [line for line in out.splitlines() if line.startswith(("fatal:", "failed:"))]
        self.rec.step(
            f"build:{name}",
            code == 0,
            time.monotonic() - start,
            exit=code,
            failed=failed[:3],
            tasks=task_times(timing),
        )
        return code == 0


def task_times(timing: Path) -> list[str]:
    """The lane's tasks as callback_plugins/onebox_timing.py wrote them ("  123.4 s  Configure
    UCX": seconds since the proof began), the ones that took 5 s or more; the whole list is
    in logs.tar.gz."""
    if not timing.is_file():
        return []
    lines = timing.read_text(errors="replace").splitlines()
    kept = []
    for line, following in zip(lines, [*lines[1:], None], strict=True):
        start = _seconds(line)
        end = _seconds(following) if following else None
        if start is not None and (end is None or end - start >= 5):
            kept.append(line.strip())
    return kept


def _seconds(line: str) -> float | None:
    with contextlib.suppress(ValueError, IndexError):
        return float(line.split()[0])
    return None


def ansible_playbook() -> list[str]:
    """ansible-playbook as its module, run by this Python: the Ansible carried on
    PYTHONPATH (carry.py's unpacked wheels have no scripts), not one the box may have."""
    return [sys.executable, "-m", "ansible.cli.playbook"]


#: The lanes: (name, components, the lanes it waits for), in build.yml's order: UCX, then
#: UCC (its UCP transport layer links UCX, its NCCL one the stack's NCCL), then Open MPI
#: (--with-ucx, --with-ucc); NCCL from the start, beside UCX. mpi4py goes last: its compile
#: is long and serial.
LANES = (
    ("ucx", ["ucx"], ()),
    ("nccl", ["nccl"], ()),
    ("ucc", ["ucc"], ("ucx", "nccl")),
    ("mpi", ["openmpi"], ("ucx", "ucc")),
    ("cuda_allreduce", ["cuda_allreduce"], ("mpi",)),
    ("nccl_tests", ["nccl_tests"], ("mpi", "nccl")),
    ("python", ["python"], ("mpi",)),
)


def build_and_run(rec: Record, logs: Path, extra: dict, deadline: float, runs) -> None:
    """Stage the inputs; then the lanes, each as soon as those it waits for are done.
    `runs` (kind -> (the lane it waits for, or None: at once; the function), or None:
    build only) start as soon as their lane is done, whatever else failed."""
    lanes = Lanes(rec, logs, extra, deadline)
    if not lanes.run("stage", [], onebox_stage=True):
        return
    results: dict[str, bool] = {}
    done = {name: threading.Event() for name, _, _ in LANES}

    def lane(name: str, components: list[str], after: tuple[str, ...]) -> None:
        for other in after:
            done[other].wait()
        if all(results.get(other) for other in after):
            results[name] = lanes.run(name, components)
        else:
            results[name] = False
            rec.step(f"build:{name}", False, 0, not_run=f"waits on {', '.join(after)}")
        done[name].set()

    def run(kind: str, after: str | None, function) -> None:
        if after is not None:
            done[after].wait()
        if after is None or results.get(after):
            guarded(rec, f"run:{kind}", function)
        else:
            rec.step(f"run:{kind}", False, 0, not_run=f"build:{after} failed")

    threads = [threading.Thread(target=lane, args=spec) for spec in LANES]
    threads += [
        threading.Thread(target=run, args=(kind, *spec)) for kind, spec in (runs or {}).items()
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if not all(results.values()):
        rec.step("build:verify", False, 0, not_run="a component failed")
        return
    lanes.run("verify", [], onebox_verify=True)


def box_runs(rec: Record, logs: Path, extra: dict, cuda_home: str, ends: float) -> dict:
    """The GPU runs (onebox_runs.py), each with the lane it waits for."""
    import onebox_runs  # beside this file (the script's folder is on sys.path)

    runs = onebox_runs.Runs(rec, logs, extra, cuda_home, ends, sh)
    return runs.plan()


def guarded(rec: Record, name: str, step, *args):
    """A step's result; None, recorded as a failure, where it raised."""
    start = time.monotonic()
    try:
        return step(*args)
    except Exception as exc:  # one broken step must not lose the others
        tail = traceback.format_exc().splitlines()[-6:]
        rec.step(
            f"{name}:crashed", False, time.monotonic() - start, error=repr(exc), traceback=tail
        )
        return None


def pack(out: Path, folder: Path, name: str) -> None:
    with tarfile.open(out / name, "w:gz") as archive:
        archive.add(folder, arcname=folder.name)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--carry", type=Path, default=REPO / ".onebox")
    parser.add_argument("--work", type=Path, default=Path("/var/tmp/mpicluster-onebox"))
    parser.add_argument("--cuda-home", default="/usr/local/cuda")
    parser.add_argument("--openmpi", default="5.0.7")
    parser.add_argument("--only-funcs", default=ONLY_FUNCS)
    parser.add_argument("--cuda-archs", nargs="*", default=[])
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    # the whole proof within 480 s, the box's pip install of the carried wheels included
    parser.add_argument(
        "--budget", type=float, default=410, help="seconds for the build (no lane starts later)"
    )
    parser.add_argument(
        "--total", type=float, default=470, help="seconds for the whole proof (no run later)"
    )
    parser.add_argument("--build-only", action="store_true", help="no GPU: build, no runs")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    # absolute: Ansible looks a relative source up in the role's folders
    args.out, args.carry, args.work = (p.resolve() for p in (args.out, args.carry, args.work))
    gpus = gpu_count()
    if not gpus and not args.build_only:
        sys.stderr.write(
            "prove_on_one_gpu: no NVIDIA GPU here (nvidia-smi lists none): the one-box GPU "
            "proof needs one\n"
        )
        return NO_GPU
    if args.build_only and not args.cuda_archs:
        sys.stderr.write("onebox: --build-only needs --cuda-archs (no GPU to read them from)\n")
        return 2
    if not (args.carry / "cache").is_dir():
        sys.stderr.write(f"onebox: no source cache in {args.carry}: run tests/gpu/carry.py\n")
        return 2
    # OUT gets a few files (summary, log, two packs): the folders packed stay in the work
    shutil.rmtree(args.work, ignore_errors=True)
    out, logs, captures = args.out, args.work / "logs", args.work / "captures"
    for folder in (out, logs, captures):
        folder.mkdir(parents=True, exist_ok=True)
    rec = Record(out)
    rec.data["box"] = {"gpus": gpus, "cores": os.cpu_count(), "python": sys.version.split()[0]}
    deadline, ends = rec.started + args.budget, rec.started + args.total
    try:
        facts = guarded(
            rec, "facts", node_facts, rec, captures, args.cuda_home, str(args.work / "opt")
        )
        capturing = threading.Thread(target=guarded, args=(rec, "capture", capture, rec, captures))
        capturing.start()
        extra = guarded(
            rec, "plan", plan_stack, rec, args.work, args.carry, facts or {}, gpus or 1, args
        )
        if extra is not None:
            runs = None
            if not args.build_only:  # each program runs once built, whatever else failed
                runs = guarded(rec, "runs", box_runs, rec, logs, extra, args.cuda_home, ends)
            guarded(rec, "build", build_and_run, rec, logs, extra, deadline, runs)
        capturing.join()
    finally:
        rec.save()
        pack(out, logs, "logs.tar.gz")
        pack(out, captures, "captures.tar.gz")
    return 0 if all(s["ok"] for s in rec.data["steps"].values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
