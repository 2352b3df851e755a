"""When a namespace's index snapshot is refreshed off the query path: the count of batches
committed since its last refresh (``keys.index_lag``) and the marker of a queued
``refresh_snapshot`` job (``keys.snapshot_queued``, at most one queued per namespace)."""

from __future__ import annotations

from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.types import Store


def count_committed(r: Store, ns: str, batches: int) -> int:
    """Add ``batches`` to ``ns``'s count since its last refresh; the new count."""
    return int(r.incrby(keys.index_lag(ns), batches))


def due(count: int) -> bool:
    """Whether ``count`` committed batches call for a refresh
    (``keys.SNAPSHOT_REFRESH_CHANGES``)."""
    return count >= keys.SNAPSHOT_REFRESH_CHANGES


def mark_queued(r: Store, ns: str) -> bool:
    """Set ``ns``'s refresh-queued marker (``keys.SCHEDULE_TTL_SECONDS``) unless it is set;
    True when this call set it (the caller enqueues the job)."""
    return bool(r.set(keys.snapshot_queued(ns), 1, nx=True, ex=keys.SCHEDULE_TTL_SECONDS))


def clear_queued(r: Store, ns: str) -> None:
    """A refresh starts: commits from now on may queue the next one."""
    r.delete(keys.snapshot_queued(ns))


def reset_count(r: Store, ns: str) -> None:
    """A refresh runs: count the batches committed from now on."""
    r.delete(keys.index_lag(ns))
