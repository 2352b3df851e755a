"""Every Redis key name, prefix and default TTL, in one place.

All keys of a namespace share the hash tag ``{ns}`` so a namespace lives in one Redis Cluster
slot (its Lua scripts and MULTI blocks never cross slots). RQ's own keys live on the RQ
connection (plain Redis; RQ does not run on Cluster); queue names are in
``api_stub.protocol.jobs``.
"""

from __future__ import annotations

PREFIX = "hm"
"""Prefix of every hivemind key."""
NAMESPACES = f"{PREFIX}:namespaces"
"""Set of every namespace that has ever had an event appended."""
RESULT_TTL_SECONDS = 3600
"""Default lifetime of a query result key."""
SCHEDULE_TTL_SECONDS = 600
"""Lifetime of a namespace's 'projection job queued' marker (self-heals a lost job)."""
SWEEP_INTERVAL_S = 60
"""A long-running worker schedules the namespaces left behind after this long idle."""
CHANGES_MAXLEN = 10_000
"""Approximate length kept of a namespace's changes stream (not the source of truth)."""
WORKERS = f"{PREFIX}:workers"
"""Set of the names of worker processes that announced a heartbeat (on RQ's connection);
a name whose ``worker_beat`` key has expired is dead (writers prune such names)."""
WORKER_BEAT_TTL_SECONDS = 10
"""Lifetime of a worker's heartbeat key: a worker that stops renewing it (SIGKILL, a frozen
host) counts as dead this long after its last beat at most."""


def worker_beat(name: str) -> str:
    """A worker process's heartbeat (JSON ``WorkerBeat``, TTL ``WORKER_BEAT_TTL_SECONDS``)."""
    return f"{PREFIX}:worker:{name}"


def _ns(ns: str) -> str:
    return f"{PREFIX}:{{{ns}}}"


def stream(ns: str) -> str:
    """The namespace's event log (the source of truth)."""
    return f"{_ns(ns)}:events"


def checkpoint(ns: str) -> str:
    """Last stream entry id folded into the read model (string)."""
    return f"{_ns(ns)}:checkpoint"


def projected(ns: str) -> str:
    """How many stream entries the checkpoint covers (set with it): lag = XLEN - this."""
    return f"{_ns(ns)}:projected"


def generation(ns: str) -> str:
    """Bumped by every ``replay`` write-back; a batch folded before it can no longer commit."""
    return f"{_ns(ns)}:generation"


def notes(ns: str) -> str:
    """Read model: hash note_id -> msgpack NoteState."""
    return f"{_ns(ns)}:notes"


def seen(ns: str) -> str:
    """Set of every event_id already applied (deduplication of repeated event_ids)."""
    return f"{_ns(ns)}:seen"


def dead(ns: str) -> str:
    """Dead-letter stream: entries that changed nothing, with the reason and the payload."""
    return f"{_ns(ns)}:dead"


def changes(ns: str) -> str:
    """One entry per committed batch: the new checkpoint and the touched note ids."""
    return f"{_ns(ns)}:changes"


def dupidx(ns: str) -> str:
    """The sorted set earlier versions kept the near-duplicate lookup in (``replay`` drops
    it; listed so a namespace's deletion leaves nothing)."""
    return f"{_ns(ns)}:dupidx"


def dupbands(ns: str) -> str:
    """The near-duplicate lookup's buckets: hash, a twin or MinHash band key's digest -> the
    8-byte keys of the active notes filed under it (``projections.store.dupindex``); written
    with the projection, digests only."""
    return f"{_ns(ns)}:dupbands"


def dupnotes(ns: str) -> str:
    """The near-duplicate lookup's records: hash, a note's 8-byte key -> its 16-bit term
    digests and its id (``dupsketch.record``)."""
    return f"{_ns(ns)}:dupnotes"


def event_digests(ns: str) -> str:
    """Hash event_id -> keyed digest of the event's content, for every applied event
    (``eventdigest``: a resent id with other content is refused)."""
    return f"{_ns(ns)}:event_digests"


def dupspec(ns: str) -> str:
    """The spec tag (``DupSpec.tag``) the near-duplicate lookup was made with."""
    return f"{_ns(ns)}:dupspec"


def lock(ns: str) -> str:
    """Projection lease: at most one projector folds a namespace at a time."""
    return f"{_ns(ns)}:lock"


def scheduled(ns: str) -> str:
    """Marker: a projection job for the namespace is queued or running."""
    return f"{_ns(ns)}:scheduled"


def audit(ns: str) -> str:
    """Audit stream of served queries (``query.served``)."""
    return f"{_ns(ns)}:audit"


def configs(ns: str) -> str:
    """Config history: a stream, one entry (fields ``digest``, ``value`` = canonical JSON)
    per ranking config a query first ran under; the digest hashes exactly those bytes. A
    stream, not a hash, so every store keeps it (``memory://PATH`` persists stream appends)."""
    return f"{_ns(ns)}:configs"


def query_embeddings(ns: str) -> str:
    """Stream of the embeddings served queries carried (``digest``, ``value`` = JSON list),
    one entry per new digest."""
    return f"{_ns(ns)}:qembeddings"


def index_snapshot(ns: str) -> str:
    """The worker's index of the namespace as one hash (``projections.ranking.snapshot``),
    versioned; written lazily by a worker after a full load, deleted by ``replay``'s
    write-back."""
    return f"{_ns(ns)}:index:v{_snapshot_version()}"


def index_build_lease(ns: str) -> str:
    """Held (SET NX, ``INDEX_BUILD_LEASE_S``) by the one worker building the namespace's index
    off the query path; the others answer ``index_warming`` until the snapshot is there."""
    return f"{_ns(ns)}:index:building"


