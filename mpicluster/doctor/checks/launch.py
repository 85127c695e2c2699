"""The last check: MPI launched for real (doctor/launch_proof.py), each failure put on
its node (or node pair) and explained from evidence: what mpirun printed, and what
the other checks saw on that node. A fix names only a cause that was seen; where two
causes fit what was seen, both are named with how to tell them apart.
"""

from __future__ import annotations

import re

from mpicluster.doctor.checks import (
    consistency,
    disk,
    environment,
    mesh,
    names,
    network,
    rank_env,
    stack_files,
)
from mpicluster.doctor.checks.common import UP
from mpicluster.doctor.launch_proof import Launch, LaunchProof
from mpicluster.doctor.model import CheckReport, Result, Status, failed, passed, warned
from mpicluster.doctor.runner import Gathered

NAME = "launch"
TITLE = "MPI launched: on each node alone, then across nodes (the proof by launch)"

#: The checks whose findings can explain a failed launch, most telling first.
RELATED = (
    (mesh.NAME, mesh.check),
    (environment.NAME, environment.check),
    (rank_env.NAME, rank_env.check),
    (stack_files.NAME, stack_files.check),
    (names.NAME, names.check),
    (network.PORTS, network.check_ports),
    (network.INTERFACES, network.check_interfaces),
    (consistency.NAME, consistency.check),
    (disk.DISK, disk.check_disk),
)


class Related:
    """The other checks' failures and warnings, to explain a launch from."""

    def __init__(self, g: Gathered):
        self.install, self.prefix = g.layout.install, g.layout.prefix
        self.results: dict[str, list[Result]] = {}
        for name, run in RELATED:
            if name == mesh.NAME and not g.options.needs_mesh:
                continue
            if name == network.PORTS and not g.options.needs_ports:
                continue
            self.results[name] = [r for r in run(g).results if r.status != Status.PASS]

    def between_others(self, head: str) -> list[tuple[str, Result]]:
        """Findings about a pair of nodes neither of which is `head`."""
        return [
            (name, result)
            for name, results in self.results.items()
            for result in results
            if result.peer and head not in (result.node, result.peer)
        ]

    def about(self, node: str, head: str | None = None) -> list[tuple[str, Result]]:
        """Findings about `node`, and about the pair head -> node."""
        found = []
        for name, results in self.results.items():
            for result in results:
                mine = result.node == node and result.peer in (None, head)
                pair = head is not None and (result.node, result.peer) == (head, node)
                if mine or pair:
                    found.append((name, result))
        return found


#: A launch across nodes that worked but took SLOW_FACTOR times the slowest launch on
#: one node, and at least SLOW_LAUNCH seconds, is slow: bench is what says why.
SLOW_LAUNCH = 10.0
SLOW_FACTOR = 4


def check(g: Gathered) -> CheckReport:
    report = CheckReport(NAME, TITLE, not_checked=list(g.unprobed))
    proof: LaunchProof | None = g.launch
    if proof is None:
        return report
    report.details = [launch.to_dict() for launch in proof.launches]
    related = Related(g)
    for node, why in sorted(proof.skipped.items()):
        report.results.append(_skipped(node, why, related))
    for node, launches in proof.alone.items():
        bad = next((launch for launch in launches if not launch.ok), None)
        if bad is not None:
            report.results.append(explain(bad, node, related))
        else:
            timing = ", ".join(f"{x.ranks} rank(s) {x.seconds:.1f} s" for x in launches)
            report.results.append(passed(node, f"mpirun on {node} alone: {timing}{_how(launches)}"))
    if proof.all is not None:
        report.results.extend(_across(proof, proof.all, related))
    if proof.shared is not None:
        report.results.append(_shared(proof.shared, related))
    return report


def _shared(launch: Launch, related: Related) -> Result:
    """Two ranks on each of two nodes, after one rank on every node worked."""
    where = " and ".join(launch.hosts)
    if launch.ok:
        what = "allreduce exact" if launch.mpi else "every rank started"
        return passed(
            None,
            f"mpirun from {launch.head}, 2 ranks on each of {where}: {what} "
            f"({launch.seconds:.1f} s)",
        )
    result = explain(launch, launch.head, related)
    return failed(
        None,
        f"one rank per node worked, 2 ranks on each of {where} did not: {result.evidence}",
        result.fix
        if result.fix and "could not tell" not in result.fix
        else "several ranks per node meet Open MPI's shared-memory transport and its "
        "binding: try the same launch with --bind-to none and with --mca btl ^sm, and "
        "compare /dev/shm's size and the nodes' limits (ulimit -l, -n)",
    )


def _how(launches: list[Launch]) -> str:
    if any(launch.mpi for launch in launches):
        return ""
    return " (no mpi4py: the ranks started, MPI's own wire-up was not exercised)"


