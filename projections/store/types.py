"""The typed Redis boundary: every function of the storage layer takes one of these.

redis-py's own classes carry precise types for the synchronous commands we call (its
``SyncClientProtocol`` overloads), so ``mypy --strict`` checks every call at the boundary.
The embedded store (fakeredis) subclasses ``redis.Redis``; a Redis Cluster is redis-py's
``RedisCluster`` (every multi-key call of the storage layer stays in one namespace's slot).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, TypeAlias

import redis
import redis.client
import redis.cluster

from hivemind_memory.events.errors import StoreError
from hivemind_memory.events.positions import ZERO, Position, parse_pos

Store: TypeAlias = redis.Redis | redis.cluster.RedisCluster
"""A connection to the data store (streams, read model, results): one Redis or a cluster."""
Pipe: TypeAlias = redis.client.Pipeline | redis.cluster.ClusterPipeline
"""A pipeline (MULTI or not) that write helpers stage commands on."""
QueueConn: TypeAlias = redis.Redis
"""A connection to RQ's Redis: always a plain Redis (RQ's keys cross slots)."""


def plain_redis(r: Store) -> QueueConn | None:
    """``r`` itself when it is one plain Redis (RQ can run on it), None for a cluster."""
    return r if isinstance(r, redis.Redis) else None


def as_bytes(value: object) -> bytes:
    """A reply that must be bytes: hivemind's clients never decode responses."""
    if isinstance(value, bytes):
        return value
    raise StoreError(f"expected bytes from Redis, got {type(value).__name__} "
                     "(connections must not set decode_responses)")


class StreamEntry(NamedTuple):
    """One stream entry as read: its id and its fields (bytes, never decoded)."""

    id: bytes
    fields: dict[bytes, bytes]


def stream_entries(reply: Sequence[Any] | None) -> list[StreamEntry]:
    """An XRANGE / XREVRANGE reply as ``StreamEntry`` values (entries without fields, which
    a deleted entry can leave, get an empty dict). Fields come as a dict, or as the raw flat
    list ``[k1, v1, k2, v2, ...]`` that a cluster MULTI returns (redis-py's cluster
    transactions do not parse stream replies)."""
    if not reply:
        return []
    # A connection either decodes every reply or none: checking the first entry's id, field
    # names and values proves bytes for all (the projection reads 2,000 entries per batch,
    # and a check per field was a tenth of its time).
    first_id, first_fields = reply[0]
    as_bytes(first_id)
    for k, v in _field_map(first_fields).items():
        as_bytes(k)
        as_bytes(v)
    return [StreamEntry(entry_id, _field_map(fields)) for entry_id, fields in reply]


def newest_pos(reply: Sequence[Any] | None) -> Position:
    """The id of the entry of an ``XREVRANGE ... COUNT 1`` reply (``ZERO`` for an empty
    stream)."""
    entries = stream_entries(reply)
    return parse_pos(entries[0].id) if entries else ZERO


def _field_map(fields: Any) -> dict[bytes, bytes]:
    """An entry's fields as a dict (they may be a dict, a flat list, or None)."""
    if isinstance(fields, dict):
        return fields
    flat = list(fields or ())
    return dict(zip(flat[0::2], flat[1::2], strict=True))


def xread_entries(reply: object) -> list[StreamEntry]:
    """The entries of an XREAD reply over one stream (RESP2 list or RESP3 map), in order."""
    if not reply:
        return []
    streams = reply.values() if isinstance(reply, dict) else reply
    out: list[StreamEntry] = []
    for item in streams:  # type: ignore[attr-defined]
        entries = item if isinstance(reply, dict) else item[1]
        out.extend(stream_entries(entries))
    return out


def give_back(pool: Any, conn: Any, *, broken: bool) -> None:
    """Return a connection taken from ``pool`` by hand (to write packed commands straight onto
    it); ``broken``: replies may be left unread on it, so it is closed instead of reused."""
    if broken:
        conn.disconnect()
    pool.release(conn)
