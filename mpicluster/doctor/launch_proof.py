"""Doctor's proof by launch: MPI started for real once the static checks' facts are in.

The launches go through the probes still running on the nodes (remote/launch_proof_node.py):
as the MPI user, in the non-interactive login environment mpirun's daemons get, with
the `mpirun` that environment resolves. In up to four rounds:

1. alone: on every node, `mpirun` with 1 rank and with 2, on that node only;
2. all: from the head (the first node that passed alone), one rank on every node
   that passed alone; when that worked, two ranks on each of the head and the next
   node ("shared": several ranks per node on several nodes is a case of its own, it
   hung Horovod's init while one rank per node passed);
3. pairs, only when (2) failed: from the head, 2 ranks with each of those nodes;
4. only when every pair from the head failed: the same from a second head, which
   tells a broken head from a fault of every node.

Where every node's Open MPI lets launches share a node (`side_by_side`: 5.0.3 and later),
a node's 1 and 2 ranks alone run at once, and rounds 1 and 2 run at once: `all` and
`shared` start with the launches alone, as the rounds would run them if every node
passes alone (`early_launches`). Once the nodes have launched alone, an early launch
counts only where it is the very launch round 2 calls for then (`same_launch`: the same
head, nodes and command); where it is not (a node failed alone, so it is left out) the
early one is stopped and round 2 runs as before, after round 1: a failure alone still
explains the launches across nodes. Elsewhere (Open MPI 4) a node runs one launch at a
time in these rounds, one round after the other.

The inventory's users (doctor's users check) each get one launch of their own: from the
head, one rank on every node that launched alone, started as she starts it (her login
into the head with her node key, through `sudo -n -u USER ssh`, then her mpirun), so her
key pair, ssh config and known hosts on every node are proven by use.

A launch has a short timeout (a hang is a finding, not a wait); a round is at most
one launch per node, never N*N. The ranks run PROGRAM with the stack's Python: an
mpi4py allreduce that also gathers where each rank ran; where mpi4py is missing the
ranks only say where they ran (mpirun's daemons and the ranks' start are proven, not
MPI's own wire-up) and the report says so.
"""

from __future__ import annotations

import json
import math
import shlex
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from mpicluster import remote
from mpicluster.cluster.mpi_settings import mpirun_network_args
from mpicluster.cluster.mpirun import Mpirun
from mpicluster.cluster.mpirun import hosts as hosts_arg
from mpicluster.nodes import mpi_version

ALONE_TIMEOUT = 15.0
PAIR_TIMEOUT = 20.0
#: Pair launches one head runs at once (each is an ssh login into one other node).
PAIR_WORKERS = 8
#: The users' launches one head runs at once: each is a whole mpirun across the nodes;
#: 8 at once on the 2-core local cluster's host took 5-8.6 s each (0.8 s alone) and
#: some ran past their timeout.
USER_WORKERS = 4
#: A launch across nodes that includes a node the ports check blames is stopped after
#: this long, or three times the slowest launch alone, where it has not ended: it would
#: only hang to its timeout (20 s and more), and the node is named from what the ports
#: check saw. A launch that works in spite of the ports check (MPI's ports in a range the
#: firewall lets through) ends well within it.
CUT_SECONDS = 4.0
#: How often a wait for such a launch looks whether the ports check has blamed a node.
POLL = 0.25
#: The ports check's blame, in words.
DIRECTIONS = {"in": "into", "out": "out of", "both": "into and out of"}
#: The ranks end themselves this long after their launch's timeout (no leftovers).
RANK_GRACE = 5
MARK = "MPICLUSTER-LAUNCH "

#: What each rank runs (python -c PROGRAM SECONDS): remote/launch_proof_rank.py.
PROGRAM = remote.source("launch_proof_rank")
PROGRAM_FILE = "launch_rank.py"

Progress = Callable[[str], None]


def all_timeout(nodes: int) -> float:
    return 20.0 + 0.2 * nodes