def _across(proof: LaunchProof, whole: Launch, related: Related) -> list[Result]:
    """One rank on every node: worked, or failed and put on the pairs, a node, or the
    launch of all nodes together."""
    if whole.ok:
        library = next((r.get("library") for r in whole.reports if r.get("mpi")), None)
        what = f"allreduce exact, {library}" if library else "every rank started"
        said = (
            f"mpirun from {whole.head}, one rank on each of {len(whole.hosts)} nodes: "
            f"{what} ({whole.seconds:.1f} s){_how([whole])}"
        )
        alone = max((x.seconds for x in proof.launches if x.round == "alone"), default=0.0)
        if whole.seconds > max(SLOW_LAUNCH, SLOW_FACTOR * alone):
            return [
                warned(
                    None,
                    f"{said}: slow, each node alone took {alone:.1f} s at most",
                    "what is slow between the nodes, not on them: `mpicluster doctor --perf` "
                    "measures every node's links in seconds, `mpicluster bench` names the "
                    "slow node or link (and compares with the network's own rate)",
                )
            ]
        return [passed(None, said)]
    bad = [p for p in proof.pairs if p.head == whole.head and not p.ok]
    if bad:
        return _pairs_failed(proof, whole.head, bad, related)
    return [_together_failed(whole, related)]


def _pairs_failed(
    proof: LaunchProof, head: str, bad: list[Launch], related: Related
) -> list[Result]:
    """Pair launches from `head` failed: blame the failed pairs, the head itself, the one
    node that shows a cause, or (none told apart) every pair."""
    first = [p for p in proof.pairs if p.head == head]
    second = [p for p in proof.pairs if p.head != head]
    if len(bad) < len(first) or len(first) == 1:
        return [explain(p, p.hosts[1], related, head=head) for p in bad]
    if second and any(p.ok for p in second):
        launch = bad[0]
        result = explain(launch, head, related)
        return [
            Result(
                Status.FAIL,
                head,
                f"every launch from {head} with another node failed ({launch.problem}), "
                f"launches from {second[0].head} worked: {result.evidence}",
                result.fix,
            )
        ]
    other = second[0].head if second else "no other node"
    suspects = sorted({n for p in bad for n in p.hosts if related.about(n)})
    if len(suspects) == 1:
        # every pair failed, from both heads (timing on a loaded machine can fail the
        # healthy ones too), and only one node of them shows a cause: that node
        node = suspects[0]
        launch = next((p for p in proof.pairs if node in p.hosts and not p.ok), bad[0])
        result = explain(launch, node, related)
        return [
            Result(
                Status.FAIL,
                node,
                f"every pair launch failed, from {head} and from {other}; of their nodes only "
                f"{node} shows a cause: {result.evidence}",
                result.fix,
            )
        ]
    result = explain(bad[0], bad[0].hosts[1], related, head=head)
    return [
        Result(
            Status.FAIL,
            None,
            f"every pair launch failed, from {head} and from {other}: {result.evidence}",
            result.fix,
        )
    ]


def _together_failed(whole: Launch, related: Related) -> Result:
    """Every pair from the head worked, all nodes together did not: a pair the head's
    launches do not exercise, if another check saw one, else the scale itself."""
    head = whole.head
    result = explain(whole, head, related)
    apart = related.between_others(head)
    if apart:
        name, seen = apart[0]
        return failed(
            seen.node,
            f"every pair from {head} worked, all {len(whole.hosts)} nodes together did "
            f"not: {result.evidence}; the {name} check saw: {seen.evidence} (a pair the "
            f"launches from {head} do not exercise)",
            seen.fix or "",
            peer=seen.peer,
        )
    return failed(
        None,
        f"every pair from {head} worked, all {len(whole.hosts)} nodes together did not: "
        f"{result.evidence}",
        result.fix
        if result.fix and "could not tell" not in result.fix
        else "the failure needs all nodes at once: compare mpirun's output in the JSON "
        "report (checks.launch) with sshd's MaxStartups and the nodes' file and process "
        "limits",
    )


def _skipped(node: str, why: str, related: Related) -> Result:
    seen = related.about(node)
    if seen:
        return failed(
            node,
            f"no MPI launch possible on {node}: {why}; {_seen(seen)}",
            _fixes(seen),
        )
    return failed(node, f"no MPI launch possible on {node}: {why}", f"install Open MPI ({UP})")


def _seen(seen: list[tuple[str, Result]]) -> str:
    return "; ".join(f"the {name} check saw: {result.evidence}" for name, result in seen[:3])


def _fixes(seen: list[tuple[str, Result]]) -> str:
    fixes: list[str] = []
    for _, result in seen:
        if result.fix and result.fix not in fixes:
            fixes.append(result.fix)
    return "; ".join(fixes[:3])


def _where(launch: Launch, node: str) -> str:
    if launch.round == "alone":
        return f"mpirun with {launch.ranks} rank(s) on {node} alone"
    if launch.round == "pair":
        return f"mpirun from {launch.head} with a rank on {launch.head} and on {launch.hosts[1]}"
    return f"mpirun from {launch.head} with one rank on each of {len(launch.hosts)} nodes"


