"""How a table with ids fits the terminal: the id columns keep every character (an id is
copied from the table into the next command); the other columns give way, in the order
asked, each down to its header's width, their cells cut with "…"."""

from __future__ import annotations

from collections.abc import Sequence

#: A column that gives way keeps at least this many characters (or its header's width).
NARROWEST = 4


def column_widths(
    natural: Sequence[int],
    narrowest: Sequence[int],
    give_way: Sequence[int],
    room: int,
) -> list[int]:
    """Each column's width: its natural one, less what the columns of `give_way` (by
    index, the first first) give, each down to its `narrowest`, until the table fits
    `room`. Columns not in `give_way` keep their natural width, even where the table
    cannot fit."""
    widths = list(natural)
    excess = sum(widths) - room
    for index in give_way:
        if excess <= 0:
            break
        given = min(excess, max(0, widths[index] - narrowest[index]))
        widths[index] -= given
        excess -= given
    return widths
