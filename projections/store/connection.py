"""Connections are made here, when asked, never at import time."""

from __future__ import annotations

from typing import Any

import redis

from hivemind_memory.events.errors import StoreError
from hivemind_memory.projections.store.types import Store

_EMBEDDED: dict[str, Any] = {}


def connect(url: str) -> Store:
    """A Redis client for ``url``; ``memory://`` is the embedded store (one per process)."""
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
