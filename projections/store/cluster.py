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
from redis.crc import key_slot

from hivemind_memory.events.codec import encode_event
from hivemind_memory.events.errors import AppendFailed, ConfigError, StoreError
from hivemind_memory.events.schema import Event
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.log import FIELD, append_encoded
from hivemind_memory.projections.store.types import Store, as_bytes
from hivemind_memory.projections.store.urls import is_cluster_url, redact_url


def parse_cluster_url(url: str) -> tuple[list[ClusterNode], dict[str, object]]:
    """The startup nodes and the connection options of a cluster URL; ``ConfigError`` naming
    what is wrong with it."""
    if not is_cluster_url(url):
        raise ConfigError(f"{redact_url(url)!r} is not a cluster URL (expected "
                          "redis+cluster://...)")
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
            raise ConfigError(f"cluster URL {redact_url(url)!r}: node {part!r} must be "
                              "host:port")
        nodes.append(node(host.strip("[]"), int(port)))
    return nodes, opts


def connect_cluster(url: str, options: dict[str, Any] | None = None) -> RedisCluster:
    """A cluster client for ``url`` that has already discovered the slot map. ``options``
    are the connection settings every hivemind client gets (``connection.client_options``:
    timeouts, retries with backoff, health checks). Errors show the URL without its
    password."""
    nodes, opts = parse_cluster_url(url)
    try:
        rc = RedisCluster(startup_nodes=nodes, **{**(options or {}), **opts})
        rc.ping()
    except (redis.RedisError, ValueError) as exc:
        raise StoreError(f"cannot connect to the cluster {redact_url(url)}: "
                         f"{type(exc).__name__}") from None
    return rc


def namespace_slot(ns: str) -> int:
    """The cluster slot every key of namespace ``ns`` lives in (CLUSTER KEYSLOT)."""
    return int(key_slot(keys.stream(ns).encode()))


def append_replicated(r: Store, events: Sequence[Event], replicas: int,
                      timeout_ms: int) -> list[str]:
    """``append_encoded_replicated`` of events (encoded here)."""
    return append_encoded_replicated(r, [(e.ns, encode_event(e)) for e in events], replicas,
                                     timeout_ms)


def append_encoded_replicated(r: Store, events: Sequence[tuple[str, bytes]], replicas: int,
                              timeout_ms: int) -> list[str]:
    """``log.append_encoded``, returning only once ``replicas`` replicas of every master
    written to acknowledged the events (Redis ``WAIT``); ``StoreError`` if fewer did in
    ``timeout_ms``: the events are in, but a failover of their master before it replicates
    could lose them (re-running the same events is safe: a repeated event_id is applied once).

    WAIT counts the writes of the connection it runs on, so each master gets one pipeline on
    one connection: the registry's SADD first if it holds the registry (registered before any
    entry can land, as ``log.append`` does), then its XADDs, then WAIT. Masters are written
    one after the other, the registry's first. A failure raises ``AppendFailed`` with the
    entries known to have landed. ``replicas`` 0 is a plain ``append_encoded``. Returns the
    entry ids in order.
    """
    if replicas <= 0 or not events:
        return append_encoded(r, events)
    nss = sorted({ns for ns, _ in events})
    ids: list[str] = [""] * len(events)
    landed = 0
    acks: list[int] = []
    for client, idxs, register in _by_master(r, [ns for ns, _ in events]):
        p = client.pipeline(transaction=False)
        if register:
            p.sadd(keys.NAMESPACES, *nss)
        for i in idxs:
            p.xadd(keys.stream(events[i][0]), {FIELD: events[i][1]})
        p.wait(replicas, timeout_ms)
        try:
            res = p.execute(raise_on_error=False)
        except redis.RedisError as exc:  # the connection died: this master's share unknown
            relearn(r)
            raise AppendFailed(f"append failed after {landed} of {len(events)} event(s); more "
                               f"may have landed: {type(exc).__name__}: {exc}", landed,
                               [x for x in ids if x]) from exc
        replies = res[1:] if register else res
        for i, x in zip(idxs, replies, strict=False):
            if not isinstance(x, Exception):
                ids[i] = as_bytes(x).decode()
                landed += 1
        errors = [x for x in res if isinstance(x, Exception)]
        if errors:
            relearn(r)
            raise AppendFailed(f"{landed} of {len(events)} event(s) appended, then "
                               f"{type(errors[0]).__name__}: {errors[0]}", landed,
                               [x for x in ids if x])
        acks.append(int(res[-1]))
    check_acks(min(acks), replicas, nss, timeout_ms)
    return ids


def _by_master(r: Store, nss: Sequence[str]) -> list[tuple[redis.Redis, list[int], bool]]:
    """Per master: a plain client for it, the indexes of the events (of namespaces ``nss``)
    it holds, and whether it holds the registry (that one first)."""
    if isinstance(r, redis.Redis):
        return [(r, list(range(len(nss))), True)]
    rc: Any = r  # node lookup is untyped in redis-py
    registry = rc.get_node_from_key(keys.NAMESPACES)
    groups: dict[str, tuple[redis.Redis, list[int], bool]] = {
        registry.name: (registry.redis_connection, [], True)}
    for i, ns in enumerate(nss):
        node = rc.get_node_from_key(keys.stream(ns))
        groups.setdefault(node.name, (node.redis_connection, [], False))[1].append(i)
    return list(groups.values())


def slot_master(r: Store, key: str) -> redis.Redis:
    """A plain client for the master holding ``key``'s slot (``r`` itself when it is one
    Redis): a cluster pipeline refuses EVALSHA, MGET and the like, a plain pipeline to the
    slot's master takes them, and every key of a namespace is in that slot."""
    if isinstance(r, redis.Redis):
        return r
    rc: Any = r  # node lookup is untyped in redis-py
    got: redis.Redis = rc.get_node_from_key(key).redis_connection
    return got


def relearn(r: Store) -> None:
    """After a failed write to a cluster (a failover, a moved slot): learn the slot map again
    for the caller's next attempt (if the cluster is still electing, a later attempt does)."""
    if isinstance(r, RedisCluster):
        rc: Any = r
        with contextlib.suppress(Exception):
            rc.nodes_manager.initialize()


def check_acks(got: int, replicas: int, nss: Sequence[str], timeout_ms: int) -> None:
    if got < replicas:
        raise StoreError(f"only {got} of {replicas} replica(s) acknowledged the append to "
                         f"{', '.join(nss)} within {timeout_ms} ms; a failover could lose it "
                         "(re-run it: repeated event_ids are applied once)")
