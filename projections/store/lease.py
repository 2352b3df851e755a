"""The projection lease (at most one projector folds a namespace at a time), waiting for the
projector's next commit on the namespace's changes stream, and the index build lease (at most
one worker builds a namespace's index snapshot in the background at a time)."""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass

from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.scripts import script
from hivemind_memory.projections.store.types import Store, stream_entries, xread_entries

WAIT_SLICE_S = 0.1
"""Longest single blocking read while waiting for another projector (well under the socket
timeout, so a wait never dies of one; callers loop until their own deadline)."""


@dataclass(slots=True)
class Lease:
    """A held projection lease (renew it per batch; it expires if the holder dies)."""

    r: Store
    ns: str
    token: str
    lease_ms: int

    def renew(self) -> bool:
        """Extend the lease; False if it was lost (expired and taken)."""
        return bool(script(self.r, "renew_lease")(keys=[keys.lock(self.ns)],
                                                  args=[self.token, self.lease_ms]))

    def release(self) -> None:
        """Give the lease back if we still hold it."""
        script(self.r, "renew_lease")(keys=[keys.lock(self.ns)], args=[self.token, 0])


def try_lease(r: Store, ns: str, lease_ms: int) -> Lease | None:
    """Take the namespace's projection lease now, or None if another projector holds it."""
    token = uuid.uuid4().hex
    if r.set(keys.lock(ns), token, nx=True, px=lease_ms):
        return Lease(r, ns, token, lease_ms)
    return None


def acquire_lease(r: Store, ns: str, lease_ms: int, deadline: float) -> Lease | None:
    """Take the lease, waiting (blocking on the changes stream) until ``deadline``
    (``time.monotonic()`` seconds); None if it stayed busy."""
    after = changes_tail(r, ns)
    while True:
        held = try_lease(r, ns, lease_ms)
        if held is not None:
            return held
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        after = wait_for_change(r, ns, after, min(remaining, WAIT_SLICE_S))


def changes_tail(r: Store, ns: str) -> bytes:
    """Id of the newest entry of the changes stream (b'0-0' if none)."""
    got = stream_entries(r.xrevrange(keys.changes(ns), count=1))
    return got[0].id if got else b"0-0"


def wait_for_change(r: Store, ns: str, after: bytes, timeout_s: float) -> bytes:
    """Block until a batch is committed after changes-entry ``after`` (or the timeout);
    returns the newest changes-entry id seen."""
    ms = max(1, int(min(timeout_s, WAIT_SLICE_S) * 1000))
    seen = xread_entries(r.xread({keys.changes(ns): after}, count=1, block=ms))
    return seen[-1].id if seen else after


class Renewing:
    """Keeps a build lease (``keys.index_build_lease``, a token with a TTL) alive while its
    holder works longer than the TTL: a thread renews it every third of ``ttl_s`` until
    ``stop``, which also gives the lease back. A holder that dies stops renewing, so the lease
    still frees the namespace ``ttl_s`` after."""

    def __init__(self, r: Store, key: str, token: str, ttl_s: float) -> None:
        self.r, self.key, self.token, self.ttl_s = r, key, token, ttl_s
        self.renewals = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"renew-{key}")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.ttl_s / 3):
            try:
                if not script(self.r, "renew_lease")(
                        keys=[self.key], args=[self.token, int(self.ttl_s * 1000)]):
                    return  # lost (expired and taken): nothing left to renew
                self.renewals += 1
            except Exception:  # a blip: the next tick tries again, the TTL covers two
                continue

    def stop(self) -> None:
        """Stop renewing and give the lease back (if still ours)."""
        self._stop.set()
        self._thread.join()
        script(self.r, "renew_lease")(keys=[self.key], args=[self.token, 0])


def try_build_lease(r: Store, ns: str, token: str) -> bool:
    """Take ``ns``'s index build lease for ``token`` (``keys.INDEX_BUILD_LEASE_S``); False
    when another build holds it."""
    return bool(r.set(keys.index_build_lease(ns), token, nx=True, ex=keys.INDEX_BUILD_LEASE_S))


def renewing_build_lease(r: Store, ns: str, token: str) -> Renewing:
    """``ns``'s index build lease, taken for ``token`` (``try_build_lease``), kept alive while
    the build runs; ``stop`` gives it back."""
    return Renewing(r, keys.index_build_lease(ns), token, keys.INDEX_BUILD_LEASE_S)
