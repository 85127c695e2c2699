"""The smoke test: proves a provisioned cluster works, and names what is broken when not.

(a) From every node to every node, a non-interactive `ssh peer` must see the MPI
    bin directory in PATH, the library directory in LD_LIBRARY_PATH, and `mpirun`
    resolving to the managed install: a node x node matrix.
(b) An MPI allreduce across all nodes, launched from the head node with
    `mpirun --hostfile`, exact result checked at several sizes, timings reported.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from dataclasses import dataclass, field

from mpicluster import layout, remote, ssh_failures, transport
from mpicluster.inventory import Inventory, Node
from mpicluster.layout import Layout
from mpicluster.mpi_settings import mpirun_network_args
from mpicluster.text import last_line

ALLREDUCE_SIZES = [1, 1024, 65536, 1048576]
PAIR_TIMEOUT = 10


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


@dataclass
class SmokeReport:
    nodes: list[str]
    pairs: list[PairResult]
    allreduce: AllreduceResult | None
    seconds: float = 0.0
    horovod: AllreduceResult | None = None

    @property
    def matrix_ok(self) -> bool:
        return all(p.ok for p in self.pairs)

    @property
    def ok(self) -> bool:
        mpi_ok = self.matrix_ok and self.allreduce is not None and self.allreduce.ok
        return mpi_ok and (self.horovod is None or self.horovod.ok)

    def pair(self, source: str, target: str) -> PairResult | None:
        return next((p for p in self.pairs if p.source == source and p.target == target), None)

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return {
            "ok": self.ok,
            "nodes": self.nodes,
            "matrix_ok": self.matrix_ok,
            "pairs": [asdict(p) for p in self.pairs],
            "allreduce": asdict(self.allreduce) if self.allreduce else None,
            "horovod": asdict(self.horovod) if self.horovod else None,
            "seconds": self.seconds,
        }


def run_smoke(inventory: Inventory, on_progress=None) -> SmokeReport:
    progress = on_progress or (lambda message: None)
    started = time.monotonic()
    lay = Layout.of(inventory)
    progress(
        f"Smoke test: ssh env from every node to every node ({len(inventory.nodes)}"
        f"x{len(inventory.nodes)})"
    )
    pairs = env_matrix(inventory, lay)
    allreduce = horovod = None
    if all(p.ok for p in pairs):
        progress("Smoke test: MPI allreduce across all nodes (mpi4py)")
        allreduce = run_allreduce(inventory, lay)
        if allreduce.ok and lay.install == "source" and inventory.stack.horovod.enabled:
            progress("Smoke test: Horovod allreduce across all nodes (PyTorch)")
            horovod = run_allreduce(inventory, lay, kind="horovod")
    else:
        bad = sum(not p.ok for p in pairs)
        allreduce = AllreduceResult(
            ok=False,
            head=inventory.nodes[0].name,
            problem=f"not run: {bad} node pair(s) failed the env check",
            cause="mpirun needs working ssh and PATH between every pair; fix the matrix first",
        )
    return SmokeReport(
        [n.name for n in inventory.nodes], pairs, allreduce, time.monotonic() - started, horovod
    )


def env_matrix(inventory: Inventory, lay: Layout) -> list[PairResult]:
    names = [n.name for n in inventory.nodes]
    spec = json.dumps({"peers": names, "timeout": PAIR_TIMEOUT})
    command = f"{remote.PYTHON} - {shlex.quote(spec)}"
    results = transport.run_everywhere(
        inventory, command, stdin=remote.script("smoke/env_probe"), timeout=PAIR_TIMEOUT * 3 + 30
    )
    pairs: list[PairResult] = []
    for source in names:
        result = results[source]
        if not result.ok:
            reason = result.error or last_line(result.stderr) or f"exited {result.exit_code}"
            pairs += [
                PairResult(source, target, False, f"cannot run the probe on {source}: {reason}")
                for target in names
            ]
            continue
        try:
            probes = {p["peer"]: p for p in json.loads(result.stdout)}
        except (json.JSONDecodeError, KeyError, TypeError):
            pairs += [PairResult(source, t, False, f"bad probe output on {source}") for t in names]
            continue
        for target in names:
            pairs.append(_judge(source, target, probes.get(target), lay))
    return pairs


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


PROGRAM = {"mpi4py": "allreduce.py", "horovod": "hvd_allreduce.py"}
SIZES = {"mpi4py": ALLREDUCE_SIZES, "horovod": [1, 1024, 1048576]}


def mpirun_command(
    inventory: Inventory, lay: Layout, major: int, user: str, kind: str = "mpi4py"
) -> str:
    # No -np: one rank per slot of the hostfile `up` wrote, on every node.
    parts = [f"{lay.mpi_bin}/mpirun", "--hostfile", layout.HOSTFILE, "--map-by", "node"]
    if user == "root":
        parts.append("--allow-run-as-root")
    parts += mpirun_network_args(inventory.network, major)
    parts += [lay.python, f"{layout.SMOKE_DIR}/{PROGRAM[kind]}", *map(str, SIZES[kind])]
    return " ".join(shlex.quote(p) for p in parts)


def run_allreduce(
    inventory: Inventory, lay: Layout, timeout: float = 180, kind: str = "mpi4py"
) -> AllreduceResult:
    head = inventory.nodes[0]
    user = inventory.node_ssh(head).user
    version = transport.run_on(inventory, head, f"{lay.mpi_bin}/mpirun --version", timeout=30)
    if not version.ok:
        return AllreduceResult(
            False,
            head.name,
            kind,
            problem="`mpirun --version` failed on the head",
            cause=version.error or last_line(version.stdout + version.stderr),
        )
    match = re.search(r"(\d+)\.(\d+)", version.stdout)
    major = int(match.group(1)) if match else 4
    command = mpirun_command(inventory, lay, major, user, kind)
    started = time.monotonic()
    result = transport.run_on(
        inventory, head, f"timeout -k 10 {int(timeout)} {command}", timeout=timeout + 30
    )
    seconds = time.monotonic() - started
    output = (result.stdout + "\n" + result.stderr).strip()
    base = AllreduceResult(
        False,
        head.name,
        kind,
        command=command,
        seconds=seconds,
        output_tail="\n".join(output.splitlines()[-15:]),
    )
    if result.error:
        base.problem, base.cause = "could not run mpirun on the head node", result.error
        return base
    if result.exit_code in (124, 137):
        base.problem = f"mpirun hung for {timeout:.0f} s"
        base.cause = (
            "a firewall blocking MPI's TCP ports between nodes, or MPI using the wrong "
            "interface (set network: in the inventory); run `mpicluster doctor`"
        )
        return base
    report = _json_line(result.stdout)
    if result.exit_code != 0 or report is None:
        base.problem = f"mpirun exited {result.exit_code}"
        base.cause = _mpirun_cause(output)
        return base
    base.ranks, base.hosts = report["ranks"], report["hosts"]
    base.library, base.sizes = report["library"], report["results"]
    missing = _missing_nodes(inventory.nodes, base.hosts)
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


def _missing_nodes(nodes: list[Node], hosts: list[str]) -> list[str]:
    seen = {h.split(".")[0].lower() for h in hosts}
    return [n.name for n in nodes if n.name.split(".")[0].lower() not in seen]


def _mpirun_cause(output: str) -> str:
    text = output.lower()
    checks = [
        (
            "host key verification failed",
            "the head's ssh does not trust a node's host key (known_hosts)",
        ),
        ("permission denied", "a node does not accept the cluster key (authorized_keys)"),
        ("orted: command not found", "Open MPI's orted is not on a node's non-interactive PATH"),
        ("prted: command not found", "Open MPI's prted is not on a node's non-interactive PATH"),
        (
            "unable to reliably start one or more daemons",
            "mpirun could not start its daemon on a node: ssh, PATH or LD_LIBRARY_PATH there",
        ),
        ("not enough slots", "the hostfile has fewer slots than ranks"),
        ("no module named 'mpi4py'", "mpi4py is missing from the Python on some node"),
        ("no module named 'horovod'", "Horovod is missing from the Python on some node"),
        ("no route to host", "a firewall or routing problem between nodes"),
        ("connection refused", "a firewall rejecting MPI's TCP ports between nodes"),
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


def _json_line(text: str) -> dict | None:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
    return None