def budget(nodes: int) -> float:
    """Seconds the probes may spend on launches, every round at its worst."""
    pair_rounds = math.ceil(max(1, nodes - 1) / PAIR_WORKERS)
    shared = PAIR_TIMEOUT  # two ranks on each of two nodes, after `all`
    return 2 * ALONE_TIMEOUT + all_timeout(nodes) + shared + 2 * pair_rounds * PAIR_TIMEOUT + 60


@dataclass
class Launch:
    round: str  # alone | all | pair
    head: str  # the node mpirun ran on
    hosts: list[str]  # the nodes given ranks
    ranks: int
    argv: list[str]
    timeout: float
    rc: int | None = None
    hung: bool = False
    seconds: float = 0.0
    output: str = ""
    error: str = ""  # the probe could not run it (its session was lost)
    first: Launch | None = None  # the failed first try this launch repeated
    hostnames: dict[str, str] = field(default_factory=dict)  # hostname -> node name
    user: str = ""  # a user's own launch (as_user): her login into the head runs argv
    #: Why it was cut short (or not run): the ports check blames one of its nodes.
    cut: str = ""

    @property
    def command(self) -> str:
        """The launch as a shell line, with the ranks' program as its file in mpicluster's
        source (mpicluster/remote/launch_proof_rank.py) instead of its text."""
        line = shlex.join([*self.argv[:-4], PROGRAM_FILE, *self.argv[-2:]])
        return f"{shlex.join(as_user(self.user, self.head, []))} {line}" if self.user else line

    @property
    def started(self) -> list[str]:
        """What the probe runs: argv, or for a user's launch her login running it."""
        return as_user(self.user, self.head, self.argv) if self.user else self.argv

    @property
    def daemon_hosts(self) -> list[str]:
        """The nodes whose daemons the probe ends itself if it stops this launch
        (launch_proof_node.end_daemons): the others than the head; none for a user's
        launch, whose mpirun runs behind her own ssh."""
        return [] if self.user else [host for host in self.hosts if host != self.head]

    @property
    def reports(self) -> list[dict]:
        found = []
        for line in self.output.splitlines():
            if line.startswith(MARK):
                try:
                    found.append(json.loads(line[len(MARK) :]))
                except json.JSONDecodeError:
                    continue
        return found

    @property
    def mpi(self) -> bool:
        """The ranks ran mpi4py's allreduce (not only the placement program)."""
        return any(r.get("mpi") for r in self.reports)

    @property
    def ran_on(self) -> list[str]:
        """Node names the ranks reported, in rank order."""
        hosts: list[str] = []
        for report in self.reports:
            if report.get("mpi"):
                return [self.node_of(h) for h in report.get("hosts", [])]
            hosts.append(self.node_of(report.get("host", "")))
        return hosts

    def node_of(self, hostname: str) -> str:
        """The inventory's name of the node a rank reported as `hostname`."""
        short = hostname.split(".")[0]
        return self.hostnames.get(hostname) or self.hostnames.get(short) or hostname

    @property
    def no_mpi4py(self) -> list[dict]:
        return [r for r in self.reports if r.get("mpi") is False]

    @property
    def problem(self) -> str:
        """What went wrong, in a few words ("" when the launch proved what it should)."""
        if self.error:
            return f"doctor lost the probe on {self.head}: {self.error}"
        if self.cut:
            if not self.seconds:
                return f"not run: {self.cut}"
            return f"no result in {self.seconds:.1f} s, then stopped: {self.cut}"
        if self.hung:
            return f"hung: no result in {self.timeout:.0f} s"
        if self.rc is None:
            return "mpirun could not be started"
        if self.rc != 0:
            return f"mpirun exited {self.rc}"
        full = next((r for r in self.reports if r.get("mpi")), None)
        if full is not None:
            expected = self.ranks * (self.ranks + 1) // 2
            if full.get("size") != self.ranks:
                return f"{full.get('size')} ranks started, {self.ranks} asked for"
            if full.get("sum") != expected:
                return f"the allreduce gave {full.get('sum')}, not {expected}"
        elif len(self.reports) != self.ranks:
            return f"{len(self.reports)} of {self.ranks} ranks reported"
        missing = sorted(set(self.hosts) - set(self.ran_on))
        if missing and self.round != "alone":
            return f"no rank ran on {', '.join(missing)}"
        return ""

    @property
    def ok(self) -> bool:
        return not self.problem

    def to_dict(self) -> dict[str, Any]:
        return {
            "round": self.round,
            "head": self.head,
            "hosts": self.hosts,
            "ranks": self.ranks,
            "command": self.command,
            "ok": self.ok,
            "problem": self.problem,
            "exit_code": self.rc,
            "hung": self.hung,
            "seconds": self.seconds,
            "mpi": self.mpi,
            "ran_on": self.ran_on,
            "output_tail": "\n".join(self.output.strip().splitlines()[-12:]),
            "first_try": self.first.to_dict() if self.first else None,
            **({"cut_short": self.cut} if self.cut else {}),
            **({"user": self.user} if self.user else {}),
        }


