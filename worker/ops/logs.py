"""structlog, configured once in the entry point, for our logs and, through its standard
library integration, for RQ's, redis-py's and Python's warnings: one format for every line.

JSON lines (one object per line, tracebacks inside the object) when stderr is not a terminal;
readable, coloured lines when it is. snake_case event names with key/value pairs.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import IO

import structlog

QUIET_LOGGERS = ("rq", "redis")
"""Third-party loggers kept at warning level unless the level asked for is debug."""

class _Stderr:
    """``sys.stderr`` as it is at each write, not at configure time (a test harness that
    ran the CLI in process swaps it and closes the old one; server threads log later)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


LOG_BURST = 50
"""Lines of one kind (logger and event) written at once before the rate limit applies."""
LOG_RATE = 10.0
"""Lines of one kind per second after the burst; the rest are counted, not written."""


class RateLimit(logging.Filter):
    """A token bucket per kind of warning or error line (logger and message; info lines pass,
    the access log's among them): a flood (a thousand clients
    failing the same way) writes ``burst`` lines and then ``rate`` a second; the next line
    of that kind written carries ``suppressed``, how many were dropped since the last one.
    The clock is passed in (``clock``), so the filter is tested without waiting."""

    def __init__(self, burst: int = LOG_BURST, rate: float = LOG_RATE,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.burst, self.rate, self.clock = burst, rate, clock
        self._buckets: dict[tuple[str, str], list[float]] = {}
        """kind -> [tokens, last refill, suppressed since the last line written]"""
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:  # the access log's 2xx-4xx lines, progress...
            return True
        # structlog's event dict: its event names the kind; the standard library's: its format
        msg = str(record.msg.get("event", "")) if isinstance(record.msg, dict) else str(record.msg)
        kind = (record.name, msg[:200])
        now = self.clock()
        with self._lock:
            b = self._buckets.get(kind)
            if b is None:
                if len(self._buckets) > 10_000:  # kinds are few; never grow for good
                    self._buckets.clear()
                b = self._buckets[kind] = [float(self.burst), now, 0.0]
            b[0] = min(float(self.burst), b[0] + (now - b[1]) * self.rate)
            b[1] = now
            if b[0] < 1.0:
                b[2] += 1
                return False
            b[0] -= 1.0
            dropped, b[2] = int(b[2]), 0.0
        if dropped:
            if isinstance(record.msg, dict):
                record.msg = {**record.msg, "suppressed": dropped}
            else:
                record.msg = f"{record.msg} [suppressed {dropped} like this]"
        return True


_handler: logging.Handler | None = None
"""The root handler installed by ``configure`` (replaced by the next call)."""


def _shared() -> list[structlog.typing.Processor]:
    """Processors for our events and for records from the standard library alike."""
    return [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]


def configure(level: str = "info", json: bool | None = None,
              stream: IO[str] | None = None) -> None:
    """Configure structlog and the root logger (call once, from the CLI entry point).

    ``json=None`` picks JSON unless ``stream`` (default stderr) is a terminal.
    """
    out = stream if stream is not None else sys.stderr
    as_json = not out.isatty() if json is None else json
    lvl = logging.getLevelName(level.upper())
    renderer: structlog.typing.Processor = (
        structlog.processors.JSONRenderer() if as_json
        else structlog.dev.ConsoleRenderer(colors=out.isatty()))
    final: list[structlog.typing.Processor] = [
        structlog.stdlib.ProcessorFormatter.remove_processors_meta]
    if as_json:
        final.append(structlog.processors.format_exc_info)  # a traceback is one JSON string
    final.append(renderer)
    structlog.configure(
        processors=[structlog.stdlib.filter_by_level, *_shared(),
                    structlog.processors.StackInfoRenderer(),
                    structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    global _handler
    # stderr as it is at each write (see _Stderr); an explicit stream as given
    handler = logging.StreamHandler(out if stream is not None else _Stderr())
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=_shared(), processors=final))
    handler.addFilter(RateLimit())  # a flood of one kind of line cannot fill the disk
    root = logging.getLogger()
    if _handler is not None:
        root.removeHandler(_handler)  # ours from an earlier call; others' handlers stay
    _handler = handler
    root.addHandler(handler)
    root.setLevel(lvl)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(min(max(lvl, logging.WARNING), logging.CRITICAL)
                                         if lvl > logging.DEBUG else lvl)
    # RQ's own handlers, if an earlier configuration let it add them, would bypass ours
    rq_worker = logging.getLogger("rq.worker")
    for h in list(rq_worker.handlers):
        rq_worker.removeHandler(h)
    rq_worker.propagate = True
    logging.captureWarnings(True)
