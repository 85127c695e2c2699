"""What moving mpicluster.nodes.transport onto Fabric costs, against the paramiko code it replaced.

Needs an sshd to talk to and connects to nothing but loopback or the local cluster
subnets (a literal address is required, no name lookups). Times, interleaved, in
--rounds rounds:

  (a) --connections fresh connections, one after another, each running `true`;
  (b) --fanout nodes (all the same sshd) in parallel through a run_everywhere fan-out;
  (c) one command with a program on stdin (what provision and smoke send), per size;
  (d) building the client object alone (no network): what Fabric adds per connection;

for three ways of doing it:

  paramiko (old)    the transport before Fabric: SSHClient + a hand-written channel
                    loop (copied below, as it was);
  fabric (new)      mpicluster.nodes.transport as it is: a fabric.Connection with the
                    project's host key policies, the same channel loop on its client;
  Connection.run    the same Connection, commands through Connection.run(hide=True,
                    warn=True, in_stream=..., timeout=...) instead of the channel loop.

Prints, per cell, the median (min, max) wall time and the median CPU time of this
process, each against the old code. Wall time on a shared machine is noisy; CPU time
is what the Python side costs. A throwaway sshd, all under /tmp/b:

    ssh-keygen -q -t ed25519 -N '' -f /tmp/b/hostkey
    ssh-keygen -q -t ed25519 -N '' -f /tmp/b/id && cp /tmp/b/id.pub /tmp/b/authorized_keys
    /tmp/b/sshd_config:  ListenAddress 127.0.0.1 / HostKey /tmp/b/hostkey /
        AuthorizedKeysFile /tmp/b/authorized_keys / UsePAM no / PidFile /tmp/b/sshd.pid /
        MaxStartups 200:30:400 / MaxSessions 100
    mkdir -p /run/sshd && /usr/sbin/sshd -D -f /tmp/b/sshd_config -p 2299 &

    .venv/bin/python benchmarks/transport_overhead.py --port 2299 --user root \
        --identity /tmp/b/id [--rounds 9]

Without --known-hosts, the host key is recorded on a first (untimed) connection into
a temporary file (accept-new); every timed connection then checks it strictly.
"""

from __future__ import annotations

import argparse
import getpass
import io
import ipaddress
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import paramiko
from invoke.exceptions import CommandTimedOut

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mpicluster.cluster.inventory import ResolvedSsh  # noqa: E402
from mpicluster.nodes import transport  # noqa: E402
from mpicluster.nodes.transport import RemoteResult, describe_error  # noqa: E402

#: Loopback, and the subnets the local (Podman/Vagrant) clusters use.
ALLOWED = [
    ipaddress.ip_network(n)
    for n in ("127.0.0.0/8", "::1/128", "192.168.61.0/24", "192.168.66.0/24", "192.168.68.0/24")
]
OLD, NEW, RUN = "paramiko (old)", "fabric (new)", "Connection.run"
SETUPS = 200
COUNT = "/usr/bin/python3 -c 'import sys; print(len(sys.stdin.read()))'"


# --- the transport before Fabric, as it was (connect, run_on, run_everywhere); the
# command loop on the channel is the same then and now: transport.run_command


def old_connect(ssh: ResolvedSsh, timeout: float | None = None) -> paramiko.SSHClient:
    timeout = timeout or ssh.connect_timeout
    client = paramiko.SSHClient()
    if ssh.known_hosts.exists():
        client.load_host_keys(str(ssh.known_hosts))
    if ssh.accept_new_host_keys:
        client.set_missing_host_key_policy(transport._AcceptNewPolicy(ssh.known_hosts))
    else:
        client.set_missing_host_key_policy(transport._RejectUnknown())
    client.connect(
        ssh.host,
        port=ssh.port,
        username=ssh.user,
        key_filename=str(ssh.identity) if ssh.identity else None,
        look_for_keys=ssh.identity is None,
        allow_agent=ssh.identity is None,
        timeout=timeout,
        banner_timeout=timeout,
        auth_timeout=timeout,
        channel_timeout=timeout,
    )
    link = client.get_transport()
    if link is not None:
        link.set_keepalive(15)
    return client


