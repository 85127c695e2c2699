"""`--nodes NODE,...`: the one way every command chooses some of the inventory's nodes
(`run`, `bench`, `down`).

The option is comma-separated and repeatable (`--nodes a,b --nodes c`); the order given
is kept, a node named twice and a name the inventory does not have are bad input."""

from __future__ import annotations

from collections.abc import Iterable

from mpicluster.util.errors import UsageError

OPTION = "--nodes"


def split(values: Iterable[str] | None) -> tuple[str, ...]:
    """Each --nodes value split at its commas, in the order given (empty items, as of
    a trailing comma, dropped); UsageError where values were given and name no node."""
    given = list(values or ())
    names = tuple(name.strip() for value in given for name in value.split(",") if name.strip())
    if given and not names:
        raise UsageError(f"{OPTION}: no node named (give NODE,... as the inventory names them)")
    return names


def check(known: Iterable[str], chosen: Iterable[str]) -> tuple[str, ...]:
    """`chosen` as given, once each node is known to be one of `known`'s and named once;
    else a one-line UsageError naming the inventory's nodes."""
    names, picked = list(known), tuple(chosen)
    for name in picked:
        if name not in names:
            raise UsageError(f"{OPTION} {name!r}: no such node (one of: {', '.join(names)})")
    twice = next((name for i, name in enumerate(picked) if name in picked[:i]), None)
    if twice is not None:
        raise UsageError(f"{OPTION} names {twice!r} twice")
    return picked
