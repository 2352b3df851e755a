"""Keyed digests of what an event means, to tell a retry from a conflicting reuse of its id.

An ``event_id`` already in a namespace's log may be sent again: with the same content it is a
retry (acknowledged, not appended again); with other content it is refused
(``EventIdConflict``). Events still in the unprojected tail are compared directly; for events
the projector folded, ``commit_batch.lua`` keeps ``hm:{ns}:event_digests`` (event_id ->
digest) in the same atomic write as ``seen``. The digest is an HMAC-SHA256 keyed with the
store's secret (``digest_key``): an unkeyed hash of a short text could be guessed.
It covers everything but ``at`` (a client that lets the server fill ``at`` gets a new one on
each retry): type, ns, note id, agent and every other field.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import secrets
from collections.abc import Iterable

import msgspec
import redis

from hivemind_memory.events.schema import Event, event_type
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.types import Store, stream_entries

ERASED = b"erased"
"""The digest an erasure leaves for the events of an erased note: matches no content, so the
original content resent is refused (409), never added again."""


def canonical(ev: Event) -> bytes:
    """The event's meaning as bytes: its fields but ``at``, keys sorted."""
    d = msgspec.to_builtins(ev)
    d.pop("at", None)
    d["type"] = event_type(ev)
    return msgspec.json.encode(d, order="sorted")


def digest(key: bytes, ev: Event) -> bytes:
    """HMAC-SHA256 of ``canonical(ev)`` keyed with the store secret ``key`` (hex bytes)."""
    return hmac.new(key, canonical(ev), hashlib.sha256).hexdigest().encode()


DIGEST_KEY_BYTES = 32
"""Length of the store's digest secret (``keys.DIGEST_KEY``)."""


def digest_key(r: Store) -> bytes:
    """The store's secret for keyed digests (``redacted`` and ``event_digests``), made on
    first use: an XADD with the fixed id ``0-1`` succeeds once, so concurrent first writers
    agree on one secret."""
    with contextlib.suppress(redis.ResponseError):  # made before: "ID ... equal or smaller"
        r.xadd(keys.DIGEST_KEY, {"k": secrets.token_bytes(DIGEST_KEY_BYTES)}, id="0-1")
    [entry] = stream_entries(r.xrange(keys.DIGEST_KEY, count=1))
    return entry.fields[b"k"]


def store_key(r: Store) -> bytes:
    """The store's digest secret (made on first use)."""
    return digest_key(r)


def digests(r: Store, events: Iterable[Event]) -> list[tuple[str, bytes]]:
    """(event_id, digest) of ``events``, the first of each id only."""
    evs = list(events)
    if not evs:
        return []
    key = store_key(r)
    out: dict[str, bytes] = {}
    for ev in evs:
        if ev.event_id not in out:
            out[ev.event_id] = digest(key, ev)
    return list(out.items())
