"""The worker heartbeats as stored: one short-lived key per worker process, their names in the
set ``keys.WORKERS`` (on RQ's connection). Written here for the worker (``write_beat``,
``drop_beat``, ``prune_beats``; ``worker.ops.heartbeat`` keeps them alive) and read by whoever
needs to know which workers live: the worker's own status and readiness
(``worker.ops.heartbeat``) and the client (``Client.workers_alive``), which answers a query
whose shard no live worker serves at once (``Client.shard_problem``)."""

from __future__ import annotations

import msgspec

from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.types import QueueConn, as_bytes


def live_beats(rq: QueueConn) -> list[bytes]:
    """The raw heartbeats alive now, by worker name (one SMEMBERS and one MGET); a name whose
    key has expired is a dead worker and is left out."""
    names = sorted(as_bytes(n).decode() for n in rq.smembers(keys.WORKERS))
    if not names:
        return []
    return [as_bytes(raw) for raw in rq.mget([keys.worker_beat(n) for n in names])
            if raw is not None]


class _Queues(msgspec.Struct):
    """The one field of a heartbeat the client reads: the queues its worker listens on."""

    queues: list[str] = []


_queues = msgspec.json.Decoder(_Queues).decode


def served_queues(rq: QueueConn) -> set[str]:
    """The queues some live worker listens on (``live_beats``; a record that does not decode
    counts for nothing)."""
    out: set[str] = set()
    for raw in live_beats(rq):
        try:
            out.update(_queues(raw).queues)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
    return out


def write_beat(rq: QueueConn, name: str, record: bytes, ttl_s: int) -> None:
    """Write worker ``name``'s heartbeat ``record`` with a fresh TTL and its name into the set
    (one round trip)."""
    p = rq.pipeline(transaction=False)
    p.set(keys.worker_beat(name), record, ex=ttl_s)
    p.sadd(keys.WORKERS, name)
    p.execute()


def drop_beat(rq: QueueConn, name: str) -> None:
    """Delete worker ``name``'s heartbeat and its name (the worker is gone at once)."""
    p = rq.pipeline(transaction=False)
    p.delete(keys.worker_beat(name))
    p.srem(keys.WORKERS, name)
    p.execute()


def prune_beats(rq: QueueConn) -> list[str]:
    """Take the names whose heartbeat has expired out of the set; the names taken out."""
    names = [as_bytes(n).decode() for n in rq.smembers(keys.WORKERS)]
    if not names:
        return []
    gone = [n for n, raw in zip(names, rq.mget([keys.worker_beat(n) for n in names]),
                                strict=True) if raw is None]
    if gone:
        rq.srem(keys.WORKERS, *gone)
    return gone
