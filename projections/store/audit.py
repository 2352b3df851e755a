"""The audit trail of a namespace in Redis: the stream of served queries, the config history
and the embeddings queries carried. Bytes in, bytes out: the ``query.served`` struct lives in
the wire protocol (above this layer), the decoding in ``worker.audit``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from hivemind_memory.events.positions import Position, format_pos
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.results import AUDIT_FIELD
from hivemind_memory.projections.store.types import (
    Pipe,
    Store,
    StreamEntry,
    as_bytes,
    stream_entries,
)


def stage_config(p: Pipe, ns: str, digest: str, canonical: bytes) -> None:
    """Queue on ``p`` the write of one config to the history (a digest is written once)."""
    p.hsetnx(keys.configs(ns), digest, canonical)


def stage_embedding(p: Pipe, ns: str, digest: str, data: bytes) -> None:
    """Queue on ``p`` the write of a query's embedding (JSON) under its digest, once."""
    p.hsetnx(keys.query_embeddings(ns), digest, data)


def read_configs(r: Store, ns: str) -> dict[str, bytes]:
    """The whole config history: digest -> canonical JSON."""
    return {as_bytes(k).decode(): as_bytes(v) for k, v in r.hgetall(keys.configs(ns)).items()}


def read_embeddings(r: Store, ns: str) -> dict[str, bytes]:
    """Every stored query embedding: digest -> JSON list."""
    return {as_bytes(k).decode(): as_bytes(v)
            for k, v in r.hgetall(keys.query_embeddings(ns)).items()}


def restore(r: Store, ns: str, configs: Mapping[str, bytes], embeddings: Mapping[str, bytes],
            events: list[bytes]) -> None:
    """Write an archive's config history, embeddings and audit events (in order), in one
    MULTI (``hivemind import``)."""
    p = r.pipeline(transaction=True)
    for d, c in sorted(configs.items()):
        stage_config(p, ns, d, c)
    for d, e in sorted(embeddings.items()):
        stage_embedding(p, ns, d, e)
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
