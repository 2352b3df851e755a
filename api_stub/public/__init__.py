"""hivemind: event-sourced shared memory for AI agents. The public face of the package::

    from hivemind_memory import Memory

    mem = Memory("memory://", ns="team-a", agent="alice")   # or http://..., redis://...
    mem.remember("Deploys happen on Tuesdays after 14:00 UTC")
    print(mem.recall("when do we deploy?", budget=500).context)

This module is the package root (``api_stub/public/__init__.py``, installed as
``hivemind_memory/__init__.py``). It sits above the client side and the worker side and wires
them together: the SDK never imports the worker, so the in-process worker that ``memory://``
needs is injected here.
"""

from __future__ import annotations

from typing import Any

from hivemind_memory.api_stub import sdk
from hivemind_memory.api_stub.sdk import (
    AsyncMemory,
    Duplicate,
    Memory,
    Note,
    Recall,
    RecalledNote,
    Remembered,
)
from hivemind_memory.events.errors import (
    AccessDenied,
    AlreadySuperseded,
    EventError,
    HivemindError,
    NotAllowed,
    NoteExists,
    QueryError,
    QueryTimeout,
    StoreError,
    TooLarge,
    UnknownNote,
    WriteRefused,
)


def _start_embedded(settings: Any, store: Any) -> sdk.EmbeddedWorker:
    """``worker.inprocess.start_embedded``, imported when a ``memory://`` Memory first needs
    it (so importing the package, or any of its modules, does not load the worker)."""
    from hivemind_memory.worker.inprocess import start_embedded

    return start_embedded(settings, store)


sdk.use_embedded_worker(_start_embedded)

__all__ = ["AccessDenied", "AlreadySuperseded", "AsyncMemory", "Duplicate", "EventError",
           "HivemindError", "Memory", "NotAllowed", "Note", "NoteExists", "QueryError",
           "QueryTimeout", "Recall", "RecalledNote", "Remembered", "StoreError", "TooLarge",
           "UnknownNote", "WriteRefused"]
