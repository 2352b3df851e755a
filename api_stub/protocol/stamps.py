"""What an event may leave out, filled in one place for every door (the SDK's ``Memory`` and
``hivemind serve``): a time-ordered ``event_id``, the clock as ``at`` (read at the edge), the
namespace and the agent."""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

_seq = itertools.count()
_seq_lock = threading.Lock()


def new_id(prefix: str) -> str:
    """A unique id that sorts by creation time: ``<prefix>-<µs hex><seq hex><random hex>``."""
    with _seq_lock:
        n = next(_seq) & 0xFFFF
    return f"{prefix}-{time.time_ns() // 1000:014x}{n:04x}{os.urandom(5).hex()}"


def now_rfc3339() -> str:
    """The clock, UTC, as an event's ``at`` (read at the edge: the SDK and the server)."""
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def filled(obj: Mapping[str, Any], ns: str, agent: str) -> dict[str, Any]:
    """``obj`` with a new time-ordered ``event_id`` and ``at`` (now) unless it has them, and
    ``ns`` and ``agent`` (unless empty) unless it names them. A server checks first that a
    named namespace or agent is the caller's own."""
    ev = {"event_id": new_id("ev"), "at": now_rfc3339(), **obj}
    ev.setdefault("ns", ns)
    if agent:
        ev.setdefault("agent", agent)
    return ev
