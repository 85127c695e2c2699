"""bench's baseline where both nodes of a pair have an RDMA port (InfiniBand, RoCE):
perftest's `ib_write_bw`, RDMA writes both ways at once (`-b`), 1 MiB messages for
DURATION seconds (`-D`), in Gb/s (`--report_gbits`); `up` installs perftest beside
rdma-core's libraries on such nodes.

Its result line (perftest's REPORT_FMT: " %-7lu    %-10lu       %-7.2lf            %-7.2lf
\\t\\t     %-7.6lf": bytes, iterations, BW peak, BW average, MsgRate) is the same in
Debian 12's perftest 4.5 and Debian 13's 25.01; with `-b` its bandwidth is the sum of
both directions, on both ends. The figure here is half that average: each way, GB/s.
"""

from __future__ import annotations

import shlex

#: perftest's out-of-band TCP port for bench (not its default 18515).
PORT = 18591
DURATION = 3
SIZE = "1M"
#: What its client says while the server is not listening yet.
NOT_YET = ("Couldn't connect", "Unable to init the socket connection")


def device_of(port: str) -> tuple[str, str]:
    """ "mlx5_0:1" (as NodeNetwork.rdma names ports) -> ("mlx5_0", "1")."""
    device, _, number = port.partition(":")
    return device, number or "1"


def _test(port: str) -> list[str]:
    device, number = device_of(port)
    return [
        "ib_write_bw", "-d", device, "-i", number, "-s", SIZE, "-D", str(DURATION), "-b",
        "--report_gbits", "-F", "-p", str(PORT),
    ]  # fmt: skip


def server_command(port: str) -> str:
    """One test served; never past a round's time even if no client came."""
    return f"timeout {DURATION + 40} {shlex.join(_test(port))} >/dev/null 2>&1; true"


def client_command(port: str, peer: str) -> str:
    """The client, tried again while the peer's server is not listening yet."""
    test = shlex.join([*_test(port), peer])
    waiting = "|".join(f"*{shlex.quote(words)}*" for words in NOT_YET)
    return (
        f"for i in $(seq 40); do out=$({test} 2>&1); "
        f"case $out in {waiting}) sleep 0.25;; *) break;; esac; done; "
        'printf "%s\\n" "$out"'
    )


def parse(text: str) -> tuple[float | None, str]:
    """(GB/s each way: half the bidirectional average; None with its words when it
    failed). The result row is the line whose first field is the message size and
    which has five numbers."""
    gbits = "Gb/sec" in text
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 5 and fields[0].isdigit() and fields[1].isdigit():
            try:
                average = float(fields[3])
            except ValueError:
                continue
            if average > 0 and gbits:
                return average / 2 / 8, ""
    said = [line.strip() for line in text.splitlines() if line.strip()]
    return None, said[-1] if said else "no output"
