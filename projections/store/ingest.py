"""Validate and append a JSON Lines file of events: all-or-nothing by default, memory bounded.

Without ``skip_invalid`` a first pass validates every line and nothing is appended if any
line is bad; a second pass appends in pipelined chunks. With it, one pass appends the good
lines and reports each bad one. Either way memory does not grow with the file size.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

from tqdm import tqdm

from hivemind_memory.events.codec import parse_json_event
from hivemind_memory.events.errors import AppendFailed, EventError
from hivemind_memory.events.schema import Event
from hivemind_memory.projections.store.log import append
from hivemind_memory.projections.store.types import Store

CHUNK = 1000
"""Events per pipelined append."""
Appender = Callable[[Store, Sequence[Event]], object]
"""How a chunk is appended (``log.append`` unless the caller waits for replicas)."""


@dataclass
class IngestReport:
    """Outcome of one ingest run."""

    appended: int = 0
    rejected: int = 0
    lines: int = 0
    namespaces: set[str] = field(default_factory=set)


def iter_events(fh: IO[bytes]) -> Iterator[tuple[int, Event | EventError, int]]:
    """Each non-blank line as ``(lineno, event or error, bytes read)``."""
    for lineno, line in enumerate(fh, start=1):
        if not line.strip():
            yield lineno, EventError(""), len(line)  # blank: skipped (empty message)
            continue
        try:
            yield lineno, parse_json_event(line, lineno), len(line)
        except EventError as exc:
            yield lineno, exc, len(line)


def _progress(total: int | None, enabled: bool) -> Any:
    if not enabled:
        return None
    return tqdm(total=total, unit="B", unit_scale=True, desc="ingest", file=sys.stderr)


def _append_pass(r: Store, fh: IO[bytes], report: IngestReport, on_error: Callable[[str], None],
                 bar: Any, on_chunk: Callable[[set[str]], None] | None,
                 appender: Appender) -> None:
    chunk: list[Event] = []

    def flush() -> None:
        if not chunk:
            return
        nss = {e.ns for e in chunk}
        if on_chunk is not None:
            on_chunk(nss)  # scheduled before its first entry can land
        try:
            appender(r, chunk)
        except AppendFailed as exc:
            report.appended += exc.appended
            if exc.appended:
                report.namespaces |= nss
            raise
        report.appended += len(chunk)
        report.namespaces |= nss
        if on_chunk is not None:
            on_chunk(nss)  # again: a job that ran before the entries landed found nothing
        chunk.clear()

    for _lineno, item, nbytes in iter_events(fh):
        if bar is not None:
            bar.update(nbytes)
        if isinstance(item, EventError):
            if str(item):
                report.rejected += 1
                on_error(str(item))
            continue
        report.lines += 1
        chunk.append(item)
        if len(chunk) >= CHUNK:
            flush()
    flush()


def ingest(r: Store, source: str, *, skip_invalid: bool = False,
           on_error: Callable[[str], None], progress: bool = False,
           on_chunk: Callable[[set[str]], None] | None = None,
           report: IngestReport | None = None,
           appender: Appender = append) -> IngestReport:
    """Ingest ``source`` (a path, or ``-`` for stdin) into ``r``; see the module docstring.

    Pass ``report`` to see how far an ingest got when the store fails midway: on
    ``AppendFailed`` its ``appended`` is the exact number of events in the log.
    ``on_chunk`` gets each chunk's namespaces before its append and again after it.
    ``appender`` appends a chunk (``log.append`` unless the caller waits for replicas).
    """
    report = report if report is not None else IngestReport()
    spooled: str | None = None
    try:
        if source == "-":
            if skip_invalid:
                _append_pass(r, sys.stdin.buffer, report, on_error, None, on_chunk, appender)
                return report
            fd, spooled = tempfile.mkstemp(prefix="hivemind-ingest-", suffix=".jsonl")
            with os.fdopen(fd, "wb") as out:
                shutil.copyfileobj(sys.stdin.buffer, out)
            path = spooled
        else:
            path = source
        size = os.path.getsize(path)
        if not skip_invalid:
            bad = 0
            with open(path, "rb") as fh:
                bar = _progress(size, progress)
                for _lineno, item, nbytes in iter_events(fh):
                    if bar is not None:
                        bar.update(nbytes)
                    if isinstance(item, EventError) and str(item):
                        bad += 1
                        on_error(str(item))
                if bar is not None:
                    bar.close()
            if bad:
                report.rejected = bad
                return report
        with open(path, "rb") as fh:
            bar = _progress(size, progress)
            _append_pass(r, fh, report, on_error, bar, on_chunk, appender)
            if bar is not None:
                bar.close()
        return report
    finally:
        if spooled is not None:
            os.unlink(spooled)
