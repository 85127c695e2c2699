"""Check 1: the control machine reaches every node: sshd answers, the host key is the
known one, the inventory's identity logs in, and a command runs."""

from __future__ import annotations

import re

from mpicluster.doctor.model import CheckReport, Result, Status, failed, passed
from mpicluster.doctor.runner import Gathered
from mpicluster.doctor.session import NodeSession
from mpicluster.nodes import ssh_failures

NAME = "ssh"
TITLE = "Reachability and authentication (control machine to each node)"


def check(g: Gathered) -> CheckReport:
    report = CheckReport(NAME, TITLE)
    for name in g.names:
        result = judge(g.sessions[name])
        if result.status != Status.PASS and "authentication failed" in result.evidence:
            result = _refused(g, name, result)
        report.results.append(result)
    return report


def _refused(g: Gathered, node: str, result: Result) -> Result:
    """The control machine's key refused: the mesh tells which side of it is wrong."""
    into = {s: item for (s, t), item in g.ssh_pairs.items() if t == node}
    accepted = sorted(s for s, item in into.items() if item["rc"] == 0)
    denied = sorted(
        s
        for s, item in into.items()
        if ssh_failures.classify(item["stderr"], item["rc"]) == "denied"
    )
    user = g.sessions[node].ssh.user
    identity = g.sessions[node].ssh.identity or "the inventory's key"
    if accepted:
        return failed(
            node,
            f"{result.evidence}; {node} accepts the cluster key from {', '.join(accepted)}",
            f"{node} accepts the cluster key but not the control machine's ({identity}): "
            f"the line with its public half is missing from {user}'s "
            f"~/.ssh/authorized_keys there; add it back (ssh-copy-id -i {identity}), then "
            "rerun doctor",
        )
    if denied and len(denied) == len(into):
        return failed(
            node,
            f"{result.evidence}; {node} also refuses the cluster key from "
            f"{', '.join(denied)}: two different keys, two lines of authorized_keys, "
            "both refused",
            f"{node}'s sshd refuses the control machine's key and the cluster key alike, so "
            f"it ignores {user}'s ~/.ssh/authorized_keys (or {user}) as a whole, not a "
            "missing line: StrictModes (~, ~/.ssh or authorized_keys writable by group or "
            "others, or owned by another user), AuthorizedKeysFile, AllowUsers/DenyUsers, or "
            f"a locked account. sshd's log on {node}'s console (journalctl -u ssh, "
            "/var/log/auth.log) names it: `Authentication refused: bad ownership or modes` "
            "is StrictModes; fix that and rerun doctor",
        )
    return result


def judge(session: NodeSession) -> Result:
    ssh = session.ssh
    target = f"{ssh.user}@{ssh.host}:{ssh.port}"
    said = " ".join([session.error or "", *session.banner])
    if session.connected and ssh_failures.classify(said, 1) == "nologin":
        return failed(
            session.name,
            f"logged in to {target}, but the login shell refused to run a command: "
            "This account is currently not available.",
            f"{ssh.user}'s login shell on {session.name} is nologin (or false): "
            f"`chsh -s /bin/bash {ssh.user}` there; MPI's daemons, Ansible and doctor need "
            "a shell that runs commands",
        )
    if session.banner and session.connected:
        return _banner(session)
    if session.connected and session.error is None:
        server = session.server_version.removeprefix("SSH-2.0-") or "sshd"
        key = session.host_key.split()[-1] if session.host_key else "(unknown type)"
        return passed(
            session.name,
            f"{target} ({server}): host key {key} known, "
            f"key login in {session.connect_seconds:.1f} s",
        )
    if session.connected:  # logged in, but the probe could not run
        return failed(
            session.name,
            f"logged in to {target}, but doctor's probe failed: {session.error}",
            f"make sure {session.name} has /usr/bin/python3 (doctor, Ansible and mpi4py "
            "need it) and that the login shell runs commands",
        )
    return failed(session.name, session.error or "not reached", fix_for(session))


def _banner(session: NodeSession) -> Result:
    said = " / ".join(session.banner[:3])
    lines = ((session.facts or {}).get("access") or {}).get("printing") or []
    words = [w for w in re.split(r"\W+", session.banner[0]) if len(w) > 2][:4]
    source = next((line for line in lines if all(w in line for w in words)), None)
    where = (
        f"{source.split(': ', 1)[0]} prints it (`{source.split(': ', 1)[1]}`)"
        if source
        else "a shell startup file that runs for non-interactive logins prints it "
        "(doctor found no line that prints these words in the usual ones)"
    )
    return failed(
        session.name,
        f"a non-interactive login on {session.name} prints {said!r} before its command",
        f"{where}: rsync, scp/sftp (mpicluster run's code sync) and Ansible read that output "
        'as their protocol and fail; print only in interactive shells (after `[ -z "$PS1" ] '
        "&& return` in ~/.bashrc) or send it to stderr",
    )


def fix_for(session: NodeSession) -> str:
    ssh = session.ssh
    error = (session.error or "").lower()
    if "changed" in error:
        return (
            f"if {session.name} was reinstalled, verify its new key out of band, then "
            f"`ssh-keygen -R {ssh.host} -f {ssh.known_hosts}`, add the new key and rerun "
            "`mpicluster up` so the other nodes trust it too; otherwise treat it as an attack"
        )
    if "is not in" in error:
        return (
            f"verify {session.name}'s host key and add it to {ssh.known_hosts}, or set "
            "ssh.accept_new_host_keys: true in the inventory (trust on first use)"
        )
    if "authentication failed" in error:
        return (
            f"{session.name} refused {ssh.user} with {ssh.identity or 'the default keys'} and "
            "no peer's login tells more: either ssh.user / ssh.identity in the inventory is "
            f"not the pair {session.name} knows ({ssh.user}'s ~/.ssh/authorized_keys there "
            "must hold that key's public half), or sshd there ignores the file (StrictModes, "
            f"AllowUsers); sshd's log on {session.name} tells which"
        )
    if "cannot resolve" in error:
        return f"fix {session.name}'s address in the inventory (or DNS)"
    if "connection refused by" in error:
        return (
            f"nothing accepts connections on {session.name}'s port {ssh.port}: two causes "
            "fit, sshd not running (or listening on another port: ssh.port) or a firewall "
            f"rejecting the port (iptables REJECT); on {session.name}'s console "
            f"`ss -ltn | grep :{ssh.port}` shows whether sshd listens"
        )
    return (
        f"is {session.name} up? check its power and network, that sshd runs, and that no "
        f"firewall drops port {ssh.port} (doctor waited one timeout and went on)"
    )
