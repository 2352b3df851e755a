"""One typed settings object, built from the environment in one place (nothing else reads it)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace

from hivemind_memory.events.errors import ConfigError
from hivemind_memory.projections.ranking import PACKERS
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.urls import is_cluster_url, redact_url

DEFAULT_REDIS_URL = "redis://localhost:6379/0"
"""The store when neither ``--redis-url`` nor ``HIVEMIND_REDIS_URL`` names one; every command
then says so (``redis_url_source == "default"``) before it connects."""
MAX_SHARDS = 1024
"""Most shards a deployment may have (``shards``)."""
MAX_AUDIT_LEFT_OUT = 1000
"""Largest ``audit_left_out``: it bounds the size of every audit entry."""
MAX_AUDIT_RETENTION_DAYS = 36_600
"""Largest ``audit_retention_days`` (a century; 0 keeps entries for good)."""


NOTE_ID_RULES = ("any", "owned")
"""Values of ``Settings.note_ids``."""


@dataclass(frozen=True, slots=True)
class Settings:
    """Where to connect and how big the units of work are."""

    redis_url: str = DEFAULT_REDIS_URL
    """Streams and projections (``memory://`` = the embedded store, fakeredis in process;
    ``redis+cluster://host:port[,host:port...]`` or ``rediss+cluster://`` = a Redis Cluster)."""
    redis_url_source: str = "default"
    """Who named ``redis_url``: ``flag`` (``--redis-url``), ``env`` (``HIVEMIND_REDIS_URL``)
    or ``default`` (nobody: ``DEFAULT_REDIS_URL``)."""
    rq_url: str | None = None
    """RQ's queues: a plain Redis. None = the store itself (not allowed for a cluster)."""
    wait_replicas: int = 0
    """Appends return only once this many replicas acknowledged them (Redis WAIT); 0 = no
    wait, so an acknowledged append can be lost if its master fails before replicating."""
    wait_timeout_ms: int = 1000
    """How long an append waits for ``wait_replicas`` before it fails with a clear error."""
    config_path: str | None = None
    """Ranking config TOML (None = the contract's defaults)."""
    batch_size: int = 2000
    """Events folded per projection batch."""
    max_batches_per_job: int = 50
    """A projection job yields (re-enqueues itself) after this many batches."""
    lock_lease_ms: int = 30_000
    """Projection lease; a dead projector's lease expires after this."""
    result_ttl_seconds: int = keys.RESULT_TTL_SECONDS
    """Lifetime of query result keys."""
    audit_retention_days: int = 90
    """Days a namespace's audit entries (its served queries) are kept: each append to the
    audit stream drops, exactly, the entries older than this (their ids are the server's
    time). 0: kept for good. The filed query embeddings are kept twice as long, an embedding
    being filed again when its last filing is older than this (``embedding_min_id``). The
    event log and the config history are never trimmed."""
    query_chunk: int = 500
    """Queries carried by one batch-query job (each job costs a worker ~10 ms besides its
    queries: RQ's own ~2 ms, the catch-up check, the last wave's wait, the batch memo built
    again; 100 a job cost one worker ~10 % of a dense batch's rate)."""
    catch_up_timeout_s: float = 30.0
    """How long a query job waits for the projection to reach its submission position."""
    job_timeout_s: int = 600
    """RQ job timeout."""
    memory_budget_mib: int | None = None
    """A worker's index memory (``worker.memory``): the namespace indexes it holds, least
    recently used evicted past it. None: derived from the machine when the worker starts (a
    quarter of its cgroup limit or physical memory, ``worker.memory.default_budget_mib``)."""
    warm_inline_max_notes: int = 20_000
    """A namespace's first index build runs inside the query job while it has fewer notes
    than this; from there on it runs in a thread of one worker (a lease in Redis) and its
    queries are answered ``index_warming`` at once until the snapshot it writes is there."""
    snapshot_inline_max_notes: int = 50_000
    """A worker that does not hold a namespace reads its snapshot inside the query job while
    it has fewer notes than this (~0.36 s of CPU at 20k notes); from there on (0.8 s at 100k,
    seconds of wall time on a loaded machine) a thread of the worker reads it and the
    namespace's queries get ``index_warming`` at once until it is held."""
    audit_left_out: int = 20
    """Left-out notes each served query's audit entry records, the strongest first (with
    their signals and the reason; ``projections.ranking.why``); 0: entries record no ``why``."""
    shards: int = 1
    """Shards the namespaces are spread over: each has its own query queue
    (``jobs.query_queue_name``) and a namespace's queries go to the queue of
    ``jobs.shard_of(ns, shards)``. Every process of a deployment (clients, servers, workers)
    must say the same; 1 = one query queue that every worker serves."""
    max_future_skew_s: float = 300.0
    """How far in the future (seconds past the clock) an event's ``at`` may be; a later one is
    refused where events enter (HTTP, SDK, MCP, ``ingest``). Past times are never bounded."""
    note_ids: str = "owned"
    """``serve --tokens``: ``owned``: a token without ``admin`` creates notes only with ids of
    its own space (ids hivemind makes, or ``KEY@@AGENT``; ``events.noteids``), so no create
    confirms that another agent's private id exists (the default); ``any``: any id, the opt-out
    that re-opens that oracle (a taken one answers 409 ``note_exists``, which confirms it to a
    caller who guesses it)."""
    http_read_timeout_s: float = 10.0
    """``serve``: seconds a request may take to arrive, head and body, from its first byte (a
    connection that sends nothing is closed after it too); then the connection is closed."""
    http_max_connections: int = 1000
    """``serve``: most connections and requests at once (uvicorn's ``limit_concurrency``);
    past it new requests get 503. Keep it under the process's open-files limit."""
    batch_max_work: int = 10_000_000
    """Most work one ``POST .../queries`` may ask for: the sum of its queries' budgets (tokens),
    an ``as_of`` query counting ``batch_as_of_weight`` times (it rebuilds a past state); past
    it the batch is refused whole (413 ``batch_too_costly``)."""
    batch_as_of_weight: int = 30
    """How many plain queries of the same budget an ``as_of`` query counts as (measured: ~30 x
    the CPU of a plain one)."""
    batch_max_answer_bytes: int = 64 * 1024 * 1024
    """Most bytes of answers one ``POST .../queries`` sends; each answer that would go past
    it is replaced by an error object (code ``answer_too_large``) naming the bound."""
    packer: str = "c"
    """The exact packer: ``c`` (the C extension, where it was built) or ``numpy`` (the
    reference code); the entry points pass it to ``packing.use_packer``."""

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Settings from ``HIVEMIND_*`` variables, then explicit overrides (CLI flags)."""
        e = os.environ if env is None else env
        s = cls()
        mapping = {
            "HIVEMIND_REDIS_URL": ("redis_url", str),
            "HIVEMIND_RQ_URL": ("rq_url", str),
            "HIVEMIND_WAIT_REPLICAS": ("wait_replicas", int),
            "HIVEMIND_WAIT_TIMEOUT_MS": ("wait_timeout_ms", int),
            "HIVEMIND_CONFIG": ("config_path", str),
            "HIVEMIND_BATCH_SIZE": ("batch_size", int),
            "HIVEMIND_MAX_BATCHES_PER_JOB": ("max_batches_per_job", int),
            "HIVEMIND_LOCK_LEASE_MS": ("lock_lease_ms", int),
            "HIVEMIND_MEMORY_BUDGET_MIB": ("memory_budget_mib", int),
            "HIVEMIND_WARM_INLINE_MAX_NOTES": ("warm_inline_max_notes", int),
            "HIVEMIND_SNAPSHOT_INLINE_MAX_NOTES": ("snapshot_inline_max_notes", int),
            "HIVEMIND_RESULT_TTL": ("result_ttl_seconds", int),
            "HIVEMIND_AUDIT_RETENTION_DAYS": ("audit_retention_days", int),
            "HIVEMIND_QUERY_CHUNK": ("query_chunk", int),
            "HIVEMIND_CATCH_UP_TIMEOUT": ("catch_up_timeout_s", float),
            "HIVEMIND_PACKER": ("packer", str),
            "HIVEMIND_AUDIT_LEFT_OUT": ("audit_left_out", int),
            "HIVEMIND_SHARDS": ("shards", int),
            "HIVEMIND_MAX_FUTURE_SKEW": ("max_future_skew_s", float),
            "HIVEMIND_NOTE_IDS": ("note_ids", str),
            "HIVEMIND_HTTP_READ_TIMEOUT": ("http_read_timeout_s", float),
            "HIVEMIND_HTTP_MAX_CONNECTIONS": ("http_max_connections", int),
            "HIVEMIND_BATCH_MAX_WORK": ("batch_max_work", int),
            "HIVEMIND_BATCH_AS_OF_WEIGHT": ("batch_as_of_weight", int),
            "HIVEMIND_BATCH_MAX_ANSWER_BYTES": ("batch_max_answer_bytes", int),
        }
        for var, (attr, conv) in mapping.items():
            if e.get(var):
                try:
                    s = replace(s, **{attr: conv(e[var])})
                except ValueError as exc:
                    raise ConfigError(f"{var}={e[var]!r}: {exc}") from exc
        if e.get("HIVEMIND_REDIS_URL"):
            s = replace(s, redis_url_source="env")
        clean = {k: v for k, v in overrides.items() if v is not None}
        if "redis_url" in clean:
            clean.setdefault("redis_url_source", "flag")
        s = replace(s, **clean)  # type: ignore[arg-type]
        for attr in ("batch_size", "max_batches_per_job", "lock_lease_ms", "result_ttl_seconds",
                     "query_chunk", "warm_inline_max_notes", "snapshot_inline_max_notes"):
            if getattr(s, attr) < 1:
                raise ConfigError(f"setting {attr} must be >= 1, got {getattr(s, attr)}")
        if s.memory_budget_mib is not None and s.memory_budget_mib < 1:
            raise ConfigError("HIVEMIND_MEMORY_BUDGET_MIB / --memory-budget must be >= 1 "
                              f"(MiB), got {s.memory_budget_mib}")
        s.check_urls()
        if s.packer not in PACKERS:
            raise ConfigError(f"HIVEMIND_PACKER / packer must be one of {', '.join(PACKERS)}, "
                              f"got {s.packer!r}")
        if not 0 <= s.audit_left_out <= MAX_AUDIT_LEFT_OUT:
            raise ConfigError(f"HIVEMIND_AUDIT_LEFT_OUT / audit_left_out must be within "
                              f"0..{MAX_AUDIT_LEFT_OUT}, got {s.audit_left_out}")
        if not 0 <= s.audit_retention_days <= MAX_AUDIT_RETENTION_DAYS:
            raise ConfigError(f"HIVEMIND_AUDIT_RETENTION_DAYS / audit_retention_days must be "
                              f"within 0..{MAX_AUDIT_RETENTION_DAYS} (0: keep for good), got "
                              f"{s.audit_retention_days}")
        if not 1 <= s.shards <= MAX_SHARDS:
            raise ConfigError(f"HIVEMIND_SHARDS / shards must be within 1..{MAX_SHARDS}, got "
                              f"{s.shards}")
        if not 0 < s.http_read_timeout_s <= 3600:
            raise ConfigError(f"HIVEMIND_HTTP_READ_TIMEOUT / http_read_timeout_s must be within "
                              f"(0, 3600] seconds, got {s.http_read_timeout_s}")
        if not 0 <= s.max_future_skew_s <= 366 * 86400:
            raise ConfigError(f"HIVEMIND_MAX_FUTURE_SKEW / max_future_skew_s must be within "
                              f"0..31622400 seconds, got {s.max_future_skew_s}")
        if s.note_ids not in NOTE_ID_RULES:
            raise ConfigError(f"HIVEMIND_NOTE_IDS / note_ids must be one of "
                              f"{', '.join(NOTE_ID_RULES)}, got {s.note_ids!r}")
        if s.wait_replicas < 0 or s.wait_timeout_ms < 1:
            raise ConfigError(f"wait_replicas must be >= 0 and wait_timeout_ms >= 1, got "
                              f"{s.wait_replicas} and {s.wait_timeout_ms}")
        return s

    def audit_min_id(self, now_ms: int) -> str | None:
        """The oldest audit entry id kept when appending at ``now_ms`` (ms since the epoch,
        read by the caller), or None when entries are kept for good."""
        if self.audit_retention_days == 0:
            return None
        return f"{max(0, now_ms - self.audit_retention_days * 86_400_000)}-0"

    def embedding_min_id(self, now_ms: int) -> str | None:
        """The oldest filed query embedding kept when filing at ``now_ms``: twice the audit
        retention back (an embedding is filed again once its last filing is older than the
        retention, so every kept audit entry's embedding is kept), or None (kept for good)."""
        if self.audit_retention_days == 0:
            return None
        return f"{max(0, now_ms - 2 * self.audit_retention_days * 86_400_000)}-0"

    def check_urls(self) -> None:
        """The queues need a plain Redis: ``rq_url`` is required when the store is a cluster,
        and may never name a cluster itself."""
        if self.rq_url is not None and is_cluster_url(self.rq_url):
            raise ConfigError(f"rq_url {redact_url(self.rq_url)!r} names a Redis Cluster: RQ "
                              "needs a plain Redis (its keys cross slots)")
        if self.rq_url is None and is_cluster_url(self.redis_url):
            raise ConfigError("the store is a Redis Cluster: set HIVEMIND_RQ_URL / --rq-url "
                              "to a plain Redis for the queues")
