"""The OpenSSH client's command line for a node's resolved ssh settings, host keys checked
the project's one way (nodes/host_keys.py): what rsync's `-e` runs (run's sync and
collect) and what the benchmarks time beside paramiko."""

from __future__ import annotations

from mpicluster.cluster.inventory import ResolvedSsh
from mpicluster.nodes import host_keys


def ssh_argv(ssh: ResolvedSsh) -> list[str]:
    """The OpenSSH command line for the inventory's settings, host keys checked."""
    argv = [
        "ssh",
        "-o",
        "BatchMode=yes",
        *(
            word
            for option in host_keys.openssh_options(ssh.known_hosts, ssh.accept_new_host_keys)
            for word in ("-o", option)
        ),
        "-o",
        f"ConnectTimeout={int(ssh.connect_timeout)}",
        "-p",
        str(ssh.port),
    ]
    if ssh.identity:
        argv += ["-o", "IdentitiesOnly=yes", "-i", str(ssh.identity)]
    return argv