@dataclass
class LaunchProof:
    alone: dict[str, list[Launch]] = field(default_factory=dict)
    all: Launch | None = None
    #: two ranks on each of two nodes (after `all` worked)
    shared: Launch | None = None
    pairs: list[Launch] = field(default_factory=list)
    #: node -> why no launch ran there (no mpirun on its PATH, not Open MPI's).
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def launches(self) -> list[Launch]:
        found = [launch for launches in self.alone.values() for launch in launches]
        across = [x for x in (self.all, self.shared) if x is not None]
        return found + across + self.pairs

    def alone_ok(self, node: str) -> bool:
        return node in self.alone and all(launch.ok for launch in self.alone[node])


def same_launch(wanted: Launch, early: Launch | None) -> bool:
    """Whether `early`, started before the round that calls for `wanted`, is that very
    launch: the same round, head, nodes, ranks, command and timeout."""

    def what(launch: Launch) -> tuple:
        return (launch.round, launch.head, launch.hosts, launch.ranks, launch.argv)

    return early is not None and (what(wanted), wanted.timeout) == (what(early), early.timeout)


def mpi4py_expected(facts: list[dict]) -> bool:
    """Whether the ranks alone will have found mpi4py somewhere, as the nodes' facts say
    (the stack's Python lists it): what the early launches across nodes are built with."""
    return any((f.get("versions") or {}).get("mpi4py") for f in facts)


@dataclass
class Order:
    """Launches sent to one node's probe, its answer not read yet."""

    node: str
    number: int
    launches: list[Launch]
    deadline: float  # time.monotonic() past which no answer is waited for
    started: float = 0.0  # time.monotonic() when it was sent


def mpirun_of(facts: dict) -> tuple[str | None, str]:
    """(the mpirun a login resolves, why no launch can run) from a node's probe facts."""
    path = ((facts.get("which") or {}).get("mpirun") or {}).get("path")
    if not path:
        return None, "no mpirun on this node's non-interactive PATH"
    identity = (facts.get("versions") or {}).get("mpi") or {}
    same = identity.get("real") == facts["which"]["mpirun"].get("real")
    found = mpi_version.parse(identity.get("version_text") or "")
    if same and identity.get("version_text") and not found.is_open_mpi:
        return None, f"{path} is not Open MPI's mpirun ({mpi_version.mpi_name(identity)})"
    return path, ""


#: The first Open MPI whose launches may run side by side on one node: its PRRTE
#: (3.0.5, bundled from 5.0.3 on) keeps each mpirun's and each daemon's session directory
#: under a folder of its own (`prterun.HOST.PID.UID`). Before it (ORTE, the 4.x series;
#: PRRTE up to 3.0.4) every launch of a user on a node keeps it under one folder,
#: `/tmp/ompi.HOST.UID`, which a launch that ends removes while it looks empty: a launch
#: starting then fails at once ("A call to mkdir was unable to create the desired
#: directory", open-mpi/ompi#8510; 2 of 240 `mpirun -np 1 true` run four at a time with
#: Debian's 4.1.4). Where it fails alone, a node is left out of every launch after.
SIDE_BY_SIDE = (5, 0, 3)


