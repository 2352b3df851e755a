"""Validate and append a JSON Lines file of events: all-or-nothing by default, memory bounded.

Each line is parsed once. Without ``skip_invalid`` the one parsing pass writes every good
event, already encoded for the stream, to a spool file, and nothing is appended if any line is
bad; then the spool is appended in pipelined chunks (no second parse). With it, one pass
appends the good lines and reports each bad one. Either way memory does not grow with the
file size.
"""

from __future__ import annotations

import os
import struct
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any

import redis

from hivemind_memory.events.codec import encode_event, parse_json_event
from hivemind_memory.events.errors import AppendFailed, EventError
from hivemind_memory.events.schema import Event
from hivemind_memory.projections.store.log import ChunkSender, append_encoded
from hivemind_memory.projections.store.types import Store

CHUNK = 1000
"""Events per pipelined append."""
Appender = Callable[[Store, Sequence[tuple[str, bytes]]], object]
"""How a chunk of encoded ``(ns, event)`` pairs is appended (``log.append_encoded`` unless
the caller waits for replicas)."""


@dataclass
class IngestReport:
    """Outcome of one ingest run."""

    appended: int = 0
    rejected: int = 0
    lines: int = 0
    namespaces: set[str] = field(default_factory=set)


def iter_events(fh: IO[bytes], not_after: datetime | None = None
                ) -> Iterator[tuple[int, Event | EventError, int]]:
    """Each non-blank line as ``(lineno, event or error, bytes read)``; an ``at`` later than
    ``not_after`` is an error (``parse_json_event``)."""
    for lineno, line in enumerate(fh, start=1):
        if not line.strip():
            yield lineno, EventError(""), len(line)  # blank: skipped (empty message)
            continue
        try:
            yield lineno, parse_json_event(line, lineno, not_after), len(line)
        except EventError as exc:
            yield lineno, exc, len(line)