INDEX_BUILD_LEASE_S = 600
"""A build lease's lifetime: a worker that died building frees the namespace after this (one
that lives renews it while it builds, ``lease.Renewing``)."""
SNAPSHOT_REFRESH_CHANGES = CHANGES_MAXLEN // 5
"""Projection batches committed (changes entries) since a namespace's snapshot was last
brought up to date after which a ``refresh_snapshot`` job is queued: the snapshot is then
refreshed incrementally long before the changes stream (``CHANGES_MAXLEN``) is trimmed past
it, so no worker has to rebuild the namespace from scratch."""


def index_lag(ns: str) -> str:
    """Counter: projection batches committed since the namespace's snapshot was last
    refreshed (``SNAPSHOT_REFRESH_CHANGES``)."""
    return f"{_ns(ns)}:index:lag"


def snapshot_queued(ns: str) -> str:
    """Set (NX, ``SCHEDULE_TTL_SECONDS``) while a ``refresh_snapshot`` job of the namespace
    is queued: at most one at a time."""
    return f"{_ns(ns)}:index:refresh_queued"


def index_snapshot_draft(ns: str, token: str) -> str:
    """Where one writer assembles a new index snapshot, field by field, before renaming it
    to ``index_snapshot`` (expires on its own if the writer dies first)."""
    return f"{index_snapshot(ns)}:draft:{token}"


def old_index_snapshots(ns: str) -> list[str]:
    """The index snapshot keys of earlier layouts (never read; deleted when a snapshot is
    written, by ``replay`` and with the namespace)."""
    return [f"{_ns(ns)}:index:v{v}" for v in range(1, _snapshot_version())]


def _snapshot_version() -> int:
    """``snapshot.SNAPSHOT_VERSION``, read when a snapshot key is named (so naming the
    other keys, as a client does, does not load the numpy-backed snapshot code)."""
    from hivemind_memory.projections.ranking.snapshot import SNAPSHOT_VERSION

    return SNAPSHOT_VERSION


def rewrite(ns: str) -> str:
    """Where an erasure assembles the redacted copy of one of the namespace's streams before
    swapping it in (``erasure``; a derived kind: ``memory://PATH`` never logs it)."""
    return f"{_ns(ns)}:rewrite"


def erasing(ns: str) -> str:
    """Lease of the erasure rewriting the namespace's streams (one at a time; expires)."""
    return f"{_ns(ns)}:erasing"


def erasure_fence(ns: str) -> str:
    """Log position (``ms-seq``) every index snapshot must have folded up to: raised by each
    erasure to a checkpoint past its ``note.erased``, so a worker whose index still holds
    erased content can never store it again (``publish_snapshot.lua``)."""
    return f"{_ns(ns)}:erasure_fence"


def erased_texts(ns: str) -> str:
    """Stream of the keyed digests (``digest``: HMAC-SHA256 with the store's secret, hex) of
    every text a query would quote an erased note by (``note``: its id), written by each
    erasure before it rewrites anything, so a rerun after the log was redacted still finds
    the audit entries, results and jobs quoting it (a source stream: ``memory://PATH`` keeps
    it)."""
    return f"{_ns(ns)}:erased_texts"


def namespace_keys(ns: str) -> list[str]:
    """Every fixed-name key of a namespace (result and done keys expire by themselves)."""
    return [stream(ns), checkpoint(ns), projected(ns), generation(ns), notes(ns), seen(ns),
            dead(ns), changes(ns), dupidx(ns), dupbands(ns), dupnotes(ns), dupspec(ns),
            event_digests(ns), lock(ns),
            scheduled(ns), audit(ns),
            configs(ns),
            query_embeddings(ns), index_snapshot(ns), *old_index_snapshots(ns), rewrite(ns),
            index_lag(ns), snapshot_queued(ns),
            erasing(ns), erasure_fence(ns), erased_texts(ns)]


def result(ns: str, query_id: str) -> str:
    """A query's result JSON (with a TTL)."""
    return f"{_ns(ns)}:result:{query_id}"


def done(ns: str, query_id: str) -> str:
    """A list pushed once the result is written, so clients can BLPOP instead of polling."""
    return f"{_ns(ns)}:done:{query_id}"


DIGEST_KEY = f"{PREFIX}:{{_store}}:digest_key"
"""A stream of one entry (id ``0-1``, field ``k``): the store's secret that keys the
``redacted`` digests of erased content, made once by the first erasure. A stream so that a
``memory://PATH`` store keeps it (``is_source_stream``); ``_store`` is no namespace."""


DERIVED_STREAMS = ("dead", "changes", "rewrite")
"""Kinds of a namespace's streams (``hm:{ns}:<kind>``) that the worker derives from the event
log (``dead``, ``changes``), and an erasure's temporary copy of a stream (``rewrite``). Every
other hivemind stream (``events``, ``audit``, ``configs``, ``qembeddings``) holds what nothing
can rebuild: a new stream kind is a source unless it is named here (``memory://PATH`` keeps
the sources only)."""


def is_source_stream(key: bytes) -> bool:
    """Whether a stream key holds data nothing can rebuild: a hivemind stream that is not of a
    ``DERIVED_STREAMS`` kind. RQ's streams (``rq:results:*``) and anything outside the
    ``hm:`` prefix are not (RQ's bookkeeping is rebuilt by re-running work)."""
    head = f"{PREFIX}:{{".encode()
    if not key.startswith(head):
        return False
    _, sep, kind = key.partition(b"}:")
    return bool(sep) and kind.decode("utf-8", "replace") not in DERIVED_STREAMS
