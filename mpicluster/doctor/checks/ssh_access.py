"""Check 1: the control machine reaches every node: sshd answers, the host key is the
known one, the inventory's identity logs in, and a command runs."""

from __future__ import annotations

from mpicluster.doctor.model import CheckReport, Result, failed, passed
from mpicluster.doctor.runner import Gathered
from mpicluster.doctor.session import NodeSession

NAME = "ssh"
TITLE = "Reachability and authentication (control machine to each node)"


def check(g: Gathered) -> CheckReport:
    report = CheckReport(NAME, TITLE)
    for name in g.names:
        report.results.append(judge(g.sessions[name]))
    return report


def judge(session: NodeSession) -> Result:
    ssh = session.ssh
    target = f"{ssh.user}@{ssh.host}:{ssh.port}"
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
            f"check ssh.user / ssh.identity in the inventory: {ssh.user}'s "
            f"~/.ssh/authorized_keys on {session.name} must hold that key's public half"
        )
    if "cannot resolve" in error:
        return f"fix {session.name}'s address in the inventory (or DNS)"
    if "connection refused by" in error:
        return f"start sshd on {session.name} (systemctl start ssh) or fix ssh.port"
    return (
        f"is {session.name} up? check its power and network, that sshd runs, and that no "
        f"firewall drops port {ssh.port} (doctor waited one timeout and went on)"
    )
