"""The audit trail of a namespace in Redis: the stream of served queries, the config history
and the embeddings queries carried. Bytes in, bytes out: the ``query.served`` struct lives in
the wire protocol (above this layer), the decoding in ``worker.audit.reproduce``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from hivemind_memory.events.positions import Position, format_pos
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.results import AUDIT_FIELD
from hivemind_memory.projections.store.types import (
    Pipe,
    Store,
    StreamEntry,
    stream_entries,
)

DIGEST_FIELD = b"digest"
"""Field of a config-history or embedding entry: the digest it is filed under."""
VALUE_FIELD = b"value"
"""Field of a config-history or embedding entry: the JSON bytes."""
REDACTED_FIELD = b"redacted"
"""Field of an embedding entry an erasure emptied: the erased note's id."""


def stage_config(p: Pipe, ns: str, digest: str, canonical: bytes) -> None:
    """Queue on ``p`` the append of one config to the history (callers append a digest once:
    ``recorded`` says which are there)."""
    p.xadd(keys.configs(ns), {DIGEST_FIELD: digest, VALUE_FIELD: canonical})


def stage_embedding(p: Pipe, ns: str, digest: str, data: bytes,
                    min_id: str | None = None) -> None:
    """Queue on ``p`` the append of a query's embedding (JSON) under its digest; with
    ``min_id`` (``Settings.embedding_min_id``) the same XADD drops, exactly, every filed
    embedding older than it (the worker files an embedding again when its last filing is
    older than the audit retention, so every kept audit entry still finds its embedding)."""
    if min_id is None:
        p.xadd(keys.query_embeddings(ns), {DIGEST_FIELD: digest, VALUE_FIELD: data})
    else:
        p.xadd(keys.query_embeddings(ns), {DIGEST_FIELD: digest, VALUE_FIELD: data},
               minid=min_id, approximate=False)


def _paged(r: Store, key: str) -> Iterator[StreamEntry]:
    """Every entry of the stream ``key``, in order, read a thousand at a time."""
    start = "-"
    while True:
        got = stream_entries(r.xrange(key, min=start, max="+", count=1000))
        if not got:
            return
        yield from got
        start = "(" + got[-1].id.decode()


def embedding_filings(r: Store, ns: str) -> dict[str, int]:
    """Filed query embeddings (not those an erasure emptied): digest -> the time (ms, its
    entry id) of its latest filing."""
    return {e.fields.get(DIGEST_FIELD, b"").decode("utf-8", "replace"): int(e.id.split(b"-")[0])
            for e in _paged(r, keys.query_embeddings(ns)) if REDACTED_FIELD not in e.fields}


def _filed(r: Store, key: str) -> list[tuple[str, bytes]]:
    return [(e.fields.get(DIGEST_FIELD, b"").decode("utf-8", "replace"),
             e.fields.get(VALUE_FIELD, b"")) for e in _paged(r, key)
            if REDACTED_FIELD not in e.fields]  # emptied by an erasure: no value


def read_configs(r: Store, ns: str) -> list[tuple[str, bytes]]:
    """The config history in order: (digest, canonical JSON), repeats included (two workers
    may both file a new config)."""
    return _filed(r, keys.configs(ns))


def read_embeddings(r: Store, ns: str) -> list[tuple[str, bytes]]:
    """Every filed query embedding in order: (digest, JSON list); not those an erasure
    emptied (``redacted_embeddings``)."""
    return _filed(r, keys.query_embeddings(ns))


def redacted_embeddings(r: Store, ns: str) -> dict[str, str]:
    """Filed embeddings an erasure redacted: digest -> the erased note's id."""
    return {e.fields.get(DIGEST_FIELD, b"").decode("utf-8", "replace"):
            e.fields[REDACTED_FIELD].decode("utf-8", "replace")
            for e in _paged(r, keys.query_embeddings(ns)) if REDACTED_FIELD in e.fields}


def recorded(r: Store, ns: str) -> tuple[set[str], set[str]]:
    """The digests already in the config history and among the filed embeddings."""
    return {d for d, _ in read_configs(r, ns)}, {d for d, _ in read_embeddings(r, ns)}


def restore(r: Store, ns: str, configs: Sequence[tuple[str, bytes]],
            embeddings: Sequence[tuple[str, bytes]], events: list[bytes],
            redacted: Mapping[str, str] | None = None) -> None:
    """Write an archive's config history, embeddings (``redacted``: digest -> erased note,
    for those an erasure emptied) and audit events (in order), in one MULTI (``hivemind
    import``)."""
    p = r.pipeline(transaction=True)
    for d, c in configs:
        stage_config(p, ns, d, c)
    for d, e in embeddings:
        stage_embedding(p, ns, d, e)
    for d, nid in (redacted or {}).items():
        p.xadd(keys.query_embeddings(ns), {DIGEST_FIELD: d, VALUE_FIELD: b"",
                                           REDACTED_FIELD: nid})
    for ev in events:
        p.xadd(keys.audit(ns), {AUDIT_FIELD: ev})
    p.execute()


def audit_page(r: Store, ns: str, before: str | None, count: int) -> list[StreamEntry]:
    """Up to ``count`` audit entries, newest first, strictly older than ``before`` (an audit
    entry id) when given."""
    top = "(" + before if before else "+"
    return stream_entries(r.xrevrange(keys.audit(ns), max=top, min="-", count=count))


def iter_audit(r: Store, ns: str, chunk: int = 1000) -> Iterator[StreamEntry]:
    """Every audit entry, oldest first, read in chunks."""
    start = "-"
    while True:
        got = stream_entries(r.xrange(keys.audit(ns), min=start, max="+", count=chunk))
        if not got:
            return
        yield from got
        start = "(" + got[-1].id.decode()


def audit_event(entry: StreamEntry) -> bytes:
    """The JSON ``query.served`` event of an audit entry (empty if the entry has none)."""
    return entry.fields.get(AUDIT_FIELD, b"")


def log_entry_exists(r: Store, ns: str, pos: Position) -> bool:
    """Whether the namespace's log still has an entry at exactly ``pos``."""
    p = format_pos(pos)
    return bool(r.xrange(keys.stream(ns), min=p, max=p))
