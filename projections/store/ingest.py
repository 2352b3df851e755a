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
from hivemind_memory.projections.reduce import Undecodable
from hivemind_memory.projections.store import eventdigest, keys
from hivemind_memory.projections.store.log import ChunkSender, append_encoded
from hivemind_memory.projections.store.readmodel import decode_entries
from hivemind_memory.projections.store.types import Store, as_bytes

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
    conflicts: list[str] = field(default_factory=list)
    """Event ids refused as ``event_id_conflict`` (also counted in ``rejected``)."""


TAIL_PAGE = 2000
"""Entries per XRANGE page when ``IdGuard`` reads a namespace's unprojected tail."""


class IdGuard:
    """Refuses an event whose ``event_id`` is already in its namespace's log (or earlier in
    the same ingest) with other content, as the HTTP door does (409 ``event_id_conflict``);
    the same content again is a retry and passes (the projector applies it once).

    Folded events are compared by their keyed digest (``hm:{ns}:event_digests``), the
    namespace's unprojected tail as it stood when the ingest first met the namespace, and the
    events this ingest let through, by the digests it keeps (32 bytes an event id: the one
    thing of an ingest that grows with the file)."""

    def __init__(self, r: Store) -> None:
        self.r = r
        self.key = b""
        self.known: dict[str, dict[str, bytes]] = {}
        """Per namespace: event id -> digest of the first event of that id in the tail or
        let through by this ingest."""

    def _namespace(self, ns: str) -> dict[str, bytes]:
        got = self.known.get(ns)
        if got is None:
            got = self.known[ns] = {}
            cp_raw = self.r.get(keys.checkpoint(ns))
            lo = "(" + as_bytes(cp_raw).decode() if cp_raw else "-"
            while page := self.r.xrange(keys.stream(ns), min=lo, max="+", count=TAIL_PAGE):
                for _entry_id, ev, _raw in decode_entries(page, ns):
                    if isinstance(ev, Undecodable):
                        continue
                    got.setdefault(ev.event_id, bytes.fromhex(
                        eventdigest.digest(self.key, ev).decode()))
                lo = "(" + as_bytes(page[-1][0]).decode()
        return got

    def split(self, events: Sequence[tuple[int, Event]]) -> tuple[list[tuple[int, Event]],
                                                                   list[tuple[int, Event]]]:
        """``(passed, conflicting)`` of ``(lineno, event)`` pairs, in order."""
        if not events:
            return [], []
        if not self.key:
            self.key = eventdigest.store_key(self.r)
        by_ns: dict[str, list[str]] = {}
        for _, ev in events:
            by_ns.setdefault(ev.ns, []).append(ev.event_id)
        folded: dict[str, dict[str, bytes]] = {}
        for ns, ids in by_ns.items():
            uniq = list(dict.fromkeys(ids))
            digs = self.r.hmget(keys.event_digests(ns), uniq)
            folded[ns] = {i: as_bytes(d) for i, d in zip(uniq, digs, strict=True)
                          if d is not None}
        passed: list[tuple[int, Event]] = []
        refused: list[tuple[int, Event]] = []
        for lineno, ev in events:
            dig = eventdigest.digest(self.key, ev)
            mine = self._namespace(ev.ns)
            old = folded[ev.ns].get(ev.event_id)
            if old is not None:
                ok = old == dig
            else:
                seen = mine.get(ev.event_id)
                ok = seen is None or seen == bytes.fromhex(dig.decode())
                if seen is None:
                    mine[ev.event_id] = bytes.fromhex(dig.decode())
            (passed if ok else refused).append((lineno, ev))
        return passed, refused


def conflict_message(lineno: int, ev: Event) -> str:
    """What ``ingest`` reports for an event refused by ``IdGuard``."""
    return (f"line {lineno}: event_id_conflict: event_id {ev.event_id!r} is already in "
            f"namespace {ev.ns!r} with other content (an event id names one event; the same "
            "content resent is a retry); not appended")


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


