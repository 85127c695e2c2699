"""The kernel's ARP (neighbour) table limits, net.ipv4.neigh.default.gc_thresh1/2/3.

Above gc_thresh3 entries the kernel refuses new ones ("neighbor table overflow"):
connections to the peers it cannot resolve time out. Above gc_thresh2 it collects
entries within seconds; below gc_thresh1 never.
"""

from __future__ import annotations

KEYS = ("gc_thresh1", "gc_thresh2", "gc_thresh3")


def fits(entries: int, current: dict[str, int]) -> bool:
    """Whether limits `current` keep `entries` without collecting them."""
    return entries <= current.get("gc_thresh2", 0) <= current.get("gc_thresh3", 0)


def raised(entries: int, current: dict[str, int]) -> dict[str, int]:
    """Limits that keep `entries`, never lower than `current`, 1 <= 2 <= 3."""
    low = max(entries, current.get("gc_thresh1", 0))
    middle = max(2 * entries, current.get("gc_thresh2", 0), low)
    high = max(4 * entries, current.get("gc_thresh3", 0), middle)
    return {"gc_thresh1": low, "gc_thresh2": middle, "gc_thresh3": high}


def sysctl_command(limits: dict[str, int]) -> str:
    return "sysctl -w " + " ".join(f"net.ipv4.neigh.default.{k}={limits[k]}" for k in KEYS)
