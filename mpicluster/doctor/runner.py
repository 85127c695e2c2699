"""Gather everything doctor needs from the nodes, in as few round trips as possible.

1. Connect to every node (one persistent connection each, a bounded pool) and start
   the probe on each as soon as its connection is up; it answers with its facts and
   the port of a TCP listener, and reads its slowest facts (the stack's files, a
   rank's login) meanwhile: they come later, in a message of their own.
2. Send every probe the list of its peers: each answers with its clock at once, then
   with TCP connects to its peers' listeners and `ssh peer true` to each of them.
   The proof by launch (launch_proof.py) starts at the same time, in a thread of its
   own: its launches run while the pairs are tried. Each session's reader files the
   answers, so one conversation carries both.
3. Wait for the slowest facts, close everything; the checks then judge the gathered
   evidence without I/O.

A node that does not answer costs one timeout: it is left out of the peer lists of
the others, and its checks list it as not checked. Nothing is kept from one run to
the next.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from mpicluster.cluster import layout, mpi_settings
from mpicluster.cluster.layout import Layout
from mpicluster.cluster.plan import ClusterPlan
from mpicluster.cluster.validators import is_ip
from mpicluster.doctor import launch_proof
from mpicluster.doctor.launch_proof import Launch, LaunchProof
from mpicluster.doctor.session import NETWORK, PROBE_FAILED, NodeSession, ProbeError, sessions_for
from mpicluster.nodes import pairs as pair_plan

if TYPE_CHECKING:
    from mpicluster.slurm import SlurmFacts

Progress = Callable[[str], None]

DEFAULT_WORKERS = 64
#: Seconds the probe may take to gather its facts (nvidia-smi can be slow to start).
GATHER_SECONDS = 30
#: More for `--deep`: the sha256 of every file of the stack (a few GiB with PyTorch).
DEEP_SECONDS = 300
TCP_TIMEOUT = 3
SSH_WORKERS = 4
TCP_WORKERS = 16
#: Second tries are few and mostly timeouts: all at once (up to this many per node).
RETRY_WORKERS = 16


@dataclass(frozen=True)
class Options:
    checks: tuple[str, ...]
    timeout: float
    all_pairs: bool = False
    seed: int | None = None
    workers: int = DEFAULT_WORKERS
    deep: bool = False

    @property
    def needs_probe(self) -> bool:
        return any(name != "ssh" for name in self.checks)

    @property
    def needs_launch(self) -> bool:
        return "launch" in self.checks

    @property
    def needs_mesh(self) -> bool:
        """The mesh check, and the launch check, which explains failures from it."""
        return "mesh" in self.checks or self.needs_launch

    @property
    def needs_ports(self) -> bool:
        """TCP between nodes: the ports check, and the mesh, which uses it to try
        unreachable peers all at once (one timeout, not one per peer)."""
        return "ports" in self.checks or self.needs_mesh

    @property
    def needs_stack_files(self) -> bool:
        """The stack check, and the launch check, which explains failures by it."""
        return "stack" in self.checks or self.needs_launch

    @property
    def needs_rank_env(self) -> bool:
        """The rank check, and the launch check, which explains failures by it."""
        return "rank" in self.checks or self.needs_launch

    @property
    def gather_seconds(self) -> float:
        return GATHER_SECONDS + (DEEP_SECONDS if self.deep and self.needs_stack_files else 0)

    @property
    def needs_slurm(self) -> bool:
        return "slurm" in self.checks

    @property
    def needs_users(self) -> bool:
        return "users" in self.checks

    @property
    def needs_exchange(self) -> bool:
        return self.needs_mesh or self.needs_ports or "clock" in self.checks


@dataclass
class Clock:
    skew: float  # node minus control, seconds
    uncertainty: float


@dataclass
class Gathered:
    """Everything the checks judge; no check does I/O of its own."""

    plan: ClusterPlan
    options: Options
    sessions: dict[str, NodeSession]
    #: Whom each node logs in to (nodes.pairs: a ring and a sample above 8 nodes).
    pairs: dict[str, list[str]] = field(default_factory=dict)
    sampled: bool = False
    seed: int = 0
    ssh_pairs: dict[tuple[str, str], dict] = field(default_factory=dict)
    tcp_pairs: dict[tuple[str, str], dict] = field(default_factory=dict)
    not_run: set[tuple[str, str]] = field(default_factory=set)
    tcp_not_run: set[tuple[str, str]] = field(default_factory=set)
    clocks: dict[str, Clock] = field(default_factory=dict)
    exchange_errors: dict[str, str] = field(default_factory=dict)
    #: The nodes the ports check blames ({node: "in" | "out" | "both"}) once the first
    #: pairs are in; None before. The proof by launch, running meanwhile, cuts short a
    #: launch across nodes that includes one (it would hang to its timeout).
    ports_blamed: dict[str, str] | None = None
    launch: LaunchProof | None = None
    #: Each of the inventory's users' own launch (the users check); empty: none ran.
    users_launched: dict[str, Launch] = field(default_factory=dict)
    slurm: SlurmFacts | None = None

    @property
    def layout(self) -> Layout:
        return self.plan.layout

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.plan.nodes]

    def facts(self, name: str) -> dict | None:
        return self.sessions[name].facts

    @property
    def probed(self) -> list[str]:
        return [name for name in self.names if self.sessions[name].probed]

    @property
    def unprobed(self) -> list[str]:
        return [name for name in self.names if not self.sessions[name].probed]

    def mpi_address(self, name: str) -> str | None:
        """The address MPI traffic to `name` goes to, as far as doctor can tell."""
        return mpi_address(self.plan, name, self.facts(name))


def mpi_address(plan: ClusterPlan, name: str, facts: dict | None) -> str | None:
    import ipaddress

    node = plan.node(name)
    network = plan.network
    if facts:
        for iface, info in sorted(facts.get("interfaces", {}).items()):
            for cidr in info.get("addresses", []):
                address = cidr.split("/")[0]
                if network.interface and iface == network.interface:
                    return address
                if network.cidr and ipaddress.ip_address(address) in ipaddress.ip_network(
                    network.cidr
                ):
                    return address
    if node.address and is_ip(node.address):
        return node.address
    return None


def gather(plan: ClusterPlan, options: Options, progress: Progress) -> Gathered:
    sessions = sessions_for(plan)
    seed = options.seed if options.seed is not None else pair_plan.seed_for(plan.cluster)
    found = Gathered(plan, options, sessions, seed=seed)
    names = found.names
    found.pairs = pair_plan.plan(names, all_pairs=options.all_pairs, seed=seed)
    found.sampled = pair_plan.is_sampled(len(names), options.all_pairs)
    token = secrets.token_hex(8)
    total_pairs = sum(len(t) for t in found.pairs.values())
    pairs_budget = 30 + 2 * options.timeout + TCP_TIMEOUT + 0.1 * total_pairs
    deadline = options.timeout + options.gather_seconds + pairs_budget + 30
    if options.needs_launch:
        deadline += launch_proof.budget(len(names))
    users = [user.name for user in plan.users] if options.needs_users else []
    if users:
        deadline += launch_proof.users_budget(len(users), len(names))
    # one thread per node to connect, and two beside: the proof by launch and Slurm's facts
    pool = ThreadPoolExecutor(max_workers=max(2, min(options.workers, len(names))))
    try:
        progress(f"Connecting to {len(names)} node(s)")
        specs = {name: _spec(plan, name, token, deadline, options) for name in names}
        later = dict(pool.map(lambda s: _open(s, specs[s.name], options), sessions.values()))
        slurm = _slurm_facts(found, pool, progress)
        if options.needs_probe:
            _exchange_and_prove(found, pool, pairs_budget, progress)
        if options.needs_probe and users:
            found.users_launched = launch_proof.prove_users(found, users, progress)
        _later_facts(found, later)
        if slurm is not None:
            found.slurm = slurm.result()
    finally:
        # closed first: whatever a thread still waits for (Ctrl-C) then ends at once
        for session in sessions.values():
            with contextlib.suppress(ProbeError):
                session.send(None)
            session.close()
        pool.shutdown(wait=True)
    return found


def _slurm_facts(found: Gathered, pool: ThreadPoolExecutor, progress: Progress) -> Future | None:
    """Slurm's facts (its own connections), gathered beside the rest; None: not wanted."""
    if not found.options.needs_slurm or found.plan.scheduler is None:
        return None
    from mpicluster.slurm import gather_facts

    progress("Checking Slurm: daemons, munge, slurm.conf, node states, a PMIx launch")
    return pool.submit(gather_facts, found.plan)