def checked_events(items: Iterable[tuple[int, Event | EventError, int]], guard: IdGuard,
                   report: IngestReport, on_error: Callable[[str], None]
                   ) -> Iterator[tuple[int, Event | EventError, int]]:
    """``items`` with each event whose id conflicts (``IdGuard``) reported and left out,
    checked a chunk at a time (one round trip per namespace and chunk)."""
    held: list[tuple[int, Event]] = []

    def flush() -> Iterator[tuple[int, Event | EventError, int]]:
        passed, refused = guard.split(held)
        for lineno, ev in refused:
            report.rejected += 1
            report.conflicts.append(ev.event_id)
            on_error(conflict_message(lineno, ev))
        for lineno, ev in passed:
            yield lineno, ev, 0
        held.clear()

    for lineno, item, nbytes in items:
        if isinstance(item, EventError):
            yield lineno, item, nbytes
            continue
        held.append((lineno, item))
        if nbytes:
            yield lineno, EventError(""), nbytes  # the progress bar's bytes, no event
        if len(held) >= CHUNK:
            yield from flush()
    yield from flush()


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


def _events_read(fh: IO[bytes], on_error: Callable[[str], None], bar: Any,
                 not_after: datetime | None, guard: IdGuard | None,
                 report: IngestReport) -> Iterator[Event | None]:
    """Each line's event, parsed once (and checked by ``guard``: an event it refuses is
    counted in ``report`` and left out), the progress ``bar`` moved on; a bad line is told
    to ``on_error`` and yields None (the caller counts it)."""
    items = iter_events(fh, not_after)
    if guard is not None:
        items = checked_events(items, guard, report, on_error)
    for _lineno, item, nbytes in items:
        if bar is not None:
            bar.update(nbytes)
        if isinstance(item, EventError):
            if str(item):
                on_error(str(item))
                yield None
            continue
        yield item


def _append_pass(r: Store, fh: IO[bytes], report: IngestReport, on_error: Callable[[str], None],
                 bar: Any, on_chunk: Callable[[set[str]], None] | None,
                 appender: Appender, not_after: datetime | None,
                 guard: IdGuard | None) -> None:
    def chunks() -> Iterator[list[tuple[str, bytes]]]:
        chunk: list[tuple[str, bytes]] = []
        for item in _events_read(fh, on_error, bar, not_after, guard, report):
            if item is None:
                report.rejected += 1
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
                bar: Any, not_after: datetime | None, guard: IdGuard | None,
                report: IngestReport) -> int:
    """Parse every line once, spooling the good events encoded; returns how many were bad
    (events refused by ``guard`` are counted in ``report`` and left out, not bad)."""
    bad = 0
    for item in _events_read(fh, on_error, bar, not_after, guard, report):
        if item is None:
            bad += 1
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
           not_after: datetime | None = None, check_ids: bool = True) -> IngestReport:
    """Ingest ``source`` (a path, or ``-`` for stdin) into ``r``; see the module docstring.

    Pass ``report`` to see how far an ingest got when the store fails midway: on
    ``AppendFailed`` its ``appended`` is the exact number of events in the log.
    ``on_chunk`` gets each chunk's namespaces before its append and again after it.
    ``appender`` appends a chunk (``log.append_encoded`` unless the caller waits for
    replicas). ``not_after``: a line whose ``at`` is later is refused (the clock plus the
    allowed skew; None: no bound). ``check_ids``: refuse each event whose ``event_id`` is
    already logged with other content (``IdGuard``), as every other door does; it is
    reported (``event_id_conflict``, in ``rejected`` and ``conflicts``) and left out, and the
    other events are appended.
    """
    report = report if report is not None else IngestReport()
    guard = IdGuard(r) if check_ids else None
    if skip_invalid:
        if source == "-":
            _append_pass(r, sys.stdin.buffer, report, on_error, None, on_chunk, appender,
                         not_after, guard)
            return report
        with open(source, "rb") as fh:
            bar = _progress(os.path.getsize(source), progress)
            _append_pass(r, fh, report, on_error, bar, on_chunk, appender, not_after, guard)
            if bar is not None:
                bar.close()
        return report
    with tempfile.TemporaryFile(prefix="hivemind-ingest-") as spool:
        if source == "-":
            bad = _spool_pass(sys.stdin.buffer, spool, on_error, None, not_after, guard,
                              report)
        else:
            with open(source, "rb") as fh:
                bar = _progress(os.path.getsize(source), progress)
                bad = _spool_pass(fh, spool, on_error, bar, not_after, guard, report)
                if bar is not None:
                    bar.close()
        if bad:
            report.rejected += bad
            return report
        spool.seek(0)
        _append_spool(r, spool, report, on_chunk, appender)
    return report
