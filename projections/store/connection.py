"""Connections are made here, when asked, never at import time, with settings chosen on
purpose (redis-py's defaults are not: a 5 s socket timeout that kills long blocking reads,
and retries that silently stretch a timed-out wait to a minute).

* ``SOCKET_CONNECT_TIMEOUT_S``: a server that does not answer the TCP/TLS handshake fails fast.
* ``SOCKET_TIMEOUT_S``: the longest any single command may take before the client gives up
  on the connection. hivemind's own blocking reads (BLPOP on a query's done list, XREAD BLOCK
  on a changes stream) never block longer than ``BLOCK_SLICE_S``, far below it, and loop
  until their own deadline, so a wait honours its caller's timeout whatever the socket
  timeout; RQ's worker raises it above its own dequeue block when needed.
* ``RETRIES`` with exponential backoff and jitter (``BACKOFF_BASE_S`` .. ``BACKOFF_CAP_S``):
  a command that meets a dropped connection or a timeout is retried on a fresh connection, so
  a Redis restart costs a few hundred milliseconds, not an error. Retried writes are safe
  here: an event appended twice is applied once (event_id), a batch commit is a
  compare-and-set, a result write is idempotent.
* ``HEALTH_CHECK_INTERVAL_S``: a connection idle that long is PINGed before reuse, so a
  connection the server (or a proxy) dropped is replaced instead of failing a command.
* ``driver_info`` (redis-py 8): the name and version every connection tells the server
  (``CLIENT SETINFO``), given once from ``redis.__version__``. Left to itself, redis-py 8
  reads its version from the installed package's metadata at every new connection
  (``importlib.metadata`` scans ``sys.path``: ~15 ms, 4 % of a ``hivemind batch`` start);
  redis-py 5-7 read it once, at import.

``redis://``, ``rediss://`` (TLS) and ACL URLs (``redis://user:password@host:port/db``) are
passed to redis-py as they are; a URL is never printed with its password (``urls.redact_url``).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import redis
from redis.backoff import ExponentialWithJitterBackoff
from redis.retry import Retry

from hivemind_memory.events.errors import StoreError
from hivemind_memory.projections.store.types import QueueConn, Store
from hivemind_memory.projections.store.urls import is_cluster_url, redact_url, scrub

if TYPE_CHECKING:
    from hivemind_memory.projections.store.embedded import Embedded

SOCKET_CONNECT_TIMEOUT_S = 5.0
"""TCP (and TLS) connect timeout."""
SOCKET_TIMEOUT_S = 10.0
"""Longest single command; blocking reads are sliced far below it (``BLOCK_SLICE_S``)."""
BLOCK_SLICE_S = 1.0
"""Longest single blocking read hivemind issues; callers loop until their own deadline."""
RETRIES = 3
"""Retries of a command that met a connection error or a timeout."""
BACKOFF_BASE_S = 0.1
"""First retry delay (then doubled, with jitter)."""
BACKOFF_CAP_S = 2.0
"""Largest retry delay."""
HEALTH_CHECK_INTERVAL_S = 15
"""A connection idle this long is PINGed before it is used again."""

_DRIVER: dict[str, Any] = {}
"""``client_options``' ``driver_info`` (see the module docstring): none before redis-py 8."""
try:
    from redis.driver_info import DriverInfo
except ImportError:  # redis-py < 8: lib_version is read once, at its import
    pass
else:
    _DRIVER["driver_info"] = DriverInfo(lib_version=redis.__version__)

_EMBEDDED: dict[str, Embedded] = {}
"""The embedded stores of this process by URL (``store.embedded.Embedded``, imported with
the first: a process that talks to Redis never loads fakeredis)."""
_HOLDERS: dict[str, int] = {}
"""How many ``connect`` calls of each embedded URL no ``release`` has answered yet."""
_EMBEDDED_LOCK = threading.Lock()
"""Held while ``_EMBEDDED`` and ``_HOLDERS`` change (Memory objects of several threads)."""


def client_options() -> dict[str, Any]:
    """The keyword arguments every hivemind Redis client is built with (see the docstring)."""
    return {
        "socket_connect_timeout": SOCKET_CONNECT_TIMEOUT_S,
        "socket_timeout": SOCKET_TIMEOUT_S,
        "socket_keepalive": True,
        "health_check_interval": HEALTH_CHECK_INTERVAL_S,
        "retry": Retry(ExponentialWithJitterBackoff(cap=BACKOFF_CAP_S, base=BACKOFF_BASE_S),
                       RETRIES),
        "retry_on_error": [redis.ConnectionError, redis.TimeoutError],
        **_DRIVER,
    }


def connect(url: str) -> Store:
    """A Redis client for ``url``; ``memory://`` is the embedded store (one per process and
    URL); ``memory://PATH`` keeps its streams on disk (see ``store.embedded``);
    ``redis+cluster://`` / ``rediss+cluster://`` a Redis Cluster (see ``store.cluster``)."""
    if is_cluster_url(url):
        from hivemind_memory.projections.store.cluster import connect_cluster

        return connect_cluster(url, client_options())
    if url.startswith("memory://"):
        with _EMBEDDED_LOCK:
            if url not in _EMBEDDED:
                from hivemind_memory.projections.store.embedded import Embedded

                _EMBEDDED[url] = Embedded(url)
            _HOLDERS[url] = _HOLDERS.get(url, 0) + 1
            return _EMBEDDED[url].client()
    try:
        r = redis.Redis.from_url(url, **client_options())
        r.ping()
    except (redis.RedisError, ValueError) as exc:
        # the exception text may quote the URL (a password with it): say only what failed
        raise StoreError(f"cannot connect to {redact_url(url)}: {type(exc).__name__}: "
                         f"{scrub(str(exc), url)}") from None
    return r


def connect_queue(url: str) -> QueueConn:
    """A client for RQ's queues: ``connect(url)``, which must be one plain Redis."""
    r = connect(url)
    if not isinstance(r, redis.Redis):
        raise StoreError(f"{redact_url(url)} is a Redis Cluster: RQ needs a plain Redis")
    return r


def release(url: str) -> None:
    """One ``connect(url)`` is done with its client (``Memory.close``). When the last holder
    of a ``memory://PATH`` store releases it, the store is closed: its log unlocked, so
    another process (``hivemind serve``, ``fsck``) may open the directory, and a later
    ``connect`` replays it again. A ``memory://`` store without a path is kept for the
    process (its data lives nowhere else); other URLs hold nothing to release."""
    with _EMBEDDED_LOCK:
        left = _HOLDERS.get(url, 0) - 1
        if left > 0:
            _HOLDERS[url] = left
            return
        _HOLDERS.pop(url, None)
        emb = _EMBEDDED.pop(url, None) if url.startswith("memory://") and url != "memory://" \
            else None
        if emb is not None:  # closed under the lock: a connect of the same URL waits for it
            emb.close()


def close_embedded(url: str) -> None:
    """Forget the embedded store of ``url`` (its file is closed and unlocked; a later
    ``connect`` replays it again). For tests and orderly shutdown."""
    with _EMBEDDED_LOCK:
        _HOLDERS.pop(url, None)
        emb = _EMBEDDED.pop(url, None)
        if emb is not None:
            emb.close()