def _exchange_and_prove(
    found: Gathered, pool: ThreadPoolExecutor, budget: float, progress: Progress
) -> None:
    """The pairs and the proof by launch, at once: the launches start once every probe
    has its peers (and has said its clock, which nothing then delays)."""
    options = found.options
    messages = _peer_messages(found, budget) if options.needs_exchange else {}
    if messages:
        progress("Checking node pairs: clocks, TCP ports, ssh mesh")
    pending = _start_pairs(found, messages)
    proving = pool.submit(launch_proof.prove, found, progress) if options.needs_launch else None
    if pending:
        _finish_pairs(found, messages, pending, budget)
    if proving is None:
        return
    found.launch = proving.result()
    lost = [name for name in found.launch.alone if name in found.exchange_errors]
    if lost:  # a probe lost during the pairs is no node to launch on: as if known before
        found.launch = launch_proof.prove(found, progress)


def _later_facts(found: Gathered, deadlines: dict[str, float]) -> None:
    """Each probe's slowest facts into its facts; a probe that does not send them is a
    probe that failed (its node not checked), as one that sends no facts at all."""
    for name in found.probed:
        session = found.sessions[name]
        try:
            message = session.answer("later facts", deadlines[name])
        except ProbeError as exc:
            session.facts = None
            session.error, session.error_kind = str(exc), PROBE_FAILED
            continue
        session.facts = {**(session.facts or {}), **_without_kind(message)}


