"""Redis Cluster as the data store: URLs, the connection, and waiting for replicas.

hivemind does not distribute anything itself. Every key of a namespace carries the hash tag
``{ns}`` (``keys``), so a namespace lives in one slot of the cluster and every MULTI block and
Lua script of the storage layer touches one slot only; redis-py's ``RedisCluster`` routes each
call to the master that owns the slot and follows MOVED/ASK redirects and failovers.

RQ cannot run on a cluster (its keys cross slots), so the queues live on a plain Redis of
their own (``Settings.rq_url``).

URLs: ``redis+cluster://[user:password@]host:port[,host:port...]`` (TLS:
``rediss+cluster://``). Any listed node is enough to discover the others; list several so a
client can start while one of them is down.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote

import redis
from redis.cluster import ClusterNode, RedisCluster

from hivemind_memory.events.errors import ConfigError, StoreError
from hivemind_memory.events.schema import Event
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.log import append
from hivemind_memory.projections.store.types import Store, as_bytes

SCHEMES = ("redis+cluster://", "rediss+cluster://")
"""URL schemes that name a Redis Cluster (the second one with TLS)."""


def is_cluster_url(url: str) -> bool:
    """Whether ``url`` names a Redis Cluster."""
    return url.startswith(SCHEMES)


def parse_cluster_url(url: str) -> tuple[list[ClusterNode], dict[str, object]]:
    """The startup nodes and the connection options of a cluster URL; ``ConfigError`` naming
    what is wrong with it."""
    if not is_cluster_url(url):
        raise ConfigError(f"{url!r} is not a cluster URL (expected redis+cluster://...)")
    tls = url.startswith("rediss+")
    rest = url.split("://", 1)[1]
    rest = rest.split("/", 1)[0].split("?", 1)[0]
    opts: dict[str, object] = {"ssl": tls} if tls else {}
    if "@" in rest:
        cred, rest = rest.rsplit("@", 1)
        user, _, password = cred.partition(":")
        if user:
            opts["username"] = unquote(user)
        if password:
            opts["password"] = unquote(password)
    nodes: list[ClusterNode] = []
    node: Any = ClusterNode  # redis-py leaves its constructor untyped
    for part in rest.split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(f"cluster URL {url!r}: node {part!r} must be host:port")
        nodes.append(node(host.strip("[]"), int(port)))
    return nodes, opts


def connect_cluster(url: str) -> RedisCluster:
    """A cluster client for ``url`` that has already discovered the slot map."""
    nodes, opts = parse_cluster_url(url)
    try:
        rc = RedisCluster(startup_nodes=nodes, **opts)  # type: ignore[arg-type]
        rc.ping()
    except (redis.RedisError, ValueError) as exc:
        raise StoreError(f"cannot connect to the cluster {url}: {exc}") from exc
    return rc


def namespace_slot(ns: str) -> int:
    """The cluster slot every key of namespace ``ns`` lives in (CLUSTER KEYSLOT)."""
    from redis.crc import key_slot

    return int(key_slot(keys.stream(ns).encode()))


def append_replicated(r: Store, events: Sequence[Event], replicas: int,
                      timeout_ms: int) -> list[str]:
    """``log.append``, returning only once ``replicas`` replicas of every master written to
    acknowledged the events (Redis ``WAIT``); ``StoreError`` if fewer did in ``timeout_ms``:
    the events are in, but a failover of their master before it replicates could lose them
    (re-running the same events is safe: a repeated event_id is applied once).

    WAIT counts the writes of the connection it runs on, so each master gets one pipeline on
    one connection: its XADDs (and the registry's SADD if it holds the registry), then WAIT.
    ``replicas`` 0 is a plain ``append``. Returns the entry ids in order.
    """
    if replicas <= 0 or not events:
        return append(r, events)
    nss = sorted({e.ns for e in events})
    if isinstance(r, redis.Redis):
        p = r.pipeline(transaction=False)
        append(r, events, pipe=p)
        p.wait(replicas, timeout_ms)
        res = p.execute()
        _check_acks(int(res[-1]), replicas, nss, timeout_ms)
        return [as_bytes(x).decode() for x in res[:len(events)]]
    rc: Any = r  # node lookup is untyped in redis-py
    by_node: dict[str, tuple[Any, list[int]]] = {}
    for i, ev in enumerate(events):
        node = rc.get_node_from_key(keys.stream(ev.ns))
        by_node.setdefault(node.name, (node, []))[1].append(i)
    registry = rc.get_node_from_key(keys.NAMESPACES)
    by_node.setdefault(registry.name, (registry, []))
    ids = [""] * len(events)
    try:
        for name, (node, idxs) in by_node.items():
            client: redis.Redis = node.redis_connection
            p = client.pipeline(transaction=False)
            append(client, [events[i] for i in idxs], pipe=p, register=False)
            if name == registry.name:
                p.sadd(keys.NAMESPACES, *nss)
            p.wait(replicas, timeout_ms)
            res = p.execute()
            for i, x in zip(idxs, res, strict=False):
                ids[i] = as_bytes(x).decode()
            _check_acks(int(res[-1]), replicas, nss, timeout_ms)
    except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError):
        # a failover or a moved slot: learn the new map for the caller's next attempt (if
        # the cluster is still electing, a later attempt learns it)
        with contextlib.suppress(Exception):
            rc.nodes_manager.initialize()
        raise
    return ids


def _check_acks(got: int, replicas: int, nss: Sequence[str], timeout_ms: int) -> None:
    if got < replicas:
        raise StoreError(f"only {got} of {replicas} replica(s) acknowledged the append to "
                         f"{', '.join(nss)} within {timeout_ms} ms; a failover could lose it "
                         "(re-run it: repeated event_ids are applied once)")
