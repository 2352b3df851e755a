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
from typing import IO, Any

from hivemind_memory.projections.ranking.config import RankingConfig
from hivemind_memory.projections.store.log import length as log_length
from hivemind_memory.projections.store.log import namespaces
from hivemind_memory.projections.store.types import QueueConn, Store
from hivemind_memory.worker.audit import archive, config_sweep
from hivemind_memory.worker.audit.archive import ExportReport
from hivemind_memory.worker.audit.config_sweep import SweepRow
from hivemind_memory.worker.audit.explain import Explanation, explain
from hivemind_memory.worker.audit.explorer_data import (
    Curves,
    NoteRecency,
    config_in_force,
    curves,
    note_recency,
)
from hivemind_memory.worker.audit.reproduce import (
    Auditor,
    NoteShow,
    ReproduceSummary,
    Reproduction,
    ServedEntry,
    all_served,
    list_served,
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

    def served(self, ns: str, *, agent: str | None = None, since: datetime | None = None,
               until: datetime | None = None, before: str | None = None, limit: int = 20
               ) -> tuple[list[ServedEntry], str | None]:
        """``hivemind audit list``: one page of served queries, newest first, and the audit
        id of the next page (None: no more)."""
        return list_served(self.store, ns, agent=agent, since=since, until=until,
                           before=before, limit=limit)

    def all_served(self, ns: str) -> list[ServedEntry]:
        """Every served query of the namespace, oldest first."""
        return all_served(self.store, ns)

    def reproduce(self, ns: str, query_ids: Sequence[str] | None,
                  on_each: Callable[[Reproduction], None] | None = None) -> ReproduceSummary:
        """``hivemind audit reproduce``: re-run served queries (None: all of them);
        ``on_each`` sees each reproduction as it is made."""
        return reproduce_queries(self.store, ns, self.cfg, query_ids, on_each=on_each)

    def sweep(self, ns: str, served: Sequence[ServedEntry], combos: Sequence[dict[str, Any]],
              on_query: Callable[[], None] | None = None) -> list[SweepRow]:
        """``hivemind sweep``: ``served`` re-ranked under each config override of
        ``combos`` (``worker.audit.config_sweep``)."""
        return config_sweep.sweep_configs(Auditor(self.store, ns, self.cfg), served, combos,
                                          on_query=on_query)

    def log_length(self, ns: str) -> int:
        """How many entries the namespace's log holds (``export``'s progress total)."""
        return log_length(self.store, ns)

    def export(self, ns: str, out: IO[bytes], *, until: datetime | None = None,
               with_audit: bool = False,
               on_entry: Callable[[], object] | None = None) -> ExportReport:
        """``hivemind export``: the namespace's log (and audit) as JSON lines into ``out``
        (``worker.audit.archive``)."""
        return archive.export(self.store, ns, out, until=until, with_audit=with_audit,
                              on_entry=on_entry)

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


__all__ = [
    "METRICS_CONTENT_TYPE",
    "Curves",
    "DeadLetters",
    "Explanation",
    "ExportReport",
    "NoteRecency",
    "NoteShow",
    "ReproduceSummary",
    "Reproduction",
    "ServedEntry",
    "Status",
    "SweepRow",
    "WorkerBeat",
    "WorkerService",
]
