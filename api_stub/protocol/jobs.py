"""What the client and the worker agree on about RQ: queues, job names, retry policy, and the
scheduling of a namespace's projection after an append.

Job functions are named by string, never imported here, so the client does not import the
worker; ``JOB_FUNCTIONS`` is the complete list of functions a hivemind queue may name.

The allowlist is enforced by ``SafeJob``, the job class of every hivemind queue and worker:
RQ resolves a job's function by importing whatever ``func_name`` the job names, and its
success/failure/stopped callbacks the same way, so whoever can write to RQ's Redis could make
a worker import and call anything. ``SafeJob`` checks the names against ``JOB_FUNCTIONS``
before anything is imported: a job naming another function, a bound instance or any callback,
or whose payload is not hivemind's JSON (a pickle, say), raises ``JobRefused`` from ``func``
(the worker logs ``job_refused`` and RQ moves the job to the failed registry) and is never
retried.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence
from typing import Any

from rq import Queue, Retry, Worker
from rq.exceptions import DeserializationError
from rq.job import Job

from hivemind_memory.api_stub.protocol.serializer import JSONSerializer
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.events.errors import ConfigError, JobRefused
from hivemind_memory.projections.store.schedule import (
    mark_and_register,
    mark_many,
    mark_scheduled,
)
from hivemind_memory.projections.store.types import QueueConn, Store, plain_redis

PROJECT_QUEUE = "hivemind-project"
"""RQ queue of projection jobs."""
QUERY_QUEUE = "hivemind-query"
"""RQ queue of query jobs when there is one shard (a worker serves it before projection
jobs); with several, each shard has its own (``query_queue_name``)."""
PROJECT_JOB = "hivemind_memory.worker.jobs.project_namespace"
"""Job function that folds one namespace's pending events."""
QUERY_JOB = "hivemind_memory.worker.jobs.answer_queries"
"""Job function that answers a chunk of queries."""
REDACT_JOB = "hivemind_memory.worker.jobs.redact_notes"
"""Job function that redacts erased notes' content (enqueued by a projector that folded a
``note.erased``, or dead-lettered content for an erased note)."""
SNAPSHOT_JOB = "hivemind_memory.worker.jobs.refresh_snapshot"
"""Brings a namespace's index snapshot up to date, off every query's path (project queue)."""
JOB_FUNCTIONS = frozenset({PROJECT_JOB, QUERY_JOB, REDACT_JOB, SNAPSHOT_JOB})
"""Every function a hivemind job may name."""
PROJECT_RETRIES = 3
"""Retries of a failed projection job."""
QUERY_RETRIES = 2
"""Retries of a failed query job."""
JOB_RESULT_TTL = 300
"""Seconds RQ keeps a finished job's return value."""
JOB_FAILURE_TTL = 86_400
"""Seconds RQ keeps a failed job in its failed registry."""
MIN_QUERY_CHUNK = 25
"""Smallest query job a batch is split into while several workers share it (a job costs a
worker ~10 ms besides its queries, see ``Settings.query_chunk``: 25 queries' work keeps that
under half)."""
JOBS_PER_WORKER = 1
"""A batch shared by several workers is cut so that each job is at most the remaining
queries over this many jobs per worker (guided self-scheduling: big jobs first, smaller ones
as the batch runs out, so the workers finish together). 1 rather than 2: half as many jobs
for the same tail (two workers on a dense 1,000-query batch: 8 % more answers a second over
HTTP and the SDK, 2 % through the CLI, three alternating runs each)."""


def shard_of(ns: str, shards: int) -> int:
    """The shard whose queue takes ``ns``'s queries: CRC-32 of its UTF-8 bytes mod
    ``shards``, the same in every process, machine and Python version (never ``hash()``,
    which is salted per process)."""
    return zlib.crc32(ns.encode()) % shards


def query_queue_name(shard: int, shards: int) -> str:
    """The RQ queue of ``shard`` out of ``shards``: ``hivemind-query`` for one shard (as
    before shards existed), ``hivemind-query-<shard>-of-<shards>`` for several. The count is
    in the name, so a client and a worker that disagree on ``HIVEMIND_SHARDS`` never share a
    queue: the client finds no live worker for its queue and says so at once."""
    if not 0 <= shard < shards:
        raise ValueError(f"shard {shard} is not within 0..{shards - 1}")
    return QUERY_QUEUE if shards == 1 else f"{QUERY_QUEUE}-{shard}-of-{shards}"


