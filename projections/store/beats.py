"""The worker heartbeats as stored: one short-lived key per worker process, their names in the
set ``keys.WORKERS`` (on RQ's connection). Read here by whoever needs to know which workers
live: the worker's own status and readiness (``worker.heartbeat``) and the client
(``Client.workers_alive``)."""

from __future__ import annotations

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