def explain(launch: Launch, node: str, related: Related, head: str | None = None) -> Result:
    """A failed launch as a result about `node` (and the pair head -> node)."""
    said = "" if launch.no_mpi4py else key_line(launch)  # its own report says it all
    evidence = f"{_where(launch, node)}: {launch.problem}" + (f": {said!r}" if said else "")
    seen = related.about(node, head)
    peer = head if head and head != node else None
    from_output = cause_from_output(launch, node, related.install, related.prefix)
    if from_output is not None:
        evidence += f" ({from_output[0]})"
    # What another check read on the node names the cause more exactly than mpirun's
    # words can (a refused login: which of the reasons it is): its fix comes first.
    if seen:
        return failed(node, f"{evidence}; {_seen(seen)}", _fixes(seen), peer=peer)
    if from_output is not None:
        return failed(node, evidence, from_output[1], peer=peer)
    if launch.hung:
        other = head or launch.head
        return failed(
            node,
            f"{evidence}; the ports, names and mesh checks saw nothing wrong here",
            "two causes fit a launch that hangs while ssh and TCP to the probe's port work: "
            "MPI picking an interface or address that does not route between "
            f"{other} and {node} (set network.interface or network.cidr in the inventory), "
            "or a firewall on ports the probe did not try; `ip route get` for each "
            f"other's MPI address on {other} and {node} tells them apart",
            peer=peer,
        )
    looked = ", ".join(related.results)
    return failed(
        node,
        f"{evidence}; no known cause in mpirun's output, and the checks that explain "
        f"launches ({looked}) saw nothing wrong on {node}",
        "doctor could not tell the cause: mpirun's output is in the JSON report "
        "(checks.launch); rerun that launch by hand on "
        f"{launch.head} with `--mca plm_base_verbose 10` to see each step",
        peer=peer,
    )


#: mpirun output -> (what it shows, the fix); {node} and {head} filled in.
PATTERNS = (
    (
        "host key verification failed",
        "{head}'s ssh does not trust {node}'s host key",
        "compare {node}'s host key with the entry for it in {head}'s known_hosts "
        "(ssh-keygen -F {node}); `mpicluster up` rewrites the managed ones",
    ),
    (
        r"permission denied \(publickey",
        "{node} refused the MPI user's ssh login from {head}",
        "two causes fit and the other checks saw neither: {node}'s ~/.ssh/authorized_keys "
        "lacks the cluster key's line (`mpicluster up` restores it), or sshd there ignores "
        "the file (StrictModes: ~, ~/.ssh or authorized_keys writable by others); sshd's "
        "log on {node} (journalctl -u ssh, /var/log/auth.log) says which",
    ),
    (
        r"(prted|orted)[^\n]*(command not found|no such file)",
        "Open MPI's daemon is not on {node}'s non-interactive PATH",
        "the PATH a non-interactive ssh login gets on {node} (/etc/environment, and shell "
        "startup files that override it for ssh sessions)",
    ),
    (
        r"error while loading shared libraries: (\S+)",
        "a library is not found on {node}",
        "LD_LIBRARY_PATH of a non-interactive login on {node}, or /etc/ld.so.conf.d "
        "(`mpicluster up` writes both)",
    ),
    (
        "not enough slots",
        "the launch asked for more ranks than {node} offers",
        "the slots of {node} in the inventory or hostfile",
    ),
)


def cause_from_output(
    launch: Launch, node: str, install: str = "source", prefix: str = "/opt/mpicluster"
) -> tuple[str, str] | None:
    missing = launch.no_mpi4py
    if missing:
        where = ", ".join(sorted({launch.node_of(r.get("host", "?")) for r in missing}))
        python = missing[0].get("python", "the stack's Python")
        again = (
            "apt-get install --reinstall python3-mpi4py"
            if install == "packages"
            else f"{UP}: it installs the stack under {prefix} again from the pack where its "
            "files differ from the stack's manifest (the stack check names them)"
        )
        return (
            f"no mpi4py in {python} on {where}: {missing[0].get('error')}",
            f"reinstall mpi4py in {python} on {where} ({again})",
        )
    text = launch.output.lower()
    head = launch.head
    for pattern, cause, fix in PATTERNS:
        if re.search(pattern, text):
            return cause.format(node=node, head=head), fix.format(node=node, head=head)
    return None


ERROR_WORDS = ("error", "failed", "not found", "denied", "unable", "cannot", "refused", "abort")


def key_line(launch: Launch) -> str:
    """The line of mpirun's output that says most about the failure."""
    if launch.error:
        return ""
    lines = [
        line.strip()
        for line in launch.output.splitlines()
        if line.strip() and not line.startswith("MPICLUSTER-LAUNCH ") and set(line.strip()) - {"-"}
    ]
    telling = [line for line in lines if any(w in line.lower() for w in ERROR_WORDS)]
    chosen = (telling or lines or [""])[0]
    return chosen[:300]