def parse_shards(spec: str, shards: int) -> tuple[int, ...]:
    """The shards a worker serves, from ``--shards``: ``all``, a shard (``2``), a range
    (``0-3``, both ends in: what a systemd instance name can carry) or a comma list of those
    (``0,2-3``); sorted, each once. ``ConfigError`` names what is wrong."""
    text = spec.strip()
    if text == "all":
        return tuple(range(shards))
    out: set[int] = set()
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        try:
            first = int(lo)
            last = int(hi) if dash else first
        except ValueError:
            raise ConfigError(f"--shards {spec!r}: {part.strip()!r} is not a shard number or a "
                              "range like 0-3 (or give 'all')") from None
        if first > last or first < 0 or last >= shards:
            raise ConfigError(f"--shards {spec!r}: {part.strip()!r} is not within 0..{shards - 1}"
                              f" (HIVEMIND_SHARDS={shards})")
        out.update(range(first, last + 1))
    return tuple(sorted(out))


def queue_connection(store: Store, rq: QueueConn | None) -> QueueConn:
    """The connection RQ uses: ``rq``, or the store itself when that is one plain Redis (RQ
    cannot run on a cluster)."""
    if rq is not None:
        return rq
    plain = plain_redis(store)
    if plain is not None:
        return plain
    raise ConfigError("the store is a Redis Cluster: RQ needs a plain Redis of its own "
                      "(--rq-url / HIVEMIND_RQ_URL)")


def _shown(name: object) -> str:
    """A refused name for logs: repr, bounded (it comes from whoever wrote the job)."""
    text = repr(name)
    return text if len(text) <= 120 else text[:117] + "..."


class SafeJob(Job):
    """An RQ job that only ever runs a function of ``JOB_FUNCTIONS``."""

    def refusal(self) -> str | None:
        """Why this job must not run (None: it names an allowed function and nothing else)."""
        try:
            name = self.func_name
            instance = self.instance
        except DeserializationError:
            return "payload is not a hivemind JSON job"
        if not isinstance(name, str) or name not in JOB_FUNCTIONS:
            return f"function {_shown(name)} is not an allowed job function"
        if instance is not None:
            return "jobs may not name an instance"
        for kind in ("success", "failure", "stopped"):
            cb = getattr(self, f"_{kind}_callback_name", None)
            if cb is not None:
                return f"{kind} callback {_shown(cb)} is not allowed"
        return None

    @property
    def func(self) -> Any:
        why = self.refusal()
        if why is not None:
            raise JobRefused(f"job {self.id}: {why}; refused without running")
        return super().func

    @property
    def should_retry(self) -> bool:
        return self.refusal() is None and bool(super().should_retry)

    @property
    def success_callback(self) -> Any:
        return None  # hivemind jobs have no callbacks; a named one is refused above

    @property
    def failure_callback(self) -> Any:
        return None

    @property
    def stopped_callback(self) -> Any:
        return None


def queue(conn: QueueConn, name: str, settings: Settings) -> Queue:
    """An RQ queue on ``conn`` with the JSON serializer (never pickle) and ``SafeJob`` (the
    allowlist of job functions)."""
    return Queue(name, connection=conn, serializer=JSONSerializer, job_class=SafeJob,
                 default_timeout=settings.job_timeout_s)


def enqueue_projection(q: Queue, ns: str) -> None:
    """Put one projection job for ``ns`` on the queue."""
    q.enqueue(PROJECT_JOB, ns, retry=Retry(max=PROJECT_RETRIES), result_ttl=JOB_RESULT_TTL,
              failure_ttl=JOB_FAILURE_TTL, description=f"project {ns}")


def enqueue_redaction(q: Queue, ns: str, note_ids: Sequence[str]) -> None:
    """Put one redaction job for erased notes of ``ns`` on the queue (idempotent work)."""
    ids = sorted(set(note_ids))
    q.enqueue(REDACT_JOB, ns, ids, retry=Retry(max=PROJECT_RETRIES), result_ttl=JOB_RESULT_TTL,
              failure_ttl=JOB_FAILURE_TTL, description=f"redact {len(ids)} note(s) of {ns}")