def _without_kind(message: dict) -> dict:
    return {key: value for key, value in message.items() if key != "kind"}


def _spec(plan: ClusterPlan, name: str, token: str, deadline: float, options: Options) -> dict:
    node = next(n for n in plan.nodes if n.name == name)
    return {
        "cluster": plan.cluster,
        "token": token,
        "deadline": deadline,
        "listen": options.needs_ports,
        "names": [n.name for n in plan.nodes],
        "gpus": node.gpus,
        "files": list(layout.CONFIG_FILES),
        "mpi_variables": sorted({*mpi_settings.VARIABLES, *plan.mpi_env}),
        "stack_files": options.needs_stack_files,
        "rank_env": options.needs_rank_env,
        # the slowest facts in a message of their own: the pairs and launches go on
        "later": True,
        # the inventory's users, whose accounts the probe reads (none: nothing read)
        "users": [user.name for user in plan.users] if options.needs_users else [],
        "deep": options.deep,
        "resolve_timeout": min(5, options.timeout),
        "layout": {
            **plan.layout.as_vars(),
            "cuda_home": plan.stack.cuda_home if node.gpus else None,
        },
    }


def _open(session: NodeSession, spec: dict, options: Options) -> tuple[str, float]:
    """Connect, start the probe, read its facts; (name, the deadline of its later facts)."""
    session.open(options.timeout)
    deadline = time.monotonic() + options.timeout + options.gather_seconds
    if not session.connected or not options.needs_probe:
        return session.name, deadline
    try:
        session.start_probe(spec, options.timeout)
        session.facts = session.answer("facts", deadline)
    except ProbeError as exc:
        session.error, session.error_kind = str(exc), PROBE_FAILED
    return session.name, deadline


