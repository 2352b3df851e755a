"""hivemind: event-sourced shared memory for AI agents. The public face of the package::

    from hivemind_memory import Memory

    mem = Memory("memory://", ns="team-a", agent="alice")   # or http://..., redis://...
    mem.remember("Deploys happen on Tuesdays after 14:00 UTC")
    print(mem.recall("when do we deploy?", budget=500).context)

This module is the package root (``api_stub/public/__init__.py``, installed as
``hivemind_memory/__init__.py``). It sits above the client side and the worker side and wires
them together: the SDK never imports the worker, so the in-process worker that ``memory://``
needs is injected here (left in ``api_stub.wiring``, which the SDK reads when it is imported).
The SDK's names are imported when first asked for, so importing another module of the package
(``hivemind batch`` imports the client side only) does not load the SDK.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hivemind_memory.api_stub import wiring
from hivemind_memory.events.errors import (
    AccessDenied,
    AlreadySuperseded,
    EventError,
    ForeignNoteId,
    HivemindError,
    IndexWarming,
    NotAllowed,
    NoteExists,
    QueryError,
    QueryTimeout,
    StoreError,
    TooLarge,
    UnknownNote,
    VersionConflict,
    WriteRefused,
)

if TYPE_CHECKING:
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

_FROM_SDK = frozenset({"AsyncMemory", "Duplicate", "Memory", "Note", "Recall", "RecalledNote",
                       "Remembered"})
"""The SDK's names of the public face, imported when first asked for (``__getattr__``): a
process that imports only some module of the package (``hivemind batch``: the client side)
does not load the SDK."""


def _start_embedded(settings: Any, store: Any) -> sdk.EmbeddedWorker:
    """``worker.inprocess.start_embedded``, imported when a ``memory://`` Memory first needs
    it (so importing the package, or any of its modules, does not load the worker)."""
    from hivemind_memory.worker.inprocess import start_embedded

    _quiet_logs()
    return start_embedded(settings, store)


def _below_the_loggers_level(logger: Any, method_name: str, event_dict: Any) -> Any:
    """``structlog.stdlib.filter_by_level`` for any logger: drops an event below the level of
    a standard-library logger, and passes every event to another kind (a program that later
    sets only its own ``logger_factory``, say ``PrintLoggerFactory``, keeps these processors:
    ``filter_by_level`` would raise AttributeError on each line)."""
    import logging

    import structlog

    enabled = getattr(logger, "isEnabledFor", None)
    level = logging.ERROR if method_name == "exception" else \
        logging.getLevelNamesMapping().get(method_name.upper(), logging.INFO)
    if enabled is not None and not enabled(level):
        raise structlog.DropEvent
    return event_dict


def _quiet_logs() -> None:
    """A library keeps quiet: unless the program configured structlog itself (the CLI does,
    ``worker.ops.logs.configure``), hivemind's structlog events go to the standard ``logging``
    module, so they follow the program's logging setup, and with none Python's default
    applies: warnings and errors on stderr, nothing below, never stdout (structlog's own
    default prints every level to stdout)."""
    import structlog

    if structlog.is_configured():
        return
    structlog.configure(
        processors=[_below_the_loggers_level, structlog.stdlib.add_log_level,
                    structlog.processors.KeyValueRenderer(key_order=["event"])],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False)



# Left for the SDK before it can be imported (this module runs first, whatever is imported):
# ``api_stub.sdk`` starts with it, without this module importing the SDK.
wiring.embedded_worker = _start_embedded


if not TYPE_CHECKING:  # type checkers see the SDK's names imported above, and nothing else

    def __getattr__(name: str) -> Any:
        if name in _FROM_SDK:
            from hivemind_memory.api_stub import sdk

            _quiet_logs()  # the SDK is a library: its logs follow the program's setup
            value = getattr(sdk, name)
            globals()[name] = value  # asked once
            return value
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(globals()) | _FROM_SDK)


__all__ = ["AccessDenied", "AlreadySuperseded", "AsyncMemory", "Duplicate", "EventError",
           "ForeignNoteId", "HivemindError", "IndexWarming", "Memory", "NotAllowed", "Note",
           "NoteExists",
           "QueryError", "QueryTimeout", "Recall", "RecalledNote", "Remembered", "StoreError",
           "TooLarge", "UnknownNote", "VersionConflict", "WriteRefused"]
