"""The one host-key policy, for every way mpicluster reaches a node from the control
machine: paramiko (the transport: doctor, run, the smoke test), OpenSSH under Ansible
(the playbooks) and OpenSSH under rsync (`run --sync`).

Host keys are always checked against the inventory's known_hosts file. An unknown host
is refused, unless the inventory opts into trust-on-first-use
(`ssh.accept_new_host_keys: true`, OpenSSH's `StrictHostKeyChecking accept-new`): then
its key is added to that file. A changed key is always refused.
"""

from __future__ import annotations

import threading
from pathlib import Path

import paramiko

from mpicluster.cluster.inventory import ResolvedSsh

_known_hosts_lock = threading.Lock()


def openssh_options(known_hosts: Path, accept_new: bool) -> list[str]:
    """The policy as OpenSSH `-o` options (without the -o)."""
    checking = "accept-new" if accept_new else "yes"
    return [f"StrictHostKeyChecking={checking}", f"UserKnownHostsFile={known_hosts}"]


def check(client: paramiko.SSHClient, ssh: ResolvedSsh) -> None:
    """The policy on a paramiko client, before it connects."""
    if ssh.accept_new_host_keys:
        client.set_missing_host_key_policy(_AcceptNewPolicy(ssh.known_hosts))
    else:
        client.set_missing_host_key_policy(_RejectUnknown())
    if ssh.known_hosts.exists():
        client.load_host_keys(str(ssh.known_hosts))


class _AcceptNewPolicy(paramiko.MissingHostKeyPolicy):
    """Record an unknown host key in the known_hosts file (accept-new, opted into)."""

    def __init__(self, path: Path):
        self.path = path

    def missing_host_key(self, client, hostname, key):
        with _known_hosts_lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


class _RejectUnknown(paramiko.MissingHostKeyPolicy):
    def missing_host_key(self, client, hostname, key):
        raise UnknownHostKey(hostname, key)


class UnknownHostKey(paramiko.SSHException):
    def __init__(self, hostname: str, key: paramiko.PKey):
        super().__init__(hostname)
        self.hostname = hostname
        self.key = key
