"""What `mpicluster run` starts on the head node: the mpirun (or per-node torchrun)
command line, decided here from the plan, the user's options and what the head
reported (its hostfile's slots, its Open MPI series, a free port).

Placement is always explicit (`--host name:count,...`, `-np`, `--map-by slot` unless the
user maps otherwise), so which rank runs on which node is known here: failures name the
node, and `--torch` gives every rank its node's index without asking the MPI.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from mpicluster.cluster import mpirun, node_choice
from mpicluster.cluster.cordons import CordonState
from mpicluster.cluster.mpirun import Mpirun
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.util.errors import UsageError

Launcher = Literal["mpirun", "torchrun"]
#: How the ranks start: Open MPI's mpirun over the cluster's SSH trust, or Slurm's srun
#: (a job in the queue; the ranks wired up by PMIx).
Via = Literal["mpirun", "slurm"]

#: Variables of the control machine's environment that every rank gets, as DeepSpeed's
#: launcher does (NCCL's settings and Python's), except those that would break the
#: nodes' own Python.
PASS_PREFIXES = ("NCCL_", "PYTHON")
PASS_NEVER = frozenset({"PYTHONHOME", "PYTHONEXECUTABLE", "PYTHONPYCACHEPREFIX"})
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
PYTHONS = ("python", "python3")
#: MPI's ranks are C ints: more is a typo, refused before reaching the head node.
MAX_RANKS = 2**31 - 1

#: Sets PyTorch's variables from Open MPI's in every rank, then runs the program.
#: NODE_RANK: the rank's node, from the ranks per node (placed by slot, in order).
TORCH_WRAPPER = (
    "r=$OMPI_COMM_WORLD_RANK; n=0; "
    "for c in $MPICLUSTER_RANKS_PER_NODE; do [ $r -lt $c ] && break; r=$((r - c)); "
    "n=$((n + 1)); done; "
    "export RANK=$OMPI_COMM_WORLD_RANK WORLD_SIZE=$OMPI_COMM_WORLD_SIZE "
    "LOCAL_RANK=$OMPI_COMM_WORLD_LOCAL_RANK LOCAL_WORLD_SIZE=$OMPI_COMM_WORLD_LOCAL_SIZE "
    'NODE_RANK=$n GROUP_RANK=$n; exec "$@"'
)
#: The same from Slurm's variables (srun sets them before the program starts; Open MPI's
#: own are only set inside MPI_Init under direct launch).
TORCH_WRAPPER_SLURM = (
    "export RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS LOCAL_RANK=$SLURM_LOCALID "
    "LOCAL_WORLD_SIZE=$MPICLUSTER_PER_NODE NODE_RANK=$SLURM_NODEID GROUP_RANK=$SLURM_NODEID; "
    'exec "$@"'
)


@dataclass(frozen=True)
class RunOptions:
    program: tuple[str, ...]
    np: int | None = None
    per_node: int | None = None
    hosts: tuple[str, ...] = ()
    map_by: str | None = None
    env: tuple[str, ...] = ()  # NAME (from the control machine) or NAME=VALUE
    env_file: dict[str, str] = field(default_factory=dict)
    torch: bool = False
    launcher: Launcher = "mpirun"
    debug: bool = False
    mpi4py: bool = True  # run Python programs under `-m mpi4py` (an exception aborts all)
    via: Via = "mpirun"


@dataclass(frozen=True)
class HeadFacts:
    """What the head node reported before the launch."""

    slots: dict[str, int]  # its hostfile: node name -> slots, in order
    mpi_major: int
    free_port: int
    user: str
    #: The cordon state the head keeps (cluster/cordons.py).
    cordons: CordonState = field(default_factory=CordonState)


@dataclass(frozen=True)
class Launch:
    argv: list[str]
    env: dict[str, str]  # exported to every rank (mpirun -x)
    placement: dict[str, int]  # node -> ranks (or torchrun processes) on it, in order
    ranks: int
    mpi_major: int = 5
    via: Via = "mpirun"
    #: One line for each cordoned node the job leaves out.
    left_out: tuple[str, ...] = ()

    def node_of(self, rank: int) -> str | None:
        return node_of(self.placement, rank)

    def command(self) -> str:
        """The command line a user could run by hand on the head."""
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        line = " ".join(shlex.quote(part) for part in self.argv)
        return f"env {exports} {line}" if exports else line


def node_of(placement: Mapping[str, int], rank: int) -> str | None:
    """The node a rank runs on (ranks fill nodes in order, `placement`'s counts)."""
    for node, count in placement.items():
        if rank < count:
            return node
        rank -= count
    return None


def parse_env_file(text: str, source: str) -> dict[str, str]:
    """NAME=VALUE lines; blank lines and # comments are skipped; `export ` is allowed."""
    found = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        line = line.removeprefix("export ").strip()
        name, sep, value = line.partition("=")
        if not sep or not ENV_NAME.match(name.strip()):
            raise UsageError(f"{source}:{number}: not NAME=VALUE: {raw.strip()!r}")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        found[name.strip()] = value
    return found


def rank_environment(
    options: RunOptions, control_env: Mapping[str, str], network_interface: str | None
) -> dict[str, str]:
    """What every rank gets beyond the cluster's own environment (/etc/environment)."""
    env = {
        k: v for k, v in control_env.items() if k.startswith(PASS_PREFIXES) and k not in PASS_NEVER
    }
    if python_rank(options):  # line-buffered instead: unbuffered lines arrive in pieces
        env.pop("PYTHONUNBUFFERED", None)
    else:
        env.setdefault("PYTHONUNBUFFERED", "1")  # ranks' output live, not at exit
    if network_interface:
        env["NCCL_SOCKET_IFNAME"] = network_interface
    env.update(options.env_file)
    for item in options.env:
        name, sep, value = item.partition("=")
        if not ENV_NAME.match(name):
            raise UsageError(f"--env {item!r}: not NAME or NAME=VALUE")
        if not sep:
            if name not in control_env:
                raise UsageError(f"--env {name}: not set here (give NAME=VALUE)")
            value = control_env[name]
        env[name] = value
    if options.debug:
        env["NCCL_DEBUG"] = "INFO"
    return env


def check_hosts(plan: ClusterPlan, hosts: tuple[str, ...]) -> None:
    """--nodes: each a node of the inventory, named once."""
    node_choice.check((n.name for n in plan.nodes), hosts)


def placement(
    plan: ClusterPlan,
    options: RunOptions,
    slots: Mapping[str, int],
    cordoned: CordonState | None = None,
) -> dict:
    """Ranks per node: every slot of the chosen nodes (none cordoned), or --per-node each,
    cut to -np (options already validated)."""
    state = cordoned or CordonState()
    names = [n.name for n in plan.nodes]
    for host in options.hosts:
        if host in state.cordons:
            raise UsageError(
                f"--nodes {host}: {state.describe(host)}: `mpicluster uncordon` returns it"
            )
    chosen = list(options.hosts) or [n for n in state.ready(names) if n in slots]
    if not chosen and names and not state.ready(names):
        raise UsageError(
            f"every node is cordoned ({', '.join(state.describe(n) for n in names)}): "
            "`mpicluster uncordon INVENTORY NODE` returns one"
        )
    missing = [h for h in chosen if h not in slots]
    if missing:
        raise UsageError(
            f"{missing[0]} is not in the head node's hostfile: run `mpicluster up` first"
        )
    if options.launcher == "torchrun":
        per_node = dict.fromkeys(chosen, 1)
    elif options.per_node:
        per_node = dict.fromkeys(chosen, options.per_node)
    else:
        per_node = {h: slots[h] for h in chosen}
    total = sum(per_node.values())
    if options.np is None or options.launcher == "torchrun":
        return per_node
    if options.np > total:
        raise UsageError(
            f"-np {options.np} is more than the {total} slot(s) of {', '.join(chosen)} "
            "(give --per-node to place more ranks per node)"
        )
    left, result = options.np, {}
    for host, count in per_node.items():
        if left == 0:
            break
        result[host] = min(count, left)
        left -= result[host]
    return result


#: How a Python rank starts: mpi4py's `python -m mpi4py` (an uncaught exception aborts
#: the whole job), with stdout and stderr line-buffered: whole lines as they are printed.
#: (Unbuffered output arrives in pieces, and Open MPI 5 interleaves the pieces of
#: several ranks' lines under one tag; block-buffered output arrives at exit.)
PYTHON_RANK = (
    "import sys\n"
    "for name in ('stdout', 'stderr'):\n"
    "    getattr(sys, name).reconfigure(line_buffering=True)\n"
    "from mpi4py.run import main\n"
    "main()\n"
)


#: The same under srun: the traceback of an uncaught exception, then a moment before
#: mpi4py's MPI_Abort at exit. Slurm ends the step at once on the abort, and the
#: traceback's lines still on their way through slurmstepd were lost (seen on the local
#: cluster: only "Traceback (most recent call last):" arrived; with the pause, all of it).
PYTHON_RANK_SLURM = PYTHON_RANK.replace(
    "from mpi4py.run import main\n",
    "import time\n"
    "def _hook(*exc, _print=sys.excepthook):\n"
    "    _print(*exc)\n"
    "    for name in ('stdout', 'stderr'):\n"
    "        getattr(sys, name).flush()\n"
    "    time.sleep(0.5)\n"
    "sys.excepthook = _hook\n"
    "from mpi4py.run import main\n",
)


def program_argv(options: RunOptions) -> list[str]:
    """The user's program; a Python one (`python X.py`, `python -m M`, `python -c C`,
    `X.py`) as PYTHON_RANK runs it."""
    program = list(options.program)
    if not python_rank(options):
        return program
    wrapper = PYTHON_RANK_SLURM if options.via == "slurm" else PYTHON_RANK
    if program[0].endswith(".py"):
        return ["python", "-c", wrapper, *program]
    return [program[0], "-c", wrapper, *program[1:]]


def python_rank(options: RunOptions) -> bool:
    """Whether the program is a Python program run the mpi4py way."""
    program = options.program
    if not options.mpi4py or options.launcher == "torchrun" or not program:
        return False
    first = program[0].rsplit("/", 1)[-1]
    if first in PYTHONS and len(program) > 1 and not program[1].startswith("-"):
        return True
    if first in PYTHONS and len(program) > 2 and program[1] in ("-m", "-c"):
        return True
    return program[0].endswith(".py")


def validate(plan: ClusterPlan, options: RunOptions, control_env: Mapping[str, str]) -> None:
    """What can be judged before reaching the head node (UsageError for each)."""
    if not options.program:
        raise UsageError("no program to run: give it after --, e.g. -- python train.py")
    for flag, value in (("-np", options.np), ("--per-node", options.per_node)):
        if value is not None and value < 1:
            raise UsageError(f"{flag} must be at least 1")
        if value is not None and value > MAX_RANKS:
            raise UsageError(f"{flag} {value}: more than MPI's {MAX_RANKS} ranks")
    if options.launcher == "torchrun" and options.np is not None:
        raise UsageError("-np is for the mpirun launcher; torchrun takes --per-node")
    check_hosts(plan, options.hosts)
    if options.via == "slurm":
        if plan.scheduler is None:
            raise UsageError(
                "--via slurm: the inventory has no scheduler (add scheduler: {type: slurm})"
            )
        if options.map_by:
            raise UsageError("--map-by is mpirun's; --via slurm places ranks node by node")
    rank_environment(options, control_env, plan.network.interface)


def build(
    plan: ClusterPlan,
    options: RunOptions,
    head: HeadFacts,
    control_env: Mapping[str, str],
    *,
    job_id: str = "",
) -> Launch:
    validate(plan, options, control_env)
    where = placement(plan, options, head.slots, head.cordons)
    names = [n.name for n in plan.nodes]
    left_out = (
        ()
        if options.hosts
        else tuple(
            f"{head.cordons.describe(n)}: left out" for n in names if n in head.cordons.cordons
        )
    )
    env = rank_environment(options, control_env, plan.network.interface)
    if job_id:  # finds the job's processes on the nodes (the hang report)
        env["MPICLUSTER_JOB"] = job_id
    if options.via == "slurm":
        # Slurm numbers the ranks in its own node order (slurm.conf's: the inventory's)
        order = [n.name for n in plan.nodes]
        return replace(
            _srun(options, head, env, {h: where[h] for h in order if h in where}),
            left_out=left_out,
        )
    ranks = sum(where.values())
    # the stack's own mpirun, the one the head's facts asked (nodes/head_mpi.py)
    command = Mpirun.of(plan.layout, head.mpi_major, root=head.user == "root")
    default_map = "ppr:1:node" if options.launcher == "torchrun" else "slot"
    hosts = [*mpirun.hosts(where), "--map-by", options.map_by or default_map]
    rendezvous(options, head, env, where)
    tagged = [*command.tag_output(), *mpirun.exports(env)]
    if options.launcher == "torchrun":
        # one torchrun per node; its node rank is its MPI rank, known only on the node
        program = torchrun_per_node(options, head, env, where, "$OMPI_COMM_WORLD_RANK")
    elif options.torch:
        env["MPICLUSTER_RANKS_PER_NODE"] = " ".join(str(c) for c in where.values())
        tagged += mpirun.exports(["MPICLUSTER_RANKS_PER_NODE"])
        program = ["sh", "-c", TORCH_WRAPPER, "sh", *program_argv(options)]
    else:
        program = program_argv(options)
    argv = command.argv(hosts, tagged, program)
    return Launch(argv, env, where, ranks, head.mpi_major, left_out=left_out)


def rendezvous(options: RunOptions, head: HeadFacts, env: dict[str, str], where: dict) -> None:
    """PyTorch's rendezvous for --torch and torchrun: the first node, a port free on the
    head (unless the user gave them)."""
    if options.torch or options.launcher == "torchrun":
        env.setdefault("MASTER_ADDR", next(iter(where)))
        env.setdefault("MASTER_PORT", str(head.free_port))


def torchrun_per_node(
    options: RunOptions, head: HeadFacts, env: dict[str, str], where: dict, node_rank: str
) -> list[str]:
    """`sh -c SCRIPT sh PROGRAM...` that one launcher process per node runs: torchrun
    with a static rendezvous, its node rank from the launcher's variable `node_rank`
    (known only on the node)."""
    torchrun = [
        "torchrun",
        "--nnodes",
        str(len(where)),
        "--nproc-per-node",
        str(options.per_node or min(head.slots[h] for h in where)),
        "--master-addr",
        env["MASTER_ADDR"],
        "--master-port",
        env["MASTER_PORT"],
    ]
    script = f'exec {shlex.join(torchrun)} --node-rank "{node_rank}" "$@"'
    return ["sh", "-c", script, "sh", *options.program]


def allocation(where: Mapping[str, int]) -> list[str]:
    """srun's and sbatch's options for these nodes with as many ranks on each (the
    caller has checked that)."""
    ranks = sum(where.values())
    return [
        f"--nodes={len(where)}",
        f"--nodelist={','.join(where)}",
        f"--ntasks-per-node={ranks // len(where)}",
        f"--ntasks={ranks}",
    ]


def _srun(options: RunOptions, head: HeadFacts, env: dict[str, str], where: dict) -> Launch:
    """The job as a Slurm job step: srun allocates the nodes (waiting in the queue when
    they are busy) and starts the ranks, wired up by PMIx. A rank that fails ends the
    step (--kill-on-bad-exit); every line carries its rank (--label)."""
    counts = set(where.values())
    ranks = sum(where.values())
    if len(counts) > 1:
        raise UsageError(
            f"-np {ranks} over {len(where)} nodes: --via slurm places as many ranks on each "
            "node; give a multiple of the nodes, or --per-node"
        )
    per_node = counts.pop()
    argv = [
        "srun",
        "--mpi=pmix",
        *allocation(where),
        "--kill-on-bad-exit=1",
        "--label",
        "--job-name=mpicluster-run",
    ]
    rendezvous(options, head, env, where)
    if options.launcher == "torchrun":
        argv += torchrun_per_node(options, head, env, where, "$SLURM_NODEID")
        return Launch(argv, env, where, ranks, head.mpi_major, "slurm")
    if options.torch:
        env["MPICLUSTER_PER_NODE"] = str(per_node)
        argv += ["sh", "-c", TORCH_WRAPPER_SLURM, "sh"]
    return Launch([*argv, *program_argv(options)], env, where, ranks, head.mpi_major, "slurm")