def old_run_on(inventory, node, command, *, timeout=30, stdin=None) -> RemoteResult:
    ssh = inventory.node_ssh(node)
    started = time.monotonic()
    try:
        client = old_connect(ssh)
    except Exception as exc:
        return RemoteResult(
            node.name, error=describe_error(ssh, exc), duration=time.monotonic() - started
        )
    try:
        code, out, err = transport.run_command(client, command, timeout, stdin)
    except TimeoutError:
        return RemoteResult(
            node.name,
            error=f"command timed out after {timeout:.0f} s",
            duration=time.monotonic() - started,
        )
    except (paramiko.SSHException, OSError) as exc:
        return RemoteResult(
            node.name, error=describe_error(ssh, exc), duration=time.monotonic() - started
        )
    finally:
        client.close()
    return RemoteResult(node.name, out, err, code, duration=time.monotonic() - started)


def old_client(ssh: ResolvedSsh) -> paramiko.SSHClient:
    """old_connect up to the network: the client object, its host keys and policy."""
    client = paramiko.SSHClient()
    if ssh.known_hosts.exists():
        client.load_host_keys(str(ssh.known_hosts))
    client.set_missing_host_key_policy(transport._RejectUnknown())
    return client


# --- the alternative: the same Connection, commands through Connection.run


def run_run_on(inventory, node, command, *, timeout=30, stdin=None) -> RemoteResult:
    ssh = inventory.node_ssh(node)
    started = time.monotonic()
    try:
        conn = transport.connect(ssh)
    except Exception as exc:
        return RemoteResult(
            node.name, error=describe_error(ssh, exc), duration=time.monotonic() - started
        )
    try:
        done = conn.run(
            command,
            hide=True,
            warn=True,
            in_stream=io.StringIO(stdin) if stdin is not None else False,
            timeout=timeout,
            encoding="utf-8",
        )
    except CommandTimedOut:
        return RemoteResult(
            node.name,
            error=f"command timed out after {timeout:.0f} s",
            duration=time.monotonic() - started,
        )
    finally:
        transport.close(conn)
    return RemoteResult(
        node.name, done.stdout, done.stderr, done.exited, duration=time.monotonic() - started
    )


RUN_ON: dict[str, Callable[..., RemoteResult]] = {
    OLD: old_run_on,
    NEW: transport.run_on,
    RUN: run_run_on,
}


def fan_out(run_on, inventory, command, *, timeout=30, workers=64) -> dict[str, RemoteResult]:
    """run_everywhere (unchanged by the move) with a given run_on."""
    targets = list(inventory.nodes)
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(targets)))) as pool:
        results = list(pool.map(lambda n: run_on(inventory, n, command, timeout=timeout), targets))
    return {r.node: r for r in results}


# --- a fleet of N "nodes" that are all the one sshd


@dataclass(frozen=True)
class _Node:
    name: str


class Fleet:
    """What run_on / run_everywhere read from a ClusterPlan: nodes and node_ssh."""

    def __init__(self, ssh: ResolvedSsh, count: int):
        self.ssh = ssh
        self.nodes = [_Node(f"n{i}") for i in range(count)]

    def node_ssh(self, node: _Node) -> ResolvedSsh:
        return self.ssh


def check(result: RemoteResult, expected: str | None = None) -> None:
    if not result.ok or (expected is not None and result.stdout.strip() != expected):
        raise SystemExit(
            f"{result.node}: error={result.error!r} exit={result.exit_code} "
            f"stdout={result.stdout[-200:]!r} stderr={result.stderr[-200:]!r}"
        )


class Clock:
    """Wall time, and this process's CPU time (all threads): the CPU figure is what
    the Python side costs, and moves much less when other work shares the machine."""

    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def read(self, per: int = 1) -> tuple[float, float]:
        """(wall ms, CPU ms), divided by `per`."""
        wall = (time.perf_counter() - self.wall) * 1000 / per
        return wall, (time.process_time() - self.cpu) * 1000 / per


def rotate(items: list[str], by: int) -> list[str]:
    by %= len(items)
    return items[by:] + items[:by]


