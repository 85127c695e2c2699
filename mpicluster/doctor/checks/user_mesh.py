"""Each user's own MPI mesh, judged from her launch (launch_proof.Prover.users): her
login into the head with her node key, then her mpirun with one rank on every node
that launched alone. A pass says where her ranks ran; a failure names the node ssh
refused her on where mpirun's output says which, and what ssh said.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from mpicluster.doctor.launch_proof import Launch
from mpicluster.doctor.model import Result, failed, passed, warned

#: ssh's refusal as it reaches mpirun's output, with the address her ssh config gives
#: the node: "alice@192.168.61.13: Permission denied (publickey)."
REFUSED = re.compile(r"^(?:\S+@)?([\w.-]+): (Permission denied \([^)]*\))", re.M)
#: PRRTE naming the daemon it lost: "Remote daemon: [prterun-node1-5@0,2] on node node3".
LOST = re.compile(r"Remote daemon: *\S+ on node ([\w.-]+)")
#: Lines of ssh's own that say why a login failed.
SSH_SAYS = re.compile(
    r"Permission denied|Host key verification failed|REMOTE HOST IDENTIFICATION|"
    r"UNPROTECTED PRIVATE KEY|Bad owner or permissions|Could not resolve hostname|"
    r"Connection (?:refused|timed out|closed)|No route to host|Load key",
)


def judge(launches: Mapping[str, Launch], addresses: Mapping[str, str]) -> list[Result]:
    """One result per user whose launch ran: a pass, a warning where doctor could not
    act as her, else a failure on the node it is about (the cluster's if unknown).
    `addresses`: each node's address (as ssh names it) -> the node's name."""
    return [_one(name, launch, addresses) for name, launch in launches.items()]


def _one(name: str, launch: Launch, addresses: Mapping[str, str]) -> Result:
    head, output = launch.head, launch.output
    if launch.ok:
        what = "an mpi4py allreduce" if launch.mpi else "the ranks' start (no mpi4py)"
        return passed(
            None,
            f"{name}'s own mpirun from {head}: a rank on each of {', '.join(launch.ran_on)} "
            f"({what}), through {name}'s own node key, ssh config and known hosts",
        )
    if launch.rc == 1 and output.lstrip().startswith("sudo:"):
        return warned(
            None,
            f"{name}'s own launch not tried: the MPI user's `sudo -n -u {name}` on {head} "
            f"said {_first(output)!r}",
            "give the MPI user passwordless sudo on the nodes (`mpicluster up` needs it too), "
            "then run doctor again",
        )
    said = _ssh_says(output)
    node = _refusing(output, launch.hosts, addresses)
    by_hand = f"on {head}, `sudo -u {name} ssh {node or 'NODE'} true` shows it"
    # the fast path of `up` reads nothing inside a home (0700: not the MPI user's to read)
    fix = (
        f"run `mpicluster up --full`: it gives {name} her node keys, ssh config and known "
        f"hosts again (a plain `up` does not look inside her home); {by_hand}"
    )
    # ssh's own failure (its exit 255) before any mpirun ran: her login into the head
    if launch.rc == 255 and "PRTE" not in output and node in (None, head):
        return failed(
            head,
            f"{name} cannot log in to {head} from {head} with her node key"
            + (f": {said}" if said else f" (ssh exited 255: {_first(output) or 'no output'})"),
            fix,
        )
    where = f"{name}'s own mpirun from {head} across {', '.join(launch.hosts)}"
    evidence = f"{where}: {launch.problem}"
    if node:
        evidence += f"; ssh to {node} failed" + (f": {said}" if said else "")
    elif said:
        evidence += f"; ssh said: {said}"
    return failed(node, evidence, fix)


def _refusing(output: str, hosts: list[str], addresses: Mapping[str, str]) -> str | None:
    """The node whose login failed, where mpirun's output names one of the launch's."""
    for pattern in (REFUSED, LOST):
        for match in pattern.finditer(output):
            said = match.group(1)
            found = addresses.get(said) or said.split(".")[0]
            if found in hosts:
                return found
    return None


#: Open MPI's own messages ("[node1:06323] plm:rsh: Warning: setpgid(...) failed in
#: parent with errno=Permission denied(13)", from 4.1.4 at times): never ssh's words.
OWN = re.compile(r"^\s*\[[\w.-]+:\d+\]")


def _ssh_says(output: str) -> str:
    """ssh's refusal line if there is one, else its first line saying why it failed."""
    lines = [line.strip() for line in output.splitlines() if not OWN.match(line)]
    for pattern in (REFUSED, SSH_SAYS):
        for line in lines:
            if pattern.search(line):
                return line
    return ""


def _first(output: str) -> str:
    return next((line.strip() for line in output.splitlines() if line.strip()), "")