def _progress(total: int | None, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm  # on a terminal only

    return tqdm(total=total, unit="B", unit_scale=True, desc="ingest", file=sys.stderr)


def append_chunks(r: Store, chunks: Iterable[list[tuple[str, bytes]]], report: IngestReport,
                   on_chunk: Callable[[set[str]], None] | None, appender: Appender) -> None:
    """Append chunks of encoded events in order, counting exactly what landed: the one
    append path of ``ingest``, ``import`` and ``Client.append``.

    Every chunk's namespaces are scheduled before its first entry can land and again after
    its last one has (a job that ran in between found nothing). Between two chunks one call
    does both, for the namespaces of either: no entry lands between the two calls it stands
    for, so it is the same guarantee for half the round trips.
    """
    if appender is append_encoded and isinstance(r, redis.Redis):
        _append_overlapped(r, chunks, report, on_chunk)
        return
    pending: set[str] = set()
    """Namespaces of the chunk just appended, still to be scheduled after it."""
    for chunk in chunks:
        if not chunk:
            continue
        nss = {ns for ns, _ in chunk}
        if on_chunk is not None:
            on_chunk(pending | nss)
        try:
            appender(r, chunk)
        except AppendFailed as exc:
            report.appended += exc.appended
            if exc.appended:
                report.namespaces |= nss
            raise
        report.appended += len(chunk)
        report.namespaces |= nss
        pending = nss
    if on_chunk is not None and pending:
        on_chunk(pending)


def _append_overlapped(r: redis.Redis, chunks: Iterable[list[tuple[str, bytes]]],
                       report: IngestReport,
                       on_chunk: Callable[[set[str]], None] | None) -> None:
    """``append_chunks`` with the default appender on one plain Redis: the same order of
    scheduling calls and appends, and the same exact counts, but each chunk is read (parsed)
    and packed while Redis appends the one before (``log.ChunkSender``)."""
    sender = ChunkSender(r)
    broken = True
    try:
        pending: set[str] = set()
        """Namespaces of the chunk in flight, to be scheduled after it."""
        for chunk in chunks:
            if not chunk:
                continue
            nss = {ns for ns, _ in chunk}
            packed = sender.pack(chunk)
            _landed(sender, report, pending)
            if on_chunk is not None:
                on_chunk(pending | nss)
            sender.send(nss, packed, len(chunk))
            pending = nss
        _landed(sender, report, pending)
        if on_chunk is not None and pending:
            on_chunk(pending)
        broken = False
    finally:
        sender.close(broken)


def _landed(sender: ChunkSender, report: IngestReport, nss: set[str]) -> None:
    """Count the chunk in flight (if any) once its replies are read."""
    try:
        n = sender.finish()
    except AppendFailed as exc:
        report.appended += exc.appended
        if exc.appended:
            report.namespaces |= nss
        raise
    report.appended += n
    if n:
        report.namespaces |= nss


def _append_pass(r: Store, fh: IO[bytes], report: IngestReport, on_error: Callable[[str], None],
                 bar: Any, on_chunk: Callable[[set[str]], None] | None,
                 appender: Appender, not_after: datetime | None) -> None:
    def chunks() -> Iterator[list[tuple[str, bytes]]]:
        chunk: list[tuple[str, bytes]] = []
        for _lineno, item, nbytes in iter_events(fh, not_after):
            if bar is not None:
                bar.update(nbytes)
            if isinstance(item, EventError):
                if str(item):
                    report.rejected += 1
                    on_error(str(item))
                continue
            report.lines += 1
            chunk.append((item.ns, encode_event(item)))
            if len(chunk) >= CHUNK:
                yield chunk
                chunk = []
        yield chunk

    append_chunks(r, chunks(), report, on_chunk, appender)


_FRAME = struct.Struct("<II")
"""Spool record header: namespace length, encoded event length (then both, as bytes)."""


def _spool_pass(fh: IO[bytes], out: IO[bytes], on_error: Callable[[str], None],
                bar: Any, not_after: datetime | None) -> int:
    """Parse every line once, spooling the good events encoded; returns how many were bad."""
    bad = 0
    for _lineno, item, nbytes in iter_events(fh, not_after):
        if bar is not None:
            bar.update(nbytes)
        if isinstance(item, EventError):
            if str(item):
                bad += 1
                on_error(str(item))
            continue
        ns, blob = item.ns.encode(), encode_event(item)
        out.write(_FRAME.pack(len(ns), len(blob)))
        out.write(ns)
        out.write(blob)
    return bad


def _append_spool(r: Store, spool: IO[bytes], report: IngestReport,
                  on_chunk: Callable[[set[str]], None] | None, appender: Appender) -> None:
    def chunks() -> Iterator[list[tuple[str, bytes]]]:
        chunk: list[tuple[str, bytes]] = []
        while head := spool.read(_FRAME.size):
            n_ns, n_blob = _FRAME.unpack(head)
            chunk.append((spool.read(n_ns).decode(), spool.read(n_blob)))
            report.lines += 1
            if len(chunk) >= CHUNK:
                yield chunk
                chunk = []
        yield chunk

    append_chunks(r, chunks(), report, on_chunk, appender)


def ingest(r: Store, source: str, *, skip_invalid: bool = False,
           on_error: Callable[[str], None], progress: bool = False,
           on_chunk: Callable[[set[str]], None] | None = None,
           report: IngestReport | None = None,
           appender: Appender = append_encoded,
           not_after: datetime | None = None) -> IngestReport:
    """Ingest ``source`` (a path, or ``-`` for stdin) into ``r``; see the module docstring.

    Pass ``report`` to see how far an ingest got when the store fails midway: on
    ``AppendFailed`` its ``appended`` is the exact number of events in the log.
    ``on_chunk`` gets each chunk's namespaces before its append and again after it.
    ``appender`` appends a chunk (``log.append_encoded`` unless the caller waits for
    replicas). ``not_after``: a line whose ``at`` is later is refused (the clock plus the
    allowed skew; None: no bound).
    """
    report = report if report is not None else IngestReport()
    if skip_invalid:
        if source == "-":
            _append_pass(r, sys.stdin.buffer, report, on_error, None, on_chunk, appender,
                         not_after)
            return report
        with open(source, "rb") as fh:
            bar = _progress(os.path.getsize(source), progress)
            _append_pass(r, fh, report, on_error, bar, on_chunk, appender, not_after)
            if bar is not None:
                bar.close()
        return report
    with tempfile.TemporaryFile(prefix="hivemind-ingest-") as spool:
        if source == "-":
            bad = _spool_pass(sys.stdin.buffer, spool, on_error, None, not_after)
        else:
            with open(source, "rb") as fh:
                bar = _progress(os.path.getsize(source), progress)
                bad = _spool_pass(fh, spool, on_error, bar, not_after)
                if bar is not None:
                    bar.close()
        if bad:
            report.rejected = bad
            return report
        spool.seek(0)
        _append_spool(r, spool, report, on_chunk, appender)
    return report
