"""structlog, configured once in the entry point: JSON lines on stderr, snake_case events."""

from __future__ import annotations

import logging
import sys

import structlog


class _Stderr:
    """``sys.stderr`` as it is at each write, not at configure time (a test harness that
    ran the CLI in process swaps it and closes the old one; server threads log later)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure(level: str = "info", json: bool = True) -> None:
    """Configure structlog (call once, from the CLI entry point)."""
    processors: list[structlog.typing.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        processors=[*processors, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=_Stderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
    # RQ logs through the standard library: keep its chatter at warning level.
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    logging.getLogger("rq").setLevel(logging.WARNING)
