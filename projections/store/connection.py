"""Connections are made here, when asked, never at import time."""

from __future__ import annotations

from typing import Any

import redis

from hivemind_memory.events.errors import StoreError

_EMBEDDED: dict[str, Any] = {}


def connect(url: str) -> Any:
    """A Redis client for ``url``; ``memory://`` is the embedded store (one per process and
    URL); ``memory://PATH`` keeps its streams on disk (see ``store.embedded``)."""
    if url.startswith("memory://"):
        from hivemind_memory.projections.store.embedded import Embedded

        if url not in _EMBEDDED:
            _EMBEDDED[url] = Embedded(url)
        return _EMBEDDED[url].client()
    try:
        r = redis.Redis.from_url(url)
        r.ping()
    except (redis.ConnectionError, redis.TimeoutError, ValueError) as exc:
        raise StoreError(f"cannot connect to {url}: {exc}") from exc
    return r


def close_embedded(url: str) -> None:
    """Forget the embedded store of ``url`` (its file is closed and unlocked; a later
    ``connect`` replays it again). For tests and orderly shutdown."""
    emb = _EMBEDDED.pop(url, None)
    if emb is not None:
        emb.close()
