"""Times at the edge: every timezone-aware time is range-checked before it is converted to
UTC, so an offset that would push it past year 9999 or before year 1 is a clear error naming
the field, never an ``OverflowError`` deep in a job. Pure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


def to_utc(t: datetime, what: str) -> datetime:
    """``t`` in UTC; ``ValueError`` naming ``what`` when it has no timezone or when, in UTC,
    it falls outside what a datetime can hold (``9999-12-31T23:00:00-05:00``,
    ``0001-01-01T00:00:00+05:00``)."""
    offset = t.utcoffset()
    if offset is None:
        raise ValueError(f"{what} {t.isoformat()} has no timezone")
    if t.tzinfo is UTC:
        return t
    wall = t.replace(tzinfo=None)
    # UTC = wall - offset; check it stays within datetime's range before computing it
    if (offset > timedelta(0) and wall < datetime.min + offset) or (
            offset < timedelta(0) and wall > datetime.max + offset):
        raise ValueError(f"{what} {t.isoformat()} is out of range once converted to UTC "
                         "(years 0001..9999)")
    return t.astimezone(UTC)