def side_by_side(facts: list[dict]) -> bool:
    """Whether launches may run at once on one node: every node's Open MPI gives each
    launch a session directory of its own (not where a node's version is unknown)."""
    for node in facts:
        identity = (node.get("versions") or {}).get("mpi") or {}
        found = mpi_version.parse(identity.get("version_text") or "")
        if not found.is_open_mpi or found.numbers < SIDE_BY_SIDE:
            return False
    return bool(facts)


def major_version(facts: dict) -> int:
    """The Open MPI series the node's probe found (5 where it could not tell)."""
    identity = (facts.get("versions") or {}).get("mpi") or {}
    found = mpi_version.parse(identity.get("version_text") or "")
    return (found.is_open_mpi and found.major) or 5


#: ssh options of the launches: a fresh login each time, as the mesh check makes, not
#: one through a master connection an earlier launch left open (the managed ssh
#: config's ControlPersist): a refused key must show now, not when the master expires.
FRESH_SSH = "-o ControlMaster=no -o ControlPath=none"


def as_user(user: str, head: str, argv: list[str]) -> list[str]:
    """`argv` run as `user` runs it: her own non-interactive login into `head` (the
    MPI user's sudo becomes her; her ssh then uses her node key, ssh config and known
    hosts, a fresh connection), so the login environment is hers, as on the other nodes."""
    ssh = ["ssh", "-o", "BatchMode=yes", *FRESH_SSH.split(), head]
    return ["sudo", "-n", "-u", user, *ssh, *([shlex.join(argv)] if argv else [])]


def build_argv(
    mpirun: str,
    *,
    hosts: list[str] | None,
    ranks: int,
    timeout: float,
    python: str,
    root: bool,
    network_args: list[str],
    major: int = 5,
    require_mpi: bool = False,
    per_node: int = 1,
    prefix: str | None = None,
) -> list[str]:
    """One launch's command: `hosts` None means `ranks` ranks on the head alone, else
    `per_node` ranks on each host; `require_mpi`: a rank without mpi4py fails (and
    mpirun ends the job at once)."""
    command = Mpirun(mpirun, major, root, prefix)
    if hosts is None:
        placement = hosts_arg({"localhost": ranks})
    else:
        placement = hosts_arg(dict.fromkeys(hosts, per_node))
    options = [
        *(command.launcher_ssh(FRESH_SSH) if hosts is not None else []),
        # a hung rank busy-polls: yielding keeps it from starving the next launches
        # (and the user's jobs) on a node with few cores
        *["--mca", "mpi_yield_when_idle", "1"],
        *network_args,
    ]
    verdict = [str(int(timeout) + RANK_GRACE), "mpi" if require_mpi else "any"]
    return command.argv(placement, options, [python, "-c", PROGRAM, *verdict])