def _start_pairs(found: Gathered, messages: dict[str, dict]) -> dict[str, int]:
    """Send every probe its peers, all at once; each one's clock, its first answer, gives
    the node's skew. {node: the number of its request}, whose pairs come later."""
    sent: dict[str, tuple[int, float]] = {}
    for source, message in messages.items():
        try:
            sent[source] = (found.sessions[source].request(message), time.time())
        except ProbeError as exc:
            found.exchange_errors[source] = str(exc)
    deadline = time.monotonic() + min(10, found.options.timeout + 5)
    for source, (number, when) in sent.items():
        try:
            clock, back = found.sessions[source].answer_at("clock", deadline, number)
            found.clocks[source] = Clock(clock["time"] - (when + back) / 2, (back - when) / 2)
        except (ProbeError, KeyError, TypeError) as exc:
            found.exchange_errors[source] = str(exc)
    return {source: number for source, (number, _) in sent.items()}


def _finish_pairs(
    found: Gathered, messages: dict[str, dict], pending: dict[str, int], budget: float
) -> None:
    deadline = time.monotonic() + budget + 15
    _record_as_they_come(found, pending, deadline)

    # A pair that failed on its own (no pattern blames one node) on the network level
    # gets a second try, now that every node is done: a lossy moment, or a node busy
    # answering everyone, is not a broken pair. A pattern (every pair into a node
    # failing: a firewall, a missing key) is not retried, so it costs no more time.
    retries = {
        source: _retry_message(messages[source]["peers"], ssh_targets, tcp_names)
        for source, (ssh_targets, tcp_names) in retry_plan(found).items()
    }
    again: dict[str, int] = {}
    for source, message in retries.items():
        try:
            again[source] = found.sessions[source].request(message)
        except ProbeError as exc:
            found.exchange_errors[source] = str(exc)
    deadline = time.monotonic() + budget + 15
    for source, number in again.items():
        _record_pairs(found, source, number, deadline, "retried")


def _peer_messages(found: Gathered, budget: float) -> dict[str, dict]:
    """{source: the message telling its probe which peers to try over ssh and TCP}."""
    sessions = found.sessions
    options = found.options
    # A peer that answers nothing (no route, timeout) is left out: trying it from every
    # node would only cost every node one more timeout. One that answered the control
    # machine's connection but refused it (host key, authentication) is tried: that is
    # what the mesh check is for.
    reachable = {n for n, s in sessions.items() if s.connected or s.error_kind != NETWORK}
    messages = {}
    for source in found.probed:
        ssh_targets = []
        if options.needs_mesh:
            ssh_targets = [t for t in found.pairs[source] if t in reachable]
        tcp_targets = _tcp_targets(found, source) if options.needs_ports else []
        messages[source] = {
            "peers": {
                "ssh": ssh_targets,
                "tcp": tcp_targets,
                "budget": budget,
                "ssh_timeout": max(1, int(options.timeout)),
                "tcp_timeout": min(TCP_TIMEOUT, options.timeout),
                "ssh_workers": SSH_WORKERS,
                "tcp_workers": TCP_WORKERS,
            }
        }
    return messages


def _tcp_targets(found: Gathered, source: str) -> list[dict]:
    """The listeners of `source`'s planned peers: those whose probe listens, at an address."""
    targets = []
    for target in found.pairs[source]:
        facts = found.sessions[target].facts
        address = found.mpi_address(target)
        if facts and facts.get("port") and address:
            targets.append({"name": target, "address": address, "port": facts["port"]})
    return targets


