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

from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote

import redis
from redis.cluster import ClusterNode, RedisCluster

from hivemind_memory.events.errors import ConfigError, StoreError
from hivemind_memory.projections.store import keys

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


def wait_replicas(r: redis.Redis | RedisCluster, nss: Iterable[str], replicas: int,
                  timeout_ms: int) -> int:
    """Block until the writes this process made to the masters of ``nss`` (and the registry)
    reached ``replicas`` replicas each, or ``timeout_ms``; returns the fewest acknowledgements
    seen (Redis ``WAIT``, per master that holds one of the namespaces).

    WAIT counts the writes of the connection it runs on: this relies on redis-py handing a
    single-threaded caller the connection its last pipeline used (its pools are LIFO).
    """
    if isinstance(r, RedisCluster):
        rc: Any = r  # node lookup and targeted commands are untyped in redis-py
        targets = {}
        for key in [keys.NAMESPACES, *(keys.stream(ns) for ns in nss)]:
            node = rc.get_node_from_key(key)
            targets[node.name] = node
        acks = [int(rc.execute_command("WAIT", replicas, timeout_ms, target_nodes=node))
                for node in targets.values()]
        return min(acks) if acks else replicas
    return int(r.wait(replicas, timeout_ms))


def require_replicas(r: redis.Redis | RedisCluster, nss: Iterable[str], replicas: int,
                     timeout_ms: int) -> None:
    """``wait_replicas``, raising ``StoreError`` when fewer replicas acknowledged in time: the
    appends are in, but a failover of their master could still lose them (re-running the
    same events is safe: a repeated event_id is applied once)."""
    if replicas <= 0:
        return
    nss = sorted(set(nss))
    got = wait_replicas(r, nss, replicas, timeout_ms)
    if got < replicas:
        raise StoreError(f"only {got} of {replicas} replica(s) acknowledged the append to "
                         f"{', '.join(nss)} within {timeout_ms} ms; a failover could lose it "
                         "(re-run it: repeated event_ids are applied once)")