class Prover:
    """Runs the rounds over the gathered sessions (runner.Gathered)."""

    def __init__(self, found: Any, progress: Progress):
        self.found = found
        self.progress = progress
        self.proof = LaunchProof()
        self.hostnames = {}
        for name in found.probed:
            hostname = (found.facts(name) or {}).get("hostname")
            if hostname:
                self.hostnames[hostname] = name
                self.hostnames[hostname.split(".")[0]] = name

    def launch(
        self,
        head: str,
        hosts: list[str] | None,
        ranks: int,
        timeout: float,
        kind: str,
        per_node: int = 1,
        user: str = "",
        mpi: bool | None = None,
    ):
        # Across nodes, mpi4py is required where some node's ranks had it: a rank
        # without it then fails at once (named), instead of the others waiting for it.
        # `mpi`: whether they had it, where the launches alone are still running.
        facts = self.found.facts(head) or {}
        mpirun, _ = mpirun_of(facts)
        major = major_version(facts)
        somewhere = self.mpi_somewhere if mpi is None else mpi
        argv = build_argv(
            mpirun or "mpirun",
            hosts=hosts,
            ranks=ranks,
            timeout=timeout,
            python=self.found.layout.python,
            root=not user and self.found.sessions[head].ssh.user == "root",
            network_args=mpirun_network_args(self.found.plan.network, major),
            major=major,
            require_mpi=hosts is not None and somewhere,
            per_node=per_node,
            prefix=self.found.layout.mpi_prefix,
        )
        return Launch(
            kind, head, hosts or [head], ranks, argv, timeout, hostnames=self.hostnames, user=user
        )

    def launchable(self) -> list[str]:
        """The probed nodes a launch can start on; the others' reasons into `skipped`."""
        ready = []
        for name in self.found.probed:
            if name in self.found.exchange_errors:
                continue
            mpirun, why = mpirun_of(self.found.facts(name) or {})
            if mpirun is None:
                self.proof.skipped[name] = why
            else:
                ready.append(name)
        return ready

    def run(self) -> LaunchProof:
        proof = self.proof
        ready = self.launchable()
        self.progress(f"Launching MPI on {len(ready)} node(s) alone (1 and 2 ranks)")
        for name in ready:
            proof.alone[name] = [
                self.launch(name, None, ranks, ALONE_TIMEOUT, "alone") for ranks in (1, 2)
            ]
        # one launch at a time on a node unless its Open MPI allows more (SIDE_BY_SIDE):
        # then the 1 and 2 ranks alone at once, and round 2 started beside them
        at_once = side_by_side([self.found.facts(name) or {} for name in ready])
        alone = self._send({name: proof.alone[name] for name in ready}, workers=2 if at_once else 1)
        early = self._start_early(ready) if at_once else {}
        for order in alone:  # a node the ports check blames may hang even alone
            self._receive_or_cut(order, early.values())
        healthy = [name for name in ready if proof.alone_ok(name)]
        if len(healthy) < 2:
            self._stop(early.values())
            return proof
        head, others = healthy[0], healthy[1:]
        proof.all = self.launch(head, healthy, len(healthy), all_timeout(len(healthy)), "all")
        self._adopt_or_run(proof.all, early, "all")
        if proof.all.ok:
            two = [head, others[0]]
            proof.shared = self.launch(head, two, 4, PAIR_TIMEOUT, "shared", per_node=2)
            self._adopt_or_run(proof.shared, early, "shared")
        else:
            self._stop(early.values())
            self.progress(f"Narrowing it down: {len(others)} pair launch(es) from {head}")
            pairs = self._pairs(head, others)
            if len(others) >= 2 and not any(p.ok for p in pairs):
                second = others[0]
                self.progress(f"Every pair from {head} failed: pairs from {second}")
                self._pairs(second, others[1:])
        return proof

    def early_launches(self, ready: list[str]) -> dict[str, Launch]:
        """Round 2 as it runs if every node in `ready` passes alone: `all`, and `shared`
        (which runs where `all` works), built before the launches alone have ended."""
        if len(ready) < 2:
            return {}
        mpi = mpi4py_expected([self.found.facts(name) or {} for name in ready])
        head, count = ready[0], len(ready)
        return {
            "all": self.launch(head, ready, count, all_timeout(count), "all", mpi=mpi),
            "shared": self.launch(head, ready[:2], 4, PAIR_TIMEOUT, "shared", per_node=2, mpi=mpi),
        }

    def _start_early(self, ready: list[str]) -> dict[str, Order]:
        """The early launches across nodes, each an order of its own (stopped alone)."""
        started = {}
        for kind, launch in self.early_launches(ready).items():
            self._say(launch)
            for order in self._send({launch.head: [launch]}, workers=1):
                started[kind] = order
        return started

    def _adopt_or_run(self, wanted: Launch, early: dict[str, Order], kind: str) -> None:
        """`wanted` takes the early launch's result where that was the same launch; else
        the early one is stopped and `wanted` runs now."""
        order = early.pop(kind, None)
        if order is not None and same_launch(wanted, order.launches[0]):
            self._receive_or_cut(order, early.values())
            _copy_result(order.launches[0], wanted)
            return
        if order is not None:
            self._stop([order])
        self._say(wanted)
        for sent in self._send({wanted.head: [wanted]}, workers=1):
            self._receive_or_cut(sent, early.values())

    def cut_after(self) -> float:
        """Seconds a launch across nodes that the ports check has a node of runs."""
        alone = [x.seconds for launches in self.proof.alone.values() for x in launches]
        return max(CUT_SECONDS, 3 * max(alone, default=0.0))

    def blamed_in(self, launch: Launch) -> list[str]:
        """The nodes of `launch` that the ports check blames, as far as it has said."""
        blamed = self.found.ports_blamed or {}
        return [host for host in launch.hosts if host in blamed]

    def cut_reason(self, nodes: list[str]) -> str:
        blamed = self.found.ports_blamed or {}
        said = "; ".join(
            f"TCP to high ports fails {DIRECTIONS.get(blamed.get(n, ''), 'at')} {n}" for n in nodes
        )
        return f"the ports check found {said}, where MPI's launch only hangs to its timeout"

    def _receive_or_cut(self, order: Order, others: Iterable[Order] = ()) -> None:
        """An order received as `_receive` does, but stopped once the ports check blames
        one of its nodes and it has run `cut_after` seconds (with `others`, the early
        launches that include such a node): see CUT_SECONDS. Its launches that had not
        ended are cut short (or not run, where they had not started)."""
        session = self.found.sessions[order.node]
        while time.monotonic() < order.deadline:
            blamed = sorted({n for launch in order.launches for n in self.blamed_in(launch)})
            cut_at = order.started + self.cut_after() if blamed else None
            until = min(order.deadline, cut_at or time.monotonic() + POLL)
            if session.answered("launched", until, order.number):
                break
            if cut_at is not None and time.monotonic() >= cut_at:
                doomed = [order, *(o for o in others if self.blamed_in(o.launches[0]))]
                for stopped in doomed:
                    self.found.sessions[stopped.node].cancel(stopped.number)
                self._receive([order])
                for launch in order.launches:
                    if not launch.ok:  # not one that ended just as it was stopped
                        launch.hung, launch.error = True, ""
                        launch.cut = self.cut_reason(blamed)
                return
        self._receive([order])

    def _say(self, launch: Launch) -> None:
        """The progress line of a launch across nodes, as it starts."""
        if launch.round == "all":
            self.progress(f"Launching MPI across {len(launch.hosts)} nodes from {launch.head}")
        else:
            where = " and ".join(launch.hosts)
            self.progress(f"Launching MPI with 2 ranks on each of {where}")

    def users(self, names: list[str], proof: LaunchProof | None) -> dict[str, Launch]:
        """One launch per user from the head, one rank on every node that can launch
        (that launched alone, where the proof by launch ran); none below two nodes."""
        ready = self.launchable()
        if proof is not None:
            self.proof = proof
            ready = [name for name in ready if proof.alone_ok(name)]
        if len(ready) < 2 or not names:
            return {}
        head = proof.all.head if proof is not None and proof.all is not None else ready[0]
        hosts = [head, *(name for name in ready if name != head)]
        self.progress(f"Launching MPI as each of {len(names)} user(s) across {len(hosts)} nodes")
        timeout = user_timeout(len(hosts))
        launches = {
            user: self.launch(head, hosts, len(hosts), timeout, "user", user=user) for user in names
        }
        self._round({head: list(launches.values())}, workers=USER_WORKERS)
        return launches

    @property
    def mpi_somewhere(self) -> bool:
        return any(x.mpi for launches in self.proof.alone.values() for x in launches)

    def _pairs(self, head: str, others: list[str]) -> list[Launch]:
        """Pair launches from `head`; one that fails without a rank saying why gets a
        second try once the round is over (a pair must not be blamed for what the
        round's other failing launches left behind); the second try is the result."""
        launches = [self.launch(head, [head, o], 2, PAIR_TIMEOUT, "pair") for o in others]
        cut = self.proof.all is not None and bool(self.proof.all.cut)
        for launch in launches:  # after `all` was cut short: no pair with a blamed node
            blamed = self.blamed_in(launch) if cut else []
            if blamed:
                launch.hung, launch.cut = True, self.cut_reason(blamed)
        running = [x for x in launches if not x.cut]
        if running:
            self._round({head: running}, workers=PAIR_WORKERS)
        again = [x for x in running if not x.ok and not x.no_mpi4py and not x.error]
        if again:
            retries = [self.launch(head, x.hosts, 2, PAIR_TIMEOUT, "pair") for x in again]
            self._round({head: retries}, workers=PAIR_WORKERS)
            for first, retry in zip(again, retries, strict=True):
                retry.first = first
                launches[launches.index(first)] = retry
        self.proof.pairs.extend(launches)
        return launches

    def _round(self, orders: dict[str, list[Launch]], workers: int) -> None:
        self._receive(self._send(orders, workers))

    def _send(self, orders: dict[str, list[Launch]], workers: int) -> list[Order]:
        """Each node's launches sent to its probe, all nodes at once (`workers` of one
        node's at a time there); a node whose probe is lost gets the error."""
        from mpicluster.doctor.session import ProbeError

        sent = []
        for name, launches in orders.items():
            items = [
                {
                    "id": i,
                    "argv": launch.started,
                    "timeout": launch.timeout,
                    "hosts": launch.daemon_hosts,
                }
                for i, launch in enumerate(launches)
            ]
            rounds = math.ceil(len(items) / workers)
            seconds = rounds * (max(launch.timeout for launch in launches) + 10) + 10
            order = {"launch": {"items": items, "workers": workers, "budget": seconds}}
            try:
                number = self.found.sessions[name].request(order)
            except ProbeError as exc:
                for launch in launches:
                    launch.error = str(exc)
                continue
            now = time.monotonic()
            sent.append(Order(name, number, launches, now + seconds + 15, now))
        return sent

    def _receive(self, orders: list[Order]) -> None:
        """Each order's results into its launches, as its node answers."""
        from mpicluster.doctor.session import ProbeError

        for order in orders:
            session = self.found.sessions[order.node]
            try:
                answer = session.answer("launched", order.deadline, order.number)
            except ProbeError as exc:
                for launch in order.launches:
                    launch.error = str(exc)
                continue
            done = set()
            for result in answer.get("results", []):
                launch = order.launches[result["id"]]
                launch.rc, launch.hung = result["rc"], result["hung"]
                launch.seconds, launch.output = result["seconds"], result["output"]
                done.add(result["id"])
            for i, launch in enumerate(order.launches):
                if i not in done:
                    launch.error = "not started before the probe's deadline"

    def _stop(self, orders: Iterable[Order]) -> None:
        """Stop early launches no round calls for, and wait until they are gone: what
        they leave behind must not be what a later launch is blamed for."""
        orders = list(orders)
        for order in orders:
            self.found.sessions[order.node].cancel(order.number)
        self._receive(orders)


def _copy_result(source: Launch, target: Launch) -> None:
    target.rc, target.hung, target.seconds = source.rc, source.hung, source.seconds
    target.output, target.error, target.cut = source.output, source.error, source.cut


def prove(found: Any, progress: Progress) -> LaunchProof:
    return Prover(found, progress).run()


def user_timeout(nodes: int) -> float:
    """A user's launch: one across the nodes, and her login into the head first."""
    return all_timeout(nodes) + 10


def users_budget(users: int, nodes: int) -> float:
    """Seconds the users' launches may take: up to USER_WORKERS of them at once."""
    return math.ceil(users / USER_WORKERS) * (user_timeout(nodes) + 10) + 15


def prove_users(found: Any, names: list[str], progress: Progress) -> dict[str, Launch]:
    """Each user's own launch (Prover.users), after the proof by launch if it ran."""
    return Prover(found, progress).users(names, found.launch)
