"""NVIDIA's nccl-tests, as the GPU smoke test runs them: the arguments, what an exit
status means, and a parser of `all_reduce_perf`'s standard output.

The format is nccl-tests 2.19's (src/util.cu): header lines start with `#`; one row
per message size, `%12li  %12li  %8s  %6s  %6s` (bytes, elements, type, redop, root)
then out-of-place and in-place `  %7s  %6s  %6s  %6g` (time in us, algbw and busbw in
GB/s, wrong elements; `   N/A` instead of the count when run with `-c 0`); the footer
`# Out of bounds values : N OK|FAILED` and `# Avg bus bandwidth    : X [OK|FAILED]`.
A per-iteration report (-I) or timestamps (-T) append columns, which are ignored.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

#: all_reduce_perf 8 B to 128 MiB in steps of x4, one GPU per rank, results checked.
ALL_REDUCE_ARGS = ("-b", "8", "-e", "128M", "-f", "4", "-g", "1", "-c", "1")

#: What every rank gets so that NCCL says which network it chose (its INIT and NET lines).
DEBUG_ENV = ("NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=INIT,NET")
#: NCCL's own words for it (NCCL 2.27-2.29: init.cc, net_ib, net_socket), each line
#: prefixed "host:pid:tid [rank] NCCL INFO ": "Using network IB", "NET/IB : Using
#: [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.1<0>", "NET/Socket : Using
#: [0]eth0:10.0.0.1<0>".
_NETWORK = re.compile(r"NCCL INFO Using network (\S+)")
_NET_DEVICES = re.compile(r"NCCL INFO NET/(IB|Socket) : Using (.*?)(?:; OOB .*)?\s*$")
#: NCCL's INFO lines: what a failure shows leaves them out.
INFO_LINE = re.compile(r" NCCL INFO ")
#: Whether NCCL moves GPU memory straight to the network card (GPUDirect RDMA), per
#: card (net_ib.cc, net_socket.cc: "NET/IB : GPU Direct RDMA Enabled for HCA 0
#: 'mlx5_0'"; on the H200 here: "NET/Socket : GPU Direct RDMA Disabled for HCA 0
#: 'eth0'"), and the connections that use it ("... via NET/IB/0/GDRDMA").
_GDR_CARD = re.compile(
    r"NCCL INFO NET/(.+?) : GPU Direct RDMA (Enabled|Disabled) for HCA \d+ '([^']+)'"
)
#: (a proxy rank in brackets: "via NET/IB/0(1)/GDRDMA")
_GDR_CHANNEL = re.compile(r"NCCL INFO Channel .* via NET/.+?/\d+(?:\(\d+\))?/GDRDMA")


def gpudirect(text: str) -> dict[str, object] | None:
    """What NCCL said of GPUDirect RDMA over its network cards: {"enabled": [cards],
    "disabled": [cards], "used": whether a connection went through it}; None when it
    said nothing (one node: no network connection at all, or NET lines not asked for)."""
    enabled: set[str] = set()
    disabled: set[str] = set()
    for match in _GDR_CARD.finditer(text):
        card = f"{match.group(1)}:{match.group(3)}"
        (enabled if match.group(2) == "Enabled" else disabled).add(card)
    used = bool(_GDR_CHANNEL.search(text))
    if not (enabled or disabled or used):
        return None
    return {"enabled": sorted(enabled), "disabled": sorted(disabled - enabled), "used": used}


def networks(text: str) -> dict[str, str]:
    """The network each rank said NCCL uses (IB, Socket, or a plugin's name), with the
    devices its NET line listed: {"IB": "[0]mlx5_0:1/IB", ...}."""
    found: dict[str, str] = {}
    devices: dict[str, str] = {}
    for line in text.splitlines():
        if match := _NETWORK.search(line):
            found.setdefault(match.group(1), "")
        elif match := _NET_DEVICES.search(line):
            devices.setdefault(match.group(1), match.group(2).strip())
    return {name: devices.get(name, "") for name in sorted(found)}


#: The exit status of an nccl-tests program is its testResult_t (src/common.h).
OK = 0
WRONG_OR_SLOW = 7  # testNumResults: wrong values, or busbw below NCCL_TESTS_MIN_BW
NCCL_ERROR = 3
EXIT_CODES = {
    1: "an internal error in nccl-tests",
    2: "a CUDA error",
    NCCL_ERROR: "an NCCL error",
    4: "an NCCL operation timed out",
    5: "not supported here (more ranks on a node than it has GPUs?)",
    6: "invalid arguments",
    WRONG_OR_SLOW: "wrong values, or a bus bandwidth below NCCL_TESTS_MIN_BW",
}

_NUMBER = r"[-+0-9.eE]+|inf|nan"
_HALF = rf"\s+({_NUMBER})\s+({_NUMBER})\s+({_NUMBER})\s+({_NUMBER}|N/A)"
_ROW = re.compile(rf"^\s*(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(-?\d+){_HALF}{_HALF}(?:\s|$)")
_OUT_OF_BOUNDS = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)?")
_AVG_BUSBW = re.compile(rf"^#\s*Avg bus bandwidth\s*:\s*({_NUMBER})\s*(OK|FAILED)?")
_VERSION = re.compile(r"^#\s*nccl-tests version (\S+) nccl-headers=(\d+) nccl-library=(\d+)")
_DEVICE = re.compile(
    r"^#\s+Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)\s+"
    r"\[[0-9a-fA-Fx:]+\]\s+(.*?)\s*$"
)
#: What nccl-tests' CUDACHECK, NCCLCHECK and its timeout print (on stdout, any rank).
_FAILURE = re.compile(r"Test (?:CUDA|NCCL) failure|Test timeout")


@dataclass(frozen=True)
class Half:
    """One direction of a row: out-of-place or in-place."""

    time_us: float
    algbw_gbs: float
    busbw_gbs: float
    wrong: int | None  # None: not checked (-c 0)


@dataclass(frozen=True)
class Row:
    bytes: int
    count: int
    type: str
    redop: str
    root: int
    out_of_place: Half
    in_place: Half

    @property
    def exact(self) -> bool | None:
        """Both directions checked and right; None when the run did not check."""
        wrong = (self.out_of_place.wrong, self.in_place.wrong)
        if None in wrong:
            return None
        return wrong == (0, 0)


@dataclass(frozen=True)
class Device:
    rank: int
    host: str
    device: int
    name: str


@dataclass
class Output:
    """What one nccl-tests run printed."""

    rows: list[Row] = field(default_factory=list)
    devices: list[Device] = field(default_factory=list)
    version: str = ""
    nccl: str = ""  # the NCCL library it ran with, e.g. "2.29.7"
    out_of_bounds: int | None = None
    avg_busbw_gbs: float | None = None
    min_bw_check: str = ""  # "OK" or "FAILED" when NCCL_TESTS_MIN_BW was set
    failures: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """The footer was printed: the run got through every size."""
        return self.out_of_bounds is not None and self.avg_busbw_gbs is not None

    @property
    def wrong_rows(self) -> list[Row]:
        return [r for r in self.rows if r.exact is False]

    def to_dict(self) -> dict:
        return asdict(self)


def nccl_version(code: int) -> str:
    """NCCL_VERSION_CODE as a version: 22907 -> 2.29.7 (before 2.9: 2805 -> 2.8.5)."""
    if code >= 10000:
        return f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    return f"{code // 1000}.{code // 100 % 10}.{code % 100}"


def parse(text: str) -> Output:
    """Parse all_reduce_perf's stdout (other nccl-tests programs print the same shape)."""
    out = Output()
    for line in text.splitlines():
        if _FAILURE.search(line):
            out.failures.append(line.strip())
        elif match := _ROW.match(line):
            out.rows.append(_row(match.groups()))
        elif match := _DEVICE.match(line):
            rank, host, device, name = match.groups()
            out.devices.append(Device(int(rank), host, int(device), name))
        elif match := _OUT_OF_BOUNDS.match(line):
            out.out_of_bounds = int(match.group(1))
        elif match := _AVG_BUSBW.match(line):
            out.avg_busbw_gbs = float(match.group(1))
            out.min_bw_check = match.group(2) or ""
        elif match := _VERSION.match(line):
            out.version, out.nccl = match.group(1), nccl_version(int(match.group(3)))
    return out


def _row(groups: tuple[str, ...]) -> Row:
    size, count, kind, redop, root = groups[:5]
    return Row(
        int(size), int(count), kind, redop, int(root), _half(groups[5:9]), _half(groups[9:13])
    )


def _half(cells: tuple[str, ...]) -> Half:
    time_us, algbw, busbw, wrong = cells
    return Half(
        float(time_us),
        float(algbw),
        float(busbw),
        None if wrong == "N/A" else int(float(wrong)),  # %6g: 2.09715e+06 for large counts
    )


def exit_meaning(code: int) -> str:
    return EXIT_CODES.get(code, f"exit status {code}")
