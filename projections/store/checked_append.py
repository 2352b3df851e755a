"""The checked append: a namespace's events appended only if its stream still ends where the
writer read it (``lua/append_if_tail.lua``), the compare and the XADDs one atomic step. It is
how ``Client.remember``/``revise``/``forget`` make a write conditional on the state they
checked (a duplicate check, ``expected_version``) without a lock; on a cluster it runs on the
stream's master and can wait for replicas like ``cluster.append_encoded_replicated``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from redis.exceptions import NoScriptError

from hivemind_memory.events.errors import AppendFailed
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.cluster import check_acks, relearn, slot_master
from hivemind_memory.projections.store.log import FIELD, register_namespaces
from hivemind_memory.projections.store.scripts import script
from hivemind_memory.projections.store.types import Store, as_bytes


def append_if_tail(r: Store, ns: str, tail: str, blobs: Sequence[bytes], replicas: int,
                   timeout_ms: int, register: bool = True) -> list[str] | None:
    """Append encoded events of ``ns`` only if its stream still ends at entry ``tail``
    (``lua/append_if_tail.lua``); None when it moved on (nothing written). Registers the
    namespace first (``register=False``: the caller did, once for all its attempts); with
    ``replicas`` > 0 waits for them (``WAIT`` on the same connection, the stream's master)
    and raises ``StoreError`` if too few acknowledged. One round trip: the script is sent
    by its SHA1 alone (a redis-py ``Script`` called on a pipeline first asks ``SCRIPT
    EXISTS``, a round trip of its own), loaded and sent again only when Redis does not
    know it (``NOSCRIPT``: the script did not run, nothing was written)."""
    if register:
        register_namespaces(r, [ns])
    client = slot_master(r, keys.stream(ns))
    s = script(client, "append_if_tail")
    try:
        try:
            res = _send(client, s.sha, ns, tail, blobs, replicas, timeout_ms)
        except NoScriptError:  # the script did not run: load it, send again
            s.sha = client.script_load(s.script)
            res = _send(client, s.sha, ns, tail, blobs, replicas, timeout_ms)
    except redis.RedisError as exc:
        relearn(r)
        raise AppendFailed(f"checked append to {ns!r} failed, its outcome unknown (a retry "
                           f"with the same event_ids is safe): {type(exc).__name__}: {exc}",
                           0, []) from exc
    if res[0] is None:
        return None
    if replicas > 0:
        check_acks(int(res[1]), replicas, [ns], timeout_ms)
    return [as_bytes(x).decode() for x in res[0]]


def _send(client: Any, sha: str, ns: str, tail: str, blobs: Sequence[bytes], replicas: int,
          timeout_ms: int) -> list[Any]:
    """``append_if_tail.lua`` by its SHA1 (and ``WAIT``), one pipeline; its replies."""
    p = client.pipeline(transaction=False)
    p.evalsha(sha, 1, keys.stream(ns), tail, FIELD, *blobs)
    if replicas > 0:
        p.wait(replicas, timeout_ms)
    res: list[Any] = p.execute()
    return res
