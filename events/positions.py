"""Positions in a stream: Redis entry ids as ordered, named pairs. Pure vocabulary."""

from __future__ import annotations

from typing import NamedTuple


class Position(NamedTuple):
    """A stream entry id ``<ms>-<seq>``; tuples compare in log order."""

    ms: int
    seq: int


ZERO = Position(0, 0)
"""Before the first entry of any stream."""


def parse_pos(entry_id: str | bytes | None) -> Position:
    """``"1700000000000-3"`` -> ``Position(1700000000000, 3)``; None/empty -> ``ZERO``."""
    if not entry_id:
        return ZERO
    s = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    ms, _, seq = s.partition("-")
    return Position(int(ms), int(seq or 0))


def format_pos(pos: Position) -> str:
    """Inverse of ``parse_pos``."""
    return f"{pos.ms}-{pos.seq}"
