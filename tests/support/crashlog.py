"""Helpers of the embedded store's concurrency + restart tests: the run size (``HIVEMIND_SOAK=1``
for the long variant), what a log holds after a restart, and the check that every
acknowledged write is there exactly once."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterable

from hivemind_memory.events.codec import decode_event
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.log import FIELD, iter_all, namespaces
from hivemind_memory.projections.store.types import Store

SOAK = os.environ.get("HIVEMIND_SOAK", "") == "1"
"""Long variants: ``HIVEMIND_SOAK=1 pytest tests/unit/projections/store/test_embedded_concurrency.py
tests/system/test_embedded_restart.py``."""
SEED = int(os.environ.get("HIVEMIND_LOG_SEED", "20261201"))
"""Seed of every round (a failure names its round; rerun with the same seed to replay it)."""


def rounds(default: int, soak: int, env: str = "HIVEMIND_LOG_ROUNDS") -> int:
    """The variable ``env`` if set, else ``soak`` under ``HIVEMIND_SOAK=1``, else
    ``default``."""
    return int(os.environ.get(env, soak if SOAK else default))


def events_by_id(r: Store) -> Counter[str]:
    """How many times each event_id appears in the event logs of every namespace."""
    return Counter(decode_event(e.fields[FIELD]).event_id
                   for ns in namespaces(r) for e in iter_all(r, ns))


def notes_by_event(r: Store) -> Counter[tuple[str, str, str]]:
    """How many events of each ``(ns, type, note_id)`` the event logs hold."""
    out: Counter[tuple[str, str, str]] = Counter()
    for ns in namespaces(r):
        for e in iter_all(r, ns):
            ev = decode_event(e.fields[FIELD])
            out[ns, type(ev).__name__, ev.note_id] += 1
    return out


def exactly_once(found: Counter[str], acked: Iterable[str], may: Iterable[str] = (),
                 where: str = "") -> None:
    """Every acknowledged id once; nothing but acknowledged or in-flight (``may``) ids, and
    none of those twice."""
    acked = set(acked)
    lost = acked - set(found)
    twice = {i: n for i, n in found.items() if n > 1}
    stray = set(found) - acked - set(may)
    assert not lost and not twice and not stray, (
        f"{where}: {len(lost)} acknowledged event(s) lost (e.g. {sorted(lost)[:3]}), "
        f"{len(twice)} duplicated ({dict(list(twice.items())[:3])}), {len(stray)} never "
        f"sent ({sorted(stray)[:3]})")


def stream_keys(r: Store) -> list[bytes]:
    """Every stream key of the store."""
    return sorted(bytes(k) for k in r.scan_iter(_type="STREAM", count=1000))


def source_kinds_known() -> set[str]:
    """Stream kinds the product leaves in a store (a new one must be classified in ``keys``;
    an erasure's ``rewrite`` copy exists only while it runs). ``digest_key``: the store's
    secret for keyed digests, made by the first projection or erasure."""
    return {"events", "audit", "configs", "qembeddings", "digest_key",
            *keys.DERIVED_STREAMS} - {"rewrite"}
