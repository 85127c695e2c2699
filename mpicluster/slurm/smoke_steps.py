"""The Slurm part of the smoke test (scheduler: slurm), step by step from the controller,
as the MPI user; each step that fails says what it saw and how to fix it:

1. munge: a credential made on the controller decodes on every node (one key, clocks
   within munge's tolerance, munged running everywhere);
2. ping: `scontrol ping` finds slurmctld up;
3. nodes: `sinfo` shows every inventory node idle (waiting a while for slurmd to
   register); if not, `sinfo -R`'s reasons and the command that resumes a node;
4. srun: `srun -N<all>` starts a task on every node;
5. pmix: `srun --mpi=pmix` runs the smoke test's mpi4py allreduce over all nodes as ONE
   world of N ranks (ranks that start as N singletons of "0 of 1" are the classic silent
   failure of a PMIx that did not wire them up);
6. sbatch: a batch job of the same runs to COMPLETED;
7. gpu: on GPU nodes, `srun --gres=gpu:1 nvidia-smi -L` sees a GPU.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from dataclasses import asdict, dataclass, field

from mpicluster.cluster import layout
from mpicluster.cluster.inventory import Node
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.nodes import transport
from mpicluster.util.text import last_line

#: How long slurmd may take to register after `up` (re)started it.
REGISTER_WAIT = 60
STEP_TIMEOUT = 120
#: The allreduce sizes of the Slurm runs (the mpirun run measures; these prove).
SIZES = ["1", "1024", "65536"]
RESUME = "scontrol update nodename={node} state=resume"
READY_STATES = ("idle", "mixed", "allocated")


@dataclass
class SlurmStep:
    name: str
    ok: bool
    #: What the step saw (one line).
    detail: str = ""
    problem: str = ""
    cause: str = ""
    command: str = ""
    seconds: float = 0.0


@dataclass
class SlurmSmoke:
    controller: str
    steps: list[SlurmStep] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(step.ok for step in self.steps)

    def step(self, name: str) -> SlurmStep | None:
        return next((s for s in self.steps if s.name == name), None)

    def to_dict(self) -> dict:
        return {
            "ok": self.ok,
            "controller": self.controller,
            "steps": [asdict(step) for step in self.steps],
        }


def run_slurm_smoke(plan: ClusterPlan, on_progress=None) -> SlurmSmoke:
    progress = on_progress or (lambda message: None)
    controller = plan.controller or plan.nodes[0]
    report = SlurmSmoke(controller.name)
    steps = [
        ("munge", "a munge credential from the controller decodes on every node", munge_step),
        ("ping", "scontrol ping", ping_step),
        ("nodes", "sinfo shows every node idle", nodes_step),
        ("srun", f"srun -N{len(plan.nodes)} on every node", srun_step),
        ("pmix", "srun --mpi=pmix: the mpi4py allreduce as one world", pmix_step),
        ("sbatch", "sbatch: the same allreduce as a batch job", sbatch_step),
    ]
    if plan.gpu_nodes:
        steps.append(("gpu", "srun --gres=gpu:1 nvidia-smi -L", gpu_step))
    for name, what, run in steps:
        progress(f"Slurm smoke test: {what}")
        started = time.monotonic()
        step = run(plan, controller)
        step.name, step.seconds = name, round(time.monotonic() - started, 1)
        report.steps.append(step)
        if not step.ok:
            break  # each step needs the ones before it
    return report


def _ctl(plan: ClusterPlan, controller: Node, command: str, timeout: float = STEP_TIMEOUT):
    return transport.run_on(
        plan, controller, f"timeout -k 5 {int(timeout)} {command}", timeout=timeout + 15
    )


def _said(result) -> str:
    """What a failed command said: srun's first error (which names the node), else its
    last line."""
    errors = [line.strip() for line in result.stderr.splitlines() if "error:" in line]
    return (
        result.error
        or (errors[0] if errors else "")
        or last_line(result.stderr)
        or last_line(result.stdout)
        or "no output"
    )


def munge_step(plan: ClusterPlan, controller: Node) -> SlurmStep:
    made = _ctl(plan, controller, "munge -n", 30)
    credential = made.stdout.strip()
    if made.error or made.exit_code != 0 or not credential.startswith("MUNGE:"):
        return SlurmStep(
            "munge",
            False,
            problem=f"munge -n failed on {controller.name}: {_said(made)}",
            cause="munged is not running there: `mpicluster up` starts it",
            command="munge -n",
        )
    decoded = transport.run_everywhere(plan, "unmunge", timeout=30, stdin=credential + "\n")
    bad = {}
    for node in plan.nodes:
        result = decoded[node.name]
        text = result.stdout + result.stderr
        if result.error or result.exit_code != 0 or "STATUS:" not in text:
            bad[node.name] = _said(result)
    if bad:
        return SlurmStep(
            "munge",
            False,
            problem="the controller's credential does not decode on "
            + ", ".join(f"{name} ({why})" for name, why in bad.items()),
            cause=munge_cause(" ".join(bad.values())),
            command=f"munge -n on {controller.name} | unmunge on each node",
        )
    return SlurmStep("munge", True, detail=f"decoded on all {len(plan.nodes)} nodes")


def munge_cause(said: str) -> str:
    if re.search(r"Invalid credential|decrypt|Unauthorized", said, re.I):
        return "the nodes' munge keys differ: `mpicluster up` gives every node the cluster's key"
    if re.search(r"Expired|Rewound", said, re.I):
        return (
            "the nodes' clocks differ by more than munge allows (5 minutes): "
            "run an NTP client (chrony) on every node"
        )
    if re.search(r"socket|munged", said, re.I):
        return "munged is not running on that node: `mpicluster up` starts it"
    return "run `mpicluster doctor` (its slurm check reads every node's munge)"


def ping_step(plan: ClusterPlan, controller: Node) -> SlurmStep:
    result = _ctl(plan, controller, "scontrol ping", 30)
    if result.exit_code == 0 and "is UP" in result.stdout:
        return SlurmStep("ping", True, detail=last_line(result.stdout), command="scontrol ping")
    return SlurmStep(
        "ping",
        False,
        problem=f"slurmctld does not answer on {controller.name}: {_said(result)}",
        cause=(
            f"slurmctld is not running on {controller.name} (its log: "
            "/var/log/slurm/slurmctld.log): `mpicluster up` starts it"
        ),
        command="scontrol ping",
    )


def parse_sinfo(text: str) -> dict[str, str]:
    """`sinfo -h -N -o '%N|%T'` as {node: state}; a node in two partitions is listed
    once."""
    states = {}
    for line in text.splitlines():
        name, _, state = line.strip().partition("|")
        if name and state:
            states[name] = state.lower()
    return states


def ready(state: str) -> bool:
    """A node state that takes jobs (sinfo's flag characters, `idle*`, stripped)."""
    return state.rstrip("*~#!%$@^-") in READY_STATES


def not_ready(states: dict[str, str], nodes: list[str]) -> dict[str, str]:
    return {
        name: states.get(name, "not in sinfo") for name in nodes if not ready(states.get(name, ""))
    }


#: Each node's daemons, one line per daemon not running.
DAEMONS_DOWN = "for d in munged slurmd; do pgrep -x $d >/dev/null || echo $d; done"


def nodes_step(plan: ClusterPlan, controller: Node) -> SlurmStep:
    names = [n.name for n in plan.nodes]
    # First the daemons themselves: a job sent to a node whose slurmd is dead (before
    # slurmctld notices, up to 5 minutes) leaves that node COMPLETING until it does.
    found = transport.run_everywhere(plan, DAEMONS_DOWN, timeout=30)
    dead = {
        name: result.error or " and ".join(result.stdout.split())
        for name, result in found.items()
        if result.error or result.stdout.strip()
    }
    if dead:
        listed = ", ".join(f"{name} ({what})" for name, what in dead.items())
        return SlurmStep(
            "nodes",
            False,
            problem=f"not running: {listed}",
            cause="`mpicluster up` starts munged and slurmd again on every node",
            command=DAEMONS_DOWN,
        )
    deadline = time.monotonic() + REGISTER_WAIT
    while True:
        result = _ctl(plan, controller, "sinfo -h -N -o '%N|%T'", 30)
        states = parse_sinfo(result.stdout)
        waiting = not_ready(states, names)
        if result.exit_code == 0 and not waiting:
            return SlurmStep("nodes", True, detail=f"{len(names)} nodes idle", command="sinfo -N")
        if time.monotonic() > deadline:
            break
        time.sleep(2)
    reasons = _ctl(plan, controller, "sinfo -h -R -o '%n|%E'", 30)
    why = parse_sinfo(reasons.stdout)
    listed = ", ".join(
        f"{name} {state}" + (f" ({why[name]})" if why.get(name) else "")
        for name, state in waiting.items()
    )
    return SlurmStep(
        "nodes",
        False,
        problem=f"not idle after {REGISTER_WAIT} s: {listed}",
        cause=nodes_cause(waiting, why),
        command="sinfo -N; sinfo -R",
    )


def nodes_cause(waiting: dict[str, str], why: dict[str, str]) -> str:
    first = next(iter(waiting))
    states = waiting.values()
    if any(state.startswith(("down", "unknown")) or state.endswith("*") for state in states):
        return (
            f"slurmd is not running or cannot reach slurmctld on {first} (its log: "
            "/var/log/slurm/slurmd.log): `mpicluster up` starts it; then "
            f"`{RESUME.format(node=first)}`"
        )
    if any("drain" in state for state in waiting.values()):
        return f"a drained node returns to service with `{RESUME.format(node=first)}`"
    return "run `mpicluster doctor` (its slurm check reads every node's daemons and slurm.conf)"


def srun_step(plan: ClusterPlan, controller: Node) -> SlurmStep:
    count = len(plan.nodes)
    # --immediate: a node that stopped answering since sinfo looked would queue the job
    command = f"srun -N{count} --ntasks-per-node=1 -t 2 --immediate=30 printenv SLURMD_NODENAME"
    result = _ctl(plan, controller, command)
    seen = sorted({line.strip() for line in result.stdout.splitlines() if line.strip()})
    missing = [n.name for n in plan.nodes if n.name not in seen]
    if result.exit_code == 0 and not missing:
        return SlurmStep("srun", True, detail=f"a task on each of {count} nodes", command=command)
    return SlurmStep(
        "srun",
        False,
        problem=f"srun exited {result.exit_code}: {_said(result)}"
        if result.exit_code
        else f"no task ran on {', '.join(missing)}",
        cause="slurmd's log on those nodes (/var/log/slurm/slurmd.log) says why",
        command=command,
    )


def pmix_command(plan: ClusterPlan) -> str:
    program = [plan.layout.python, f"{layout.SMOKE_DIR}/allreduce.py", *SIZES]
    count = len(plan.nodes)
    return f"srun -N{count} --ntasks-per-node=1 -t 5 --mpi=pmix " + shlex.join(program)


def pmix_now(plan: ClusterPlan) -> str:
    """pmix_command, failing at once when the nodes are not free (not queued)."""
    return pmix_command(plan).replace(" --mpi=pmix", " --immediate=30 --mpi=pmix", 1)


NO_REPORT = ("no rank reported", "the ranks' output says why")


def judge_world(output: str, count: int) -> tuple[str, str]:
    """('', '') when the allreduce's rank 0 reported one world of `count` ranks, every
    size exact; else (problem, cause)."""
    reports = []
    for line in output.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                reports.append(json.loads(line))
            except ValueError:
                continue
    if not reports:
        return NO_REPORT
    sizes = [r.get("ranks") for r in reports]
    if len(reports) > 1 or sizes[0] != count:
        if all(size == 1 for size in sizes):
            return (
                f"{len(reports)} ranks started as singletons (0 of 1 each), not one world of "
                f"{count}",
                "PMIx did not wire them up: the MPI was built without PMIx support Slurm's "
                "plugin speaks (Open MPI: --with-pmix=internal), or srun ran without --mpi=pmix",
            )
        return f"a world of {sizes[0]} ranks, expected {count}", "srun did not start every rank"
    wrong = [r for r in reports[0].get("results", []) if not r.get("exact")]
    if wrong:
        return (
            f"wrong allreduce result at {wrong[0]['elements']} elements",
            "data corruption in transit, or ranks running different MPI builds",
        )
    return "", ""


def pmix_step(plan: ClusterPlan, controller: Node) -> SlurmStep:
    count = len(plan.nodes)
    command = pmix_now(plan)
    result = _ctl(plan, controller, command)
    problem, cause = judge_world(result.stdout, count)
    if result.exit_code == 0 and not problem:
        return SlurmStep("pmix", True, detail=f"one world of {count} ranks, exact", command=command)
    if result.error or result.exit_code in (124, 137):
        problem = f"srun --mpi=pmix did not finish in {STEP_TIMEOUT} s: {_said(result)}"
        cause = "ranks that wait for each other: `mpicluster doctor`'s slurm check launches one"
    elif result.exit_code and problem == NO_REPORT[0]:
        problem = f"srun --mpi=pmix exited {result.exit_code}: {_said(result)}"
        cause = (
            "the PMIx launch failed: Slurm's PMIx plugin and the MPI's PMIx client disagree "
            "(`srun --mpi=list`; mpicluster doctor's slurm check)"
        )
    return SlurmStep("pmix", False, problem=problem, cause=cause, command=command)


def sbatch_step(plan: ClusterPlan, controller: Node) -> SlurmStep:
    count = len(plan.nodes)
    out = "/tmp/mpicluster-slurm-smoke-%j.out"  # noqa: S108 (on the batch node, removed below)
    wrap = pmix_command(plan)
    command = (
        f"sbatch --wait --parsable -N{count} --ntasks-per-node=1 -t 5 -J mpicluster-smoke "
        f"-o {out} --wrap {shlex.quote(wrap)}"
    )
    result = _ctl(plan, controller, command, STEP_TIMEOUT + 60)
    job = last_line(result.stdout).split(";")[0].strip()
    if not job.isdigit():
        return SlurmStep(
            "sbatch",
            False,
            problem=f"sbatch exited {result.exit_code}: {_said(result)}",
            cause="the job was not accepted: slurmctld's log says why",
            command=command,
        )
    shown = _ctl(plan, controller, f"scontrol show job -o {job}", 30)
    state = _field(shown.stdout, "JobState")
    batch_host = _field(shown.stdout, "BatchHost")
    node = next((n for n in plan.nodes if n.name == batch_host), None)
    output = ""
    if node is not None:
        path = out.replace("%j", job)
        read = transport.run_on(plan, node, f"cat {path} && rm -f {path}", timeout=30)
        output = read.stdout
    if state != "COMPLETED":
        return SlurmStep(
            "sbatch",
            False,
            problem=f"job {job} ended {state or 'in an unknown state'} (sbatch exited "
            f"{result.exit_code})",
            cause=last_line(output) or f"`scontrol show job {job}` and the job's output say why",
            command=command,
        )
    problem, cause = judge_world(output, count)
    if problem:
        problem = f"job {job}: {problem}"
        return SlurmStep("sbatch", False, problem=problem, cause=cause, command=command)
    return SlurmStep(
        "sbatch", True, detail=f"job {job} COMPLETED, one world of {count} ranks", command=command
    )


def _field(text: str, name: str) -> str:
    match = re.search(rf"\b{name}=(\S+)", text)
    return match.group(1) if match else ""


def gpu_step(plan: ClusterPlan, controller: Node) -> SlurmStep:
    nodes = plan.gpu_nodes
    names = ",".join(n.name for n in nodes)
    command = f"srun -w {names} -N{len(nodes)} --ntasks-per-node=1 --gres=gpu:1 -t 2 nvidia-smi -L"
    result = _ctl(plan, controller, command)
    gpus = [line for line in result.stdout.splitlines() if line.startswith("GPU ")]
    if result.exit_code == 0 and len(gpus) >= len(nodes):
        detail = f"{len(gpus)} GPU(s) seen by gres jobs"
        return SlurmStep("gpu", True, detail=detail, command=command)
    return SlurmStep(
        "gpu",
        False,
        problem=f"srun --gres=gpu:1 exited {result.exit_code}: {_said(result)}",
        cause="gres.conf's GPUs (/etc/slurm/gres.conf) or the driver (nvidia-smi) on those nodes",
        command=command,
    )
