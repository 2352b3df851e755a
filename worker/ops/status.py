"""What an operator asks first: how far behind is each namespace, what is dead-lettered, when
was the last query served, which workers are alive. Read from Redis (so every process, the
CLI's ``status`` and each worker's ``/metrics``, sees the same figures); writes nothing.

Lag in entries is the stream's length minus the entries the checkpoint covers (``projected``,
written atomically with the checkpoint); lag in seconds is the age of the oldest entry not yet
projected (its stream id is its append time), 0 when caught up.
"""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from hivemind_memory.api_stub.protocol.jobs import query_queue_name, worker_records
from hivemind_memory.events.positions import ZERO, Position, format_pos, parse_pos
from hivemind_memory.projections.store.counters import read_counters
from hivemind_memory.projections.store.log import namespaces, read_after
from hivemind_memory.projections.store.readmodel import DeadLetterRow, dead_total, read_dead
from hivemind_memory.projections.store.results import AUDIT_FIELD
from hivemind_memory.projections.store.types import QueueConn, Store, StreamEntry
from hivemind_memory.worker.ops.heartbeat import IndexMemory, read_beats

LEGACY_COUNT_PAGE = 10_000
"""Page size when counting the unprojected entries of a read model older than ``projected``."""


class LastQuery(msgspec.Struct, frozen=True):
    """The newest entry of a namespace's audit stream."""

    query_id: str
    agent: str
    served_at: datetime
    as_of: datetime


class NamespaceStatus(msgspec.Struct, frozen=True):
    """One namespace as ``hivemind status`` lists it."""

    ns: str
    stream_length: int
    """Entries in the event log (it is never trimmed: every event ever appended)."""
    checkpoint: str
    """Last stream entry id folded into the read model ("0-0" when none)."""
    projected: int
    """Entries the checkpoint covers."""
    lag_entries: int
    lag_seconds: float
    """Age of the oldest entry not yet projected, at the time of the reading (0 if none)."""
    dead_letters: int
    queries_served: int
    """Entries of the audit stream (one per query served)."""
    last_query: LastQuery | None


class WorkerStatus(msgspec.Struct, frozen=True):
    """A live worker process (its heartbeat key is alive, see ``worker.heartbeat``)."""

    name: str
    state: str
    queues: list[str]
    hostname: str
    pid: int
    last_heartbeat: datetime | None
    successful_jobs: int
    failed_jobs: int
    kind: str = "worker"
    """``worker`` (a ``hivemind worker`` process) or ``in-process`` (inside ``serve``/``mcp``)."""
    shards: list[int] = []
    """The shards whose queries it answers (of ``shard_count``; empty: a worker from before
    shards, serving ``hivemind-query``)."""
    shard_count: int = 0
    namespaces_held: list[str] = []
    """The namespaces whose index it holds in memory (the first 1,000 by name)."""
    namespace_count: int = 0
    rss_bytes: int = 0
    """Its resident memory at its last heartbeat (0: not known)."""
    memory: IndexMemory | None = None
    """Its namespace indexes against its memory budget, and the namespaces it could not
    hold lately (None before its first query job)."""


class Status(msgspec.Struct, frozen=True):
    """``hivemind status --json``."""

    at: datetime
    namespaces: list[NamespaceStatus]
    workers: list[WorkerStatus]
    shard_count: int = 1
    """``HIVEMIND_SHARDS`` as the reader sees it."""
    unserved_shards: list[int] = []
    """Shards no live worker answers: their queries get ``shard_unavailable`` at once."""


def _entry_ms(entry_id: bytes | str) -> int:
    raw = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(raw.partition("-")[0])


def _utc_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _count_after(r: Store, ns: str, after: Position) -> int:
    """Entries after ``after``, counted page by page (read models written before the
    ``projected`` counter existed)."""
    n, pos = 0, after
    while True:
        got = read_after(r, ns, pos, LEGACY_COUNT_PAGE)
        if not got:
            return n
        n += len(got)
        pos = parse_pos(got[-1].id)


