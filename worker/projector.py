"""What triggers projection and catch-up.

* An append sets the namespace's ``scheduled`` marker (SET NX) and, if it was not set,
  enqueues one projection job: at most one queued job per namespace.
* A projection job holds the namespace's lease (never two projectors at once), folds batches
  until caught up or its batch cap, then atomically either keeps the marker and enqueues
  itself again (more to do) or deletes it (caught up), so no append falls between the two.
* A worker that starts (or a burst run) sweeps every namespace and schedules those behind,
  so work left by a dead worker is picked up when one returns.
* ``ensure_projected`` is the catch-up primitive for read-your-writes: project inline if the
  lease is free, otherwise wait (blocking reads on the changes stream) until a deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import structlog
from rq import Queue

from hivemind_memory.api_stub.protocol.jobs import (
    enqueue_projection,
    enqueue_redaction,
    enqueue_snapshot_refresh,
    schedule_projection,
)
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.events.errors import CatchUpTimeout
from hivemind_memory.events.positions import Position, format_pos, parse_pos
from hivemind_memory.projections.ranking.config import load_config
from hivemind_memory.projections.ranking.dupsketch import DupSpec, spec_of
from hivemind_memory.projections.store import snapshot_refresh
from hivemind_memory.projections.store.lease import (
    WAIT_SLICE_S,
    Lease,
    acquire_lease,
    changes_tail,
    try_lease,
    wait_for_change,
)
from hivemind_memory.projections.store.log import namespaces
from hivemind_memory.projections.store.readmodel import (
    BatchInfo,
    Folder,
    checkpoint,
    lagging,
    no_cycle_collection,
)
from hivemind_memory.projections.store.schedule import finish_job
from hivemind_memory.projections.store.types import Store
from hivemind_memory.worker.ops import metrics

log = structlog.get_logger("hivemind.schedule")

def behind(r: Store) -> list[str]:
    """Namespaces whose stream has entries past their checkpoint (sorted)."""
    return lagging(r, namespaces(r))


def enqueue_behind(r: Store, q: Queue) -> list[str]:
    """Schedule a projection job for every namespace that is behind (used at worker start)."""
    late = behind(r)
    for ns in late:
        schedule_projection(r, q, ns, force=True)
    if late:
        log.info("sweep_scheduled", namespaces=late)
    return late


def _log_batch(info: BatchInfo) -> None:
    metrics.observe_batch(info)
    log.info("projection_batch", ns=info.ns, count=info.count, first=info.first,
             last=info.last, applied=info.applied, dead=info.dead,
             duplicates=info.duplicates, committed=info.committed,
             duration_ms=round(info.seconds * 1000, 2))


@lru_cache(maxsize=8)
def lookup_spec(config_path: str | None) -> DupSpec:
    """The near-duplicate lookup's spec of the worker's ranking config (read once a path)."""
    return spec_of(load_config(config_path))


OnErased = Callable[[list[str]], None]
"""Told the notes a fold made erasable (``BatchInfo.erased``): it enqueues their redaction."""


OnCommitted = Callable[[int], None]
"""Told how many batches a fold committed (``snapshot_nudger``)."""


def fold_with_lease(r: Store, held: Lease, s: Settings, until: Position | None = None,
                    on_erased: OnErased | None = None,
                    on_committed: OnCommitted | None = None) -> int:
    """Fold batches while holding ``held`` (up to the batch cap, or until ``until``); the
    notes the committed batches erased go to ``on_erased``, and the number of batches
    committed to ``on_committed`` (once each, at the end)."""
    erased: list[str] = []
    committed: list[int] = []
    try:
        with no_cycle_collection():
            return _fold_batches(r, held, s, until, erased, committed)
    finally:
        if erased and on_erased is not None:
            on_erased(list(dict.fromkeys(erased)))
        if committed and on_committed is not None:
            on_committed(len(committed))


def snapshot_nudger(r: Store, q: Queue, ns: str) -> OnCommitted:
    """``on_committed`` that counts the batches committed since ``ns``'s index snapshot was
    last refreshed (``keys.index_lag``) and, past ``keys.SNAPSHOT_REFRESH_CHANGES``, queues
    one ``refresh_snapshot`` job on ``q`` (the projection queue), so the snapshot is kept
    current incrementally before the changes stream is trimmed past it."""
    def nudge(batches: int) -> None:
        lag = snapshot_refresh.count_committed(r, ns, batches)
        if snapshot_refresh.due(lag) and snapshot_refresh.mark_queued(r, ns):
            log.info("snapshot_refresh_enqueued", ns=ns, batches=lag)
            enqueue_snapshot_refresh(q, ns)
    return nudge


def redaction_enqueuer(q: Queue, ns: str) -> OnErased:
    """``on_erased`` that queues a ``redact_notes`` job on ``q`` (the projection queue)."""
    def enqueue(note_ids: list[str]) -> None:
        log.info("redaction_enqueued", ns=ns, notes=note_ids)
        enqueue_redaction(q, ns, note_ids)
    return enqueue


def _fold_batches(r: Store, held: Lease, s: Settings, until: Position | None,
                  erased: list[str], committed: list[int]) -> int:
    # One commit in flight at a time, each renewing the lease; only a batch that did not
    # commit asks whether the lease is still ours. ``close`` waits for the commit still in
    # flight, so every commit has run before the lease is given back.
    events = 0
    folder = Folder(r, held.ns, s.batch_size, held.token, held.lease_ms, until,
                    spec=lookup_spec(s.config_path))
    reached: Position | None = None
    try:
        for left in range(s.max_batches_per_job, 0, -1):
            if until is not None and (reached if reached is not None
                                      else checkpoint(r, held.ns)) >= until:
                break
            info = folder.step(more=left > 1)
            if info is None:
                break
            _log_batch(info)
            events += info.count
            erased += info.erased
            committed += [1] if info.committed else []
            reached = parse_pos(info.last) if info.committed else None
            if not info.committed and not held.renew():
                log.warning("projection_lease_lost", ns=held.ns)
                break
    finally:
        last = folder.close()
        if last is not None:
            _log_batch(last)
            events += last.count
            erased += last.erased
            committed += [1] if last.committed else []
    return events


def run_projection(r: Store, q: Queue, ns: str, s: Settings) -> dict[str, Any]:
    """The body of a projection job: fold, then reschedule or clear the marker atomically."""
    deadline = time.monotonic() + 2 * s.lock_lease_ms / 1000
    held = acquire_lease(r, ns, s.lock_lease_ms, deadline)
    events = 0
    if held is None:
        # Someone else (an inline catch-up, a replay, a stuck projector whose lease has not
        # expired yet) holds the lease. They may not reschedule, so fall through: if the
        # namespace is still behind, this job enqueues a successor, which waits again.
        log.info("projection_busy", ns=ns)
    else:
        try:
            events = fold_with_lease(r, held, s, on_erased=redaction_enqueuer(q, ns),
                                     on_committed=snapshot_nudger(r, q, ns))
        finally:
            held.release()
    more = finish_job(r, ns)
    if more:
        enqueue_projection(q, ns)
    status = "busy" if held is None else "more" if more else "caught_up"
    return {"ns": ns, "status": status, "events": events,
            "checkpoint": format_pos(checkpoint(r, ns))}


def ensure_projected(r: Store, ns: str, target: Position, s: Settings,
                     timeout_s: float | None = None,
                     on_erased: OnErased | None = None,
                     on_committed: OnCommitted | None = None) -> Position:
    """Return once the namespace is projected up to ``target``; raise ``CatchUpTimeout``.

    Projects inline when the lease is free (the caller is a worker), else waits for the
    projector holding it. Returns the checkpoint reached. ``on_erased`` as in
    ``fold_with_lease`` (a worker passes ``redaction_enqueuer``), and ``on_committed`` (a
    worker passes ``snapshot_nudger``).
    """
    deadline = time.monotonic() + (s.catch_up_timeout_s if timeout_s is None else timeout_s)
    after = changes_tail(r, ns)
    while True:
        cp = checkpoint(r, ns)
        if cp >= target:
            return cp
        held = try_lease(r, ns, s.lock_lease_ms)
        if held is not None:
            try:
                folded = fold_with_lease(r, held, s, until=target, on_erased=on_erased,
                                         on_committed=on_committed)
            finally:
                held.release()
            if folded == 0 and checkpoint(r, ns) < target:
                # nothing left to fold, yet short of the target: that position is not in the
                # stream (deleted, or never there); waiting would never end
                raise CatchUpTimeout(
                    f"namespace {ns!r}: stream position {format_pos(target)} is past the end "
                    f"of the log (checkpoint {format_pos(checkpoint(r, ns))})")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise CatchUpTimeout(
                f"namespace {ns!r} not projected up to {format_pos(target)} in time "
                f"(checkpoint {format_pos(checkpoint(r, ns))})")
        if held is None:  # another projector has the lease: wait for its next commit
            after = wait_for_change(r, ns, after, min(remaining, WAIT_SLICE_S))