def allowed(host: str) -> bool:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return any(address in net for net in ALLOWED)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1", help="a literal loopback/local address")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--user", default=getpass.getuser())
    parser.add_argument("--identity", type=Path, required=True)
    parser.add_argument("--known-hosts", type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=20)
    parser.add_argument("--fanout", type=int, default=50)
    parser.add_argument("--stdin-bytes", type=int, nargs="*", default=[1024, 20480])
    parser.add_argument(
        "--run-stdin-max",
        type=int,
        default=1024,
        help="largest stdin tried through Connection.run (it sends ~100 bytes a second)",
    )
    options = parser.parse_args()
    if not allowed(options.host):
        parser.error(f"{options.host}: only loopback or the local cluster subnets ({ALLOWED})")

    with tempfile.TemporaryDirectory() as work:
        known = options.known_hosts or Path(work) / "known_hosts"
        ssh = ResolvedSsh(
            host=options.host,
            user=options.user,
            port=options.port,
            identity=options.identity,
            known_hosts=known,
            accept_new_host_keys=options.known_hosts is None,
            connect_timeout=10,
        )
        transport.close(transport.connect(ssh))  # warm up; records the key if accept-new
        ssh = ssh.model_copy(update={"accept_new_host_keys": False})
        one = Fleet(ssh, 1)
        many = Fleet(ssh, options.fanout)
        cells: dict[tuple[str, str], list[tuple[float, float]]] = {}
        variants = list(RUN_ON)

        def record(key: str, name: str, sample: tuple[float, float]) -> None:
            cells.setdefault((key, name), []).append(sample)

        for round_ in range(options.rounds):
            # (a) one sample per connection, the variants taking turns (ABCABC...,
            # rotated each time) so that load from elsewhere falls on all of them
            for i in range(options.connections):
                for name in rotate(variants, round_ + i):
                    clock = Clock()
                    check(RUN_ON[name](one, one.nodes[0], "true"))
                    record("a", name, clock.read())
            order = rotate(variants, round_)
            for name in order:
                clock = Clock()
                if name == NEW:
                    results = transport.run_everywhere(many, "true", timeout=60)
                elif name == OLD:
                    results = fan_out(old_run_on, many, "true", timeout=60)
                else:
                    results = fan_out(run_run_on, many, "true", timeout=60)
                spent = clock.read()
                assert len(results) == options.fanout
                for result in results.values():
                    check(result)
                record("b", name, spent)
            for size in options.stdin_bytes:
                payload = "#" * (size - 1) + "\n"
                for name in order:
                    if name == RUN and size > options.run_stdin_max:
                        continue
                    clock = Clock()
                    check(RUN_ON[name](one, one.nodes[0], COUNT, stdin=payload), str(size))
                    record(f"c{size}", name, clock.read())
            for name, build in (
                (OLD, lambda: old_client(ssh)),
                (NEW, lambda: transport.connection(ssh)),
            ):
                clock = Clock()
                for _ in range(SETUPS):
                    build()
                wall, cpu = clock.read(SETUPS)
                record("d", name, (wall * 1000, cpu * 1000))  # microseconds
            print(f"  round {round_ + 1}/{options.rounds} done", file=sys.stderr)

    import fabric

    print(
        f"transport overhead, {options.rounds} rounds (fabric {fabric.__version__}, "
        f"paramiko {paramiko.__version__}, {options.host}:{options.port}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f})"
    )
    samples = options.rounds * options.connections
    rows = [
        ("a", f"(a) connect + `true`, one connection after another, ms ({samples} each)"),
        ("b", f"(b) `true` on {options.fanout} nodes at once, whole fan-out, ms"),
    ]
    rows += [
        (f"c{s}", f"(c) connect + python3 reading {s} B of stdin, ms") for s in options.stdin_bytes
    ]
    rows.append(("d", f"(d) the client object alone, no network, µs (mean of {SETUPS})"))
    print(f"{'':<36}{'wall: median':>13}{'min':>9}{'max':>9}{'vs old':>10}{'CPU':>9}{'vs old':>10}")
    for key, title in rows:
        print(title)
        old = cells[(key, OLD)]
        old_wall = statistics.median(w for w, _ in old)
        old_cpu = statistics.median(c for _, c in old)
        for name in variants:
            values = cells.get((key, name))
            if not values:
                if key != "d":
                    print(f"  {name:<34}{'(skipped: too slow)':>24}")
                continue
            walls = [w for w, _ in values]
            wall, cpu = statistics.median(walls), statistics.median(c for _, c in values)
            print(
                f"  {name:<34}{wall:>13.1f}{min(walls):>9.1f}{max(walls):>9.1f}"
                f"{(wall / old_wall - 1) * 100:>+9.1f}%"
                f"{cpu:>9.1f}{(cpu / old_cpu - 1) * 100:>+9.1f}%"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