def _last_query(e: StreamEntry | None) -> LastQuery | None:
    if e is None:
        return None
    try:
        ev = msgspec.json.decode(e.fields.get(AUDIT_FIELD, b"{}"))
        as_of = msgspec.convert(ev.get("as_of"), datetime)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return LastQuery(query_id=str(ev.get("query_id", "")), agent=str(ev.get("agent", "")),
                     served_at=_utc_ms(_entry_ms(e.id)), as_of=as_of)


def namespace_status(r: Store, ns: str, now: datetime) -> NamespaceStatus:
    """The status of one namespace at ``now`` (one pipelined read, plus one range read when
    it is behind)."""
    c = read_counters(r, ns)
    cp, length = c.checkpoint, c.stream_length
    if c.projected is not None:
        projected = c.projected
        lag = max(0, length - projected)
    elif cp == ZERO:
        projected, lag = 0, length
    else:
        lag = _count_after(r, ns, cp)
        projected = length - lag
    lag_s = 0.0
    if lag:
        first = read_after(r, ns, cp, 1)
        if first:
            lag_s = max(0.0, (now - _utc_ms(_entry_ms(first[0].id))).total_seconds())
    return NamespaceStatus(ns=ns, stream_length=length, checkpoint=format_pos(cp),
                           projected=projected, lag_entries=lag, lag_seconds=round(lag_s, 3),
                           dead_letters=c.dead_letters,
                           queries_served=c.audit_length, last_query=_last_query(c.last_audit))


def _text(v: object) -> str | None:
    return v.decode() if isinstance(v, bytes) else None if v is None else str(v)


def live_workers(rq: QueueConn) -> list[WorkerStatus]:
    """Worker processes whose heartbeat is alive (``worker.ops.heartbeat``: a SIGKILLed worker
    drops out within ``keys.WORKER_BEAT_TTL_SECONDS``), with RQ's state and job counters
    where RQ's registry has them (the ``hivemind worker`` process), else their own."""
    beats = read_beats(rq)
    rows = worker_records(rq, [b.name for b in beats])
    out = []
    for b, (state, ok, failed) in zip(beats, rows, strict=True):
        out.append(WorkerStatus(
            name=b.name, state=_text(state) or b.state or "idle", queues=b.queues,
            hostname=b.hostname, pid=b.pid, last_heartbeat=b.beat_at,
            successful_jobs=int(_text(ok) or b.successful_jobs),
            failed_jobs=int(_text(failed) or b.failed_jobs), kind=b.kind, shards=b.shards,
            shard_count=b.shard_count, namespaces_held=b.namespaces,
            namespace_count=b.namespace_count, rss_bytes=b.rss_bytes, memory=b.memory))
    return sorted(out, key=lambda w: w.name)


class DeadLetters(msgspec.Struct, frozen=True):
    """``hivemind dead`` and ``GET /v1/ns/{ns}/dead``: the first ``limit`` dead letters,
    oldest first, and how many there are."""

    ns: str
    total: int
    shown: int
    truncated: bool
    """True when there are more than ``shown``."""
    dead: list[DeadLetterRow]


def dead_letters(r: Store, ns: str, limit: int) -> DeadLetters:
    """The namespace's first ``limit`` dead letters and their total."""
    total = dead_total(r, ns)
    shown = read_dead(r, ns, count=limit)
    return DeadLetters(ns=ns, total=total, shown=len(shown), truncated=total > len(shown),
                       dead=shown)


def unserved(workers: list[WorkerStatus], shards: int) -> list[int]:
    """The shards of ``shards`` whose query queue no worker of ``workers`` listens on."""
    served = {name for w in workers for name in w.queues}
    return [k for k in range(shards) if query_queue_name(k, shards) not in served]


def read_status(r: Store, rq: QueueConn, now: datetime, only: list[str] | None = None,
                shards: int = 1) -> Status:
    """Every namespace (or ``only`` these), every live worker, and the shards (of
    ``shards``) that none of them serves."""
    nss = namespaces(r) if only is None else only
    workers = live_workers(rq)
    return Status(at=now, namespaces=[namespace_status(r, ns, now) for ns in nss],
                  workers=workers, shard_count=shards,
                  unserved_shards=unserved(workers, shards))
