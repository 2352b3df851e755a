"""Connections are made here, when asked, never at import time."""

from __future__ import annotations

from typing import Any

import redis

from hivemind_memory.events.errors import StoreError
from hivemind_memory.projections.store.cluster import connect_cluster, is_cluster_url
from hivemind_memory.projections.store.types import QueueConn, Store

_EMBEDDED: dict[str, Any] = {}


def connect(url: str) -> Store:
    """A Redis client for ``url``; ``memory://`` is the embedded store (one per process),
    ``redis+cluster://`` / ``rediss+cluster://`` a Redis Cluster (``cluster``)."""
    if is_cluster_url(url):
        return connect_cluster(url)
    if url.startswith("memory://"):
        import fakeredis

        if url not in _EMBEDDED:
            _EMBEDDED[url] = fakeredis.FakeServer()
        return fakeredis.FakeRedis(server=_EMBEDDED[url])
    try:
        r = redis.Redis.from_url(url)
        r.ping()
    except (redis.ConnectionError, redis.TimeoutError, ValueError) as exc:
        raise StoreError(f"cannot connect to {url}: {exc}") from exc
    return r


def connect_queue(url: str) -> QueueConn:
    """A client for RQ's queues: ``connect(url)``, which must be one plain Redis."""
    r = connect(url)
    if not isinstance(r, redis.Redis):
        raise StoreError(f"{url} is a Redis Cluster: RQ needs a plain Redis")
    return r
