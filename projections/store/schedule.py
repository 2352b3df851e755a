"""The scheduled-projection marker: one short-lived key per namespace (``keys.scheduled``)
that says a projection job is queued or running, so an append enqueues at most one. Set here
when a job is enqueued; kept or cleared atomically with the stream's state when a job ends
(``lua/finish_job.lua``), so no append falls between the two."""

from __future__ import annotations

from collections.abc import Sequence

from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.scripts import script
from hivemind_memory.projections.store.types import Store


def mark_scheduled(r: Store, ns: str, force: bool = False) -> bool:
    """Set ``ns``'s marker unless it is set (``force``: set it anyway); True when this call
    set it, so the caller enqueues the job."""
    if force:
        r.set(keys.scheduled(ns), b"1", ex=keys.SCHEDULE_TTL_SECONDS)
        return True
    return bool(r.set(keys.scheduled(ns), b"1", nx=True, ex=keys.SCHEDULE_TTL_SECONDS))


def mark_many(r: Store, nss: Sequence[str]) -> list[bool]:
    """``mark_scheduled`` of each of ``nss`` in one round trip (a non-transactional pipeline
    of single-key SET NX, so a cluster client splits it by node); which ones this call set."""
    p = r.pipeline(transaction=False)
    for ns in nss:
        p.set(keys.scheduled(ns), b"1", nx=True, ex=keys.SCHEDULE_TTL_SECONDS)
    return [bool(x) for x in p.execute()]


def mark_and_register(r: Store, ns: str) -> bool:
    """``mark_scheduled`` of ``ns`` and ``log.register_namespaces`` of it in one round trip
    (a non-transactional pipeline of the marker's SET NX and the registry's SADD, so a
    cluster client splits it by node); True when this call set the marker."""
    p = r.pipeline(transaction=False)
    p.set(keys.scheduled(ns), b"1", nx=True, ex=keys.SCHEDULE_TTL_SECONDS)
    p.sadd(keys.NAMESPACES, ns)
    was_set, _ = p.execute()
    return bool(was_set)


def finish_job(r: Store, ns: str) -> bool:
    """End a projection job of ``ns``: True (marker kept) when the stream has entries past the
    checkpoint and another job must be enqueued, else False (marker cleared)."""
    return bool(script(r, "finish_job")(
        keys=[keys.stream(ns), keys.checkpoint(ns), keys.scheduled(ns)],
        args=[keys.SCHEDULE_TTL_SECONDS]))
