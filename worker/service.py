"""What only the worker knows, for the servers: the operator's views (status, dead letters,
a note's history, reproduced and explained queries, recency curves), the live heartbeats and
the metrics. ``hivemind serve`` asks this service (and ``Client`` for the rest) instead of
reading the store itself: the servers import neither ``projections.store`` nor the worker's
wings, only this module.

Made from a client's store, RQ connection, ranking config (``Client.config``: the fallback
of the views that use the config a served query ran under) and shard count; no method waits
for the projection (they report what is there).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from hivemind_memory.projections.ranking.config import RankingConfig
from hivemind_memory.projections.store.log import namespaces
from hivemind_memory.projections.store.types import QueueConn, Store
from hivemind_memory.worker.audit.explain import Explanation, explain
from hivemind_memory.worker.audit.explorer_data import (
    Curves,
    NoteRecency,
    config_in_force,
    curves,
    note_recency,
)
from hivemind_memory.worker.audit.reproduce import (
    NoteShow,
    ReproduceSummary,
    note_history,
    reproduce_queries,
    show_of,
)
from hivemind_memory.worker.ops import heartbeat, metrics
from hivemind_memory.worker.ops.heartbeat import WorkerBeat
from hivemind_memory.worker.ops.status import DeadLetters, Status, dead_letters, read_status

METRICS_CONTENT_TYPE = metrics.CONTENT_TYPE
"""The media type of ``WorkerService.metrics`` (Prometheus text exposition)."""


class WorkerService:
    """The worker's views of one store."""

    def __init__(self, store: Store, rq: QueueConn, cfg: RankingConfig, shards: int) -> None:
        self.store, self.rq, self.cfg, self.shards = store, rq, cfg, shards

    def watch(self) -> None:
        """Let ``metrics`` read this store (its lag, dead letters, queries per namespace)."""
        metrics.watch_store(self.store, self.rq)

    def metrics(self) -> bytes:
        """The Prometheus exposition of every store watched (``worker.ops.metrics``)."""
        return metrics.render()

    def beats(self) -> list[WorkerBeat]:
        """The live workers' heartbeats (what ``/metrics`` and ``hivemind status`` count)."""
        return heartbeat.read_beats(self.rq)

    def status(self, now: datetime, only: list[str] | None = None) -> Status:
        """``hivemind status``: every namespace (or ``only`` these), every live worker and
        the shards none of them serves."""
        return read_status(self.store, self.rq, now, only=only, shards=self.shards)

    def status_of(self, now: datetime, admin_of: Callable[[str], bool]) -> Status:
        """``status`` of every namespace ``admin_of`` accepts."""
        return self.status(now, only=[ns for ns in namespaces(self.store) if admin_of(ns)])

    def dead(self, ns: str, limit: int) -> DeadLetters:
        """``hivemind dead``: the namespace's first ``limit`` dead letters and their total."""
        return dead_letters(self.store, ns, limit)

    def show(self, ns: str, note_id: str) -> NoteShow | None:
        """``hivemind show``: the note, its events, where it was served (None: the namespace
        has neither the note nor an event of it)."""
        h = note_history(self.store, ns, note_id)
        return None if h.note is None and not h.events else show_of(h)

    def reproduce(self, ns: str, query_ids: Sequence[str] | None) -> ReproduceSummary:
        """``hivemind audit reproduce``: re-run served queries (None: all of them)."""
        return reproduce_queries(self.store, ns, self.cfg, query_ids)

    def explain(self, ns: str, query_id: str, note_id: str | None,
                derive_it: bool) -> Explanation:
        """``hivemind audit explain`` (``QueryError('not_found')`` for no such entry)."""
        return explain(self.store, ns, self.cfg, query_id,
                       note_id=note_id, derive_it=derive_it)

    def curves(self, ns: str) -> Curves:
        """The recency curves of the config in force beside 5 % a day."""
        return curves(self.store, ns, self.cfg)

    def recency(self, ns: str, note_id: str, now: datetime) -> NoteRecency | None:
        """A note's recency from its creation to ``now`` (None: not projected)."""
        cfg, _ = config_in_force(self.store, ns, self.cfg)
        return note_recency(note_history(self.store, ns, note_id), cfg, now)


__all__ = ["METRICS_CONTENT_TYPE", "Curves", "DeadLetters", "Explanation", "NoteRecency",
           "NoteShow", "ReproduceSummary", "Status", "WorkerBeat", "WorkerService"]