def _record_pairs(
    found: Gathered, source: str, number: int, deadline: float, kind: str = "pairs"
) -> None:
    """Receive `source`'s pair results (ssh, TCP, and the pairs it ran out of time for)."""
    if source in found.exchange_errors:
        return
    try:
        result = found.sessions[source].answer(kind, deadline, number)
    except ProbeError as exc:
        found.exchange_errors[source] = str(exc)
        return
    for item in result.get("ssh", []):
        _record(found.ssh_pairs, (source, item["peer"]), item)
    for item in result.get("tcp", []):
        _record(found.tcp_pairs, (source, item["peer"]), item)
    for peer in result.get("not_run", []):
        found.not_run.add((source, peer))
    for peer in result.get("tcp_not_run", []):
        found.tcp_not_run.add((source, peer))


def _retry_message(peers: dict, ssh_targets: list[str], tcp_names: set[str]) -> dict:
    """The first message's peers cut down to the pairs worth a second try, all at once."""
    return {
        "retry": {
            **peers,
            "ssh": ssh_targets,
            "tcp": [t for t in peers["tcp"] if t["name"] in tcp_names],
            "ssh_workers": RETRY_WORKERS,
            "tcp_workers": RETRY_WORKERS,
        }
    }


def _record(pairs: dict, key: tuple[str, str], item: dict) -> None:
    """Store a pair's result; a second try replaces the first, remembering it."""
    first = pairs.get(key)
    if first is not None:
        item = {**item, "attempts": 2, "first": first}
    pairs[key] = item


#: How long a look at one node's pairs waits while others' may be in already.
PAIRS_LOOK = 0.05


def _record_as_they_come(found: Gathered, pending: dict[str, int], deadline: float) -> None:
    """Each node's first pair results as they arrive (a node still waiting on a silent
    peer holds no other up), and the ports check's blame after each: the proof by
    launch, running meanwhile, stops what would only hang on a blamed node."""
    left = dict(pending)
    while left:
        for source, number in list(left.items()):
            now = time.monotonic()
            session = found.sessions[source]
            if (
                source in found.exchange_errors
                or now >= deadline
                or session.answered("pairs", min(deadline, now + PAIRS_LOOK), number)
            ):
                _record_pairs(found, source, number, deadline)
                del left[source]
                found.ports_blamed = ports_blame(found)


def ports_blame(found: Gathered) -> dict[str, str]:
    """The nodes the ports check blames for the TCP pairs in so far (nodes.pairs'
    pattern); none where every pair failed (nothing then tells the nodes apart)."""
    tried = sorted(found.tcp_pairs)
    failures = {pair for pair, item in found.tcp_pairs.items() if not item["ok"]}
    if not failures or len(failures) == len(tried):
        return {}
    blamed, _ = pair_plan.attribute(tried, failures)
    return blamed


def retry_plan(found: Gathered) -> dict[str, tuple[list[str], set[str]]]:
    """{source: (ssh targets, tcp targets)} of the failed pairs worth a second try."""
    plan: dict[str, tuple[list[str], set[str]]] = {}
    ssh_failed = {k for k, v in found.ssh_pairs.items() if v["rc"] != 0}
    _, ssh_rest = pair_plan.attribute(sorted(found.ssh_pairs), ssh_failed)
    for source, target in ssh_rest:
        if network_failure(found.ssh_pairs[(source, target)]):
            plan.setdefault(source, ([], set()))[0].append(target)
    if "ports" not in found.options.checks:
        return plan  # the mesh alone used TCP only to find unreachable peers
    tcp_failed = {k for k, v in found.tcp_pairs.items() if not v["ok"]}
    _, tcp_rest = pair_plan.attribute(sorted(found.tcp_pairs), tcp_failed)
    for source, target in tcp_rest:
        plan.setdefault(source, ([], set()))[1].add(target)
    return plan


#: What an ssh client's stderr says when the network, not ssh, failed.
NETWORK_ERRORS = (
    "timed out",
    "no route to host",
    "connection closed by",
    "connection reset",
    "kex_exchange_identification",
    "broken pipe",
)


def network_failure(item: dict) -> bool:
    if item["rc"] is None:
        return True
    text = item["stderr"].lower()
    return item["rc"] == 255 and any(needle in text for needle in NETWORK_ERRORS)