def enqueue_snapshot_refresh(q: Queue, ns: str) -> None:
    """Put one ``refresh_snapshot`` job for ``ns`` on the queue (the caller dedupes it with
    ``keys.snapshot_queued``)."""
    q.enqueue(SNAPSHOT_JOB, ns, result_ttl=JOB_RESULT_TTL, failure_ttl=JOB_FAILURE_TTL,
              description=f"refresh the index snapshot of {ns}")


def query_chunks(n: int, limit: int, workers: int) -> list[int]:
    """The sizes of the jobs a batch of ``n`` queries is split into, in order: ``limit``
    each for one worker; for several, each job at most the remaining queries over
    ``JOBS_PER_WORKER`` jobs per worker, at least ``MIN_QUERY_CHUNK`` (and at most
    ``limit``), so the batch's last jobs are small and every worker is busy to the end (a
    remainder under ``MIN_QUERY_CHUNK`` joins the job before it, within ``limit``)."""
    if n < 0 or limit < 1:
        raise ValueError(f"query_chunks: n={n}, limit={limit}")
    out: list[int] = []
    left = n
    while left > 0:
        size = limit if workers <= 1 else \
            min(limit, max(MIN_QUERY_CHUNK, -(-left // (JOBS_PER_WORKER * workers))))
        if left - size < MIN_QUERY_CHUNK:
            size = left if left <= limit else size  # no job of a few left-overs
        out.append(size)
        left -= size
    return out


def query_workers(q: Queue) -> int:
    """How many workers listen on the query queue ``q`` (one round trip; RQ's registry of
    live workers)."""
    return int(Worker.count(connection=q.connection, queue=q))


def worker_records(rq: QueueConn, names: Sequence[str]) -> list[list[Any]]:
    """RQ's record of each named worker: its state and its successful and failed job counts
    as RQ keeps them (raw replies, None where RQ has no such worker), in one round trip."""
    if not names:
        return []
    p = rq.pipeline(transaction=False)
    for name in names:
        p.hmget(Worker.redis_worker_namespace_prefix + name, "state", "successful_job_count",
                "failed_job_count")
    return [list(row) for row in p.execute()]


def enqueue_queries(q: Queue, envelopes: Sequence[dict[str, Any]], chunk: int,
                    workers: int = 1, ttl: int | None = None) -> int:
    """Queue ``envelopes`` as query jobs (``query_chunks``: at most ``chunk`` queries each,
    smaller ones when ``workers`` share the batch), all jobs in one MULTI (one round trip
    instead of RQ's two per job). ``ttl``: seconds a job may wait in its queue (RQ drops it
    after that: a shard without a worker does not hold its queries for good). Returns how
    many jobs."""
    if not envelopes:
        return 0
    p = q.connection.pipeline()
    i = 0
    sizes = query_chunks(len(envelopes), chunk, workers)
    for size in sizes:
        part = list(envelopes[i:i + size])
        i += size
        q.enqueue(QUERY_JOB, part, retry=Retry(max=QUERY_RETRIES), result_ttl=JOB_RESULT_TTL,
                  failure_ttl=JOB_FAILURE_TTL, description=f"answer {len(part)} queries",
                  ttl=ttl, pipeline=p)
    p.execute()
    return len(sizes)


def schedule_projection(r: Store, q: Queue, ns: str, force: bool = False) -> bool:
    """Enqueue a projection job unless one is already queued or running (``force``: anyway)."""
    if not mark_scheduled(r, ns, force):
        return False
    enqueue_projection(q, ns)
    return True


def schedule_and_register(r: Store, q: Queue, ns: str) -> None:
    """``schedule_projection`` of ``ns`` and ``log.register_namespaces`` of it, as a checked
    write does before its first entry can land: the marker and the registry in one round
    trip (``schedule.mark_and_register``), then the job enqueued when this call set the
    marker."""
    if mark_and_register(r, ns):
        enqueue_projection(q, ns)


def schedule_namespaces(r: Store, q: Queue, nss: Iterable[str]) -> None:
    """``schedule_projection`` for each namespace an append just touched (sorted order), the
    markers set in one round trip (a non-transactional pipeline of single-key SET NX, so a
    cluster client splits it by node) and a job enqueued for each marker that was not set."""
    names = sorted(set(nss))
    if len(names) <= 1:
        for ns in names:
            schedule_projection(r, q, ns)
        return
    for ns, was_set in zip(names, mark_many(r, names), strict=True):
        if was_set:
            enqueue_projection(q, ns)
