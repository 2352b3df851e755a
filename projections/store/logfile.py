"""``PATH/streams.log``, the file of a ``memory://PATH`` store: its format, how it is read and
checked, how a damaged one is repaired (``hivemind fsck``), and the directory lock.

Format (the same since the first version, so every existing store still opens): records one
after the other, each a header ``>II`` (payload length, CRC-32 of the payload) and a msgpack
payload ``[key, entry id, [field, value, ...]]`` (all bytes); the entry id is the one the
server gave the XADD. What a replayable file is:

- framing: every byte belongs to a whole record whose CRC matches and whose payload decodes,
  with an entry id ``ms-seq`` above ``0-0``;
- order: within each key the entry ids strictly increase (a replay re-adds them as given,
  and a stream refuses an id at or below its top);
- only source streams (``keys.is_source_stream``): records of derived keys (RQ's
  ``rq:results:*``, written by older versions) are skipped by replay, dropped by a repair.

A read tells apart a torn tail (bytes after the last whole record with no record after them:
a write cut short by a crash; its records were never acknowledged) from unreadable bytes
*between* records (something damaged an acknowledged record: opening refuses, ``fsck`` says
where). ``scan``, ``check`` and ``repaired`` are pure (bytes in, findings out); ``fsck``
reads, locks and rewrites the file.
"""

from __future__ import annotations

import fcntl
import os
import re
import struct
import zlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import msgspec

from hivemind_memory.events.errors import StoreError, StoreLocked
from hivemind_memory.projections.store.keys import is_source_stream

LOG_NAME = "streams.log"
"""The append-only file of stream appends under ``PATH``."""
LOCK_NAME = "lock"
"""The file under ``PATH`` locked by the one process that has the store open."""
BACKUP_PREFIX = f"{LOG_NAME}.before-fsck-"
"""A repair keeps the file it replaced as ``streams.log.before-fsck-N``."""
EXAMPLES = 5
"""How many examples of each problem a report lists."""

HEADER = struct.Struct(">II")
"""Record header: payload length, CRC-32 of the payload."""
_ARRAY3 = 0x93  # msgpack fixarray of 3: the first payload byte of every record
_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder(tuple[bytes, bytes, list[bytes]])
_ID = re.compile(rb"([0-9]{1,20})-([0-9]{1,20})")

Position = tuple[int, int]


def frame(key: bytes, entry_id: bytes, fields: list[bytes]) -> bytes:
    """One record as the file holds it (header + payload)."""
    body = _enc.encode((key, entry_id, fields))
    return HEADER.pack(len(body), zlib.crc32(body)) + body


def parse_id(entry_id: bytes) -> Position | None:
    """``b"ms-seq"`` as integers, or None when it is not a stream entry id."""
    m = _ID.fullmatch(entry_id)
    return None if m is None else (int(m.group(1)), int(m.group(2)))


@dataclass(frozen=True, slots=True)
class Record:
    """One whole record of the file."""

    offset: int
    end: int
    key: bytes
    entry_id: bytes
    position: Position
    fields: list[bytes]


@dataclass(frozen=True, slots=True)
class Gap:
    """Bytes ``[start, end)`` of the file that are not part of a whole record."""

    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Scan:
    """The file read record by record."""

    records: list[Record]
    gaps: list[Gap]
    """Unreadable bytes followed by whole records (damage, not a crash)."""
    tail: Gap | None
    """Unreadable bytes at the end with no record after them (a torn write)."""
    size: int


def _record_at(data: bytes, pos: int) -> Record | None:
    if pos + HEADER.size > len(data):
        return None
    n, crc = HEADER.unpack_from(data, pos)
    start, end = pos + HEADER.size, pos + HEADER.size + n
    if end > len(data) or zlib.crc32(data[start:end]) != crc:
        return None
    try:
        key, entry_id, fields = _dec.decode(data[start:end])
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    p = parse_id(entry_id)
    if not key or p is None or p == (0, 0) or len(fields) % 2:
        return None
    return Record(pos, end, key, entry_id, p, fields)


def _next_record(data: bytes, after: int) -> Record | None:
    """The first whole record starting after offset ``after`` (a payload starts with 0x93)."""
    i = data.find(_ARRAY3, after + HEADER.size + 1)
    while i != -1:
        rec = _record_at(data, i - HEADER.size)
        if rec is not None:
            return rec
        i = data.find(_ARRAY3, i + 1)
    return None


def scan(data: bytes) -> Scan:
    """Every whole record in file order, and the bytes that are not."""
    records: list[Record] = []
    gaps: list[Gap] = []
    pos = 0
    while pos < len(data):
        rec = _record_at(data, pos)
        if rec is None:
            rec = _next_record(data, pos)
            if rec is None:
                return Scan(records, gaps, Gap(pos, len(data)), len(data))
            gaps.append(Gap(pos, rec.offset))
        records.append(rec)
        pos = rec.end
    return Scan(records, gaps, None, len(data))


@dataclass(frozen=True)
class Misordered:
    """A record whose entry id is not above an earlier one of the same key."""

    key: str
    entry_id: str
    after_id: str
    """The highest id of that key before it in the file."""
    offset: int


@dataclass
class Findings:
    """What ``check`` found; ``problems`` is empty for a file that is replayable as it is."""

    path: str
    size: int
    records: int
    source_records: int
    keys: int
    derived_records: int
    derived_bytes: int
    derived_kinds: dict[str, int]
    """Derived records by key family (``rq:results``, ...)."""
    torn_tail_bytes: int
    torn_tail_offset: int | None
    unreadable: list[tuple[int, int]]
    """``(offset, bytes)`` of each unreadable region between whole records."""
    unreadable_bytes: int
    misordered: int
    misordered_keys: int
    misordered_examples: list[Misordered]
    duplicates: int
    """Source records that repeat an earlier record exactly (same key, id and fields)."""
    conflicts: list[tuple[str, str]]
    """``(key, id)`` held by two records with different fields (no repair can keep both)."""
    problems: list[str] = field(default_factory=list)

    @property
    def openable(self) -> bool:
        """Replay accepts it (a torn tail is cut at open)."""
        return not (self.unreadable or self.misordered or self.conflicts)

    def repairable(self, drop_unreadable: bool) -> bool:
        """``repaired`` can make it clean (dropping unreadable bytes only when allowed)."""
        return not self.conflicts and (drop_unreadable or not self.unreadable)


def _text(b: bytes) -> str:
    return b.decode("utf-8", "backslashreplace")


def _family(key: bytes) -> str:
    """``rq:results:<job>`` -> ``rq:results``; ``hm:{ns}:dead`` -> ``hm:{*}:dead``."""
    if key.startswith(b"hm:{") and b"}:" in key:
        return "hm:{*}:" + _text(key.partition(b"}:")[2])
    return ":".join(_text(key).split(":")[:2])


def check(sc: Scan, path: str = "") -> Findings:
    """Framing, CRC and per-key entry-id order of a scanned file."""
    derived = [r for r in sc.records if not is_source_stream(r.key)]
    top: dict[bytes, Position] = {}
    top_id: dict[bytes, bytes] = {}
    bad_keys: set[bytes] = set()
    examples: list[Misordered] = []
    misordered = duplicates = 0
    conflicts: list[tuple[str, str]] = []
    for r in sc.records:
        if not is_source_stream(r.key):
            continue
        if r.key in top and r.position <= top[r.key]:
            misordered += 1
            bad_keys.add(r.key)
            if len(examples) < EXAMPLES:
                examples.append(Misordered(_text(r.key), _text(r.entry_id),
                                           _text(top_id[r.key]), r.offset))
        else:
            top[r.key], top_id[r.key] = r.position, r.entry_id
    if bad_keys:  # a repeated id is out of order too: only those streams are indexed
        seen: dict[tuple[bytes, Position], list[bytes]] = {}
        for r in sc.records:
            if r.key not in bad_keys:
                continue
            earlier = seen.setdefault((r.key, r.position), r.fields)
            if earlier is r.fields:
                continue
            if earlier == r.fields:
                duplicates += 1
            else:
                conflicts.append((_text(r.key), _text(r.entry_id)))
    f = Findings(
        path=path, size=sc.size, records=len(sc.records),
        source_records=len(sc.records) - len(derived), keys=len(top),
        derived_records=len(derived), derived_bytes=sum(r.end - r.offset for r in derived),
        derived_kinds=dict(sorted(Counter(_family(r.key) for r in derived).items())),
        torn_tail_bytes=sc.tail.size if sc.tail else 0,
        torn_tail_offset=sc.tail.start if sc.tail else None,
        unreadable=[(g.start, g.size) for g in sc.gaps],
        unreadable_bytes=sum(g.size for g in sc.gaps),
        misordered=misordered, misordered_keys=len(bad_keys), misordered_examples=examples,
        duplicates=duplicates, conflicts=conflicts)
    f.problems = _problems(f)
    return f


def _problems(f: Findings) -> list[str]:
    out: list[str] = []
    if f.unreadable:
        where = ", ".join(f"{n} bytes at offset {o}" for o, n in f.unreadable[:EXAMPLES])
        out.append(f"unreadable: {len(f.unreadable)} damaged region(s) between whole records "
                   f"({where}); the records there are lost unless a backup has them")
    if f.torn_tail_bytes:
        out.append(f"torn tail: {f.torn_tail_bytes} bytes after the last whole record (offset "
                   f"{f.torn_tail_offset}), a write cut short by a crash, never acknowledged")
    if f.misordered:
        ex = f.misordered_examples[0]
        out.append(f"order: {f.misordered} record(s) of {f.misordered_keys} stream(s) not above "
                   f"an earlier id of their stream (replay refuses them), e.g. {ex.key} "
                   f"{ex.entry_id} after {ex.after_id} at offset {ex.offset}"
                   + (f"; {f.duplicates} of them exact duplicates" if f.duplicates else ""))
    if f.conflicts:
        key, eid = f.conflicts[0]
        out.append(f"conflict: {len(f.conflicts)} entry id(s) held by two records with "
                   f"different fields, e.g. {key} {eid}; no repair can keep both")
    return out


class Unrepairable(StoreError):
    """A repair would lose a record (unreadable bytes not allowed to go, or a conflict)."""


def repaired(data: bytes, sc: Scan, drop_unreadable: bool = False) -> bytes:
    """The file replay wants: source records only, each key's records in id order (in the
    slots that key held, so the interleaving of keys stays), exact duplicates once, a torn
    tail cut, and, only with ``drop_unreadable``, unreadable regions left out. Each kept
    record keeps its bytes. Raises ``Unrepairable`` otherwise."""
    f = check(sc)
    if f.conflicts:
        raise Unrepairable(_problems(f)[-1])
    if f.unreadable and not drop_unreadable:
        raise Unrepairable(f"{len(f.unreadable)} unreadable region(s) between records "
                           f"({f.unreadable_bytes} bytes): repairing means losing whatever "
                           "records they held (--drop-unreadable)")
    kept: list[Record] = []
    once: set[tuple[bytes, Position]] = set()
    for r in sc.records:
        if is_source_stream(r.key) and (r.key, r.position) not in once:
            once.add((r.key, r.position))
            kept.append(r)
    slots: dict[bytes, list[int]] = {}
    for i, r in enumerate(kept):
        slots.setdefault(r.key, []).append(i)
    out: list[Record | None] = [None] * len(kept)
    for idx in slots.values():
        for i, r in zip(idx, sorted((kept[i] for i in idx), key=lambda r: r.position),
                        strict=True):
            out[i] = r
    return b"".join(data[r.offset:r.end] for r in out if r is not None)


def lock_directory(directory: Path) -> IO[bytes]:
    """Lock ``directory`` for this process (``PATH/lock``, released when the returned file
    is closed); ``StoreLocked`` when another process holds it."""
    fh: IO[bytes] = open(directory / LOCK_NAME, "ab")  # noqa: SIM115 (held until close)
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        fh.close()
        raise StoreLocked(f"embedded store {directory} is in use by another process") from exc
    return fh


def fsync_dir(directory: Path) -> None:
    """Make a rename or a new file in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


RecordChange = Callable[[bytes, list[bytes]], list[bytes] | None]
"""A rewrite of one record: ``(key, fields)`` -> its new fields, or None (unchanged)."""


def rewritten(data: bytes, change: RecordChange) -> tuple[bytes, int]:
    """``data`` (a log file's bytes) with every record ``change`` changes framed anew (same
    key and entry id, new fields), every other byte kept; and how many records changed."""
    sc = scan(data)
    out: list[bytes] = []
    pos = n = 0
    for rec in sc.records:
        new = change(rec.key, rec.fields)
        if new is None:
            continue
        out += [data[pos:rec.offset], frame(rec.key, rec.entry_id, new)]
        pos = rec.end
        n += 1
    out.append(data[pos:])
    return b"".join(out), n


TRIM_FIELD = b"\x00minid"
"""Pseudo-field a logged XADD record carries when the XADD trimmed its stream (``MINID``, the
audit retention): its value is the MINID. Replay strips it and trims again, exactly, so an
entry dropped before a restart stays dropped. Never a field of a stream entry."""


def trims(records: list[Record]) -> dict[bytes, Position]:
    """Per stream key, the greatest ``MINID`` its records trimmed it to (``TRIM_FIELD``)."""
    out: dict[bytes, Position] = {}
    for rec in records:
        f = rec.fields
        if (len(f) >= 2 and f[-2] == TRIM_FIELD and (m := parse_id(f[-1])) is not None
                and m > out.get(rec.key, (0, 0))):
            out[rec.key] = m
    return out


def compacted(data: bytes) -> tuple[bytes, int]:
    """``data`` (a log file's bytes) without the records a later record of their stream
    trimmed (entry id below the greatest ``MINID`` logged for the key): replaying either
    gives the same streams (the record that trimmed them is newer than its MINID, so it
    stays, and replays the trim). Every other byte kept; how many records were dropped."""
    sc = scan(data)
    cut = trims(sc.records)
    if not cut:
        return data, 0
    out: list[bytes] = []
    pos = n = 0
    for rec in sc.records:
        m = cut.get(rec.key)
        if m is None or rec.position >= m:
            continue
        out.append(data[pos:rec.offset])
        pos = rec.end
        n += 1
    out.append(data[pos:])
    return b"".join(out), n


def compact_file(path: Path) -> int:
    """Drop the trimmed records of the log file ``path`` (``compacted``), crash-safely as
    ``rewrite_file``. How many records were dropped (0: the file was left as it is)."""
    new, n = compacted(path.read_bytes())
    if n:
        _replace(path, new)
    return n


def rewrite_file(path: Path, change: RecordChange) -> int:
    """Rewrite the log file ``path`` with ``rewritten``, crash-safely: a new file beside it,
    fsynced, renamed over it, the directory fsynced (a crash leaves the old file or the new
    one, whole). How many records changed (0: the file was left as it is)."""
    data = path.read_bytes()
    new, n = rewritten(data, change)
    if n == 0:
        return 0
    _replace(path, new)
    return n


def _replace(path: Path, new: bytes) -> None:
    """Put ``new`` in place of the file ``path``: written beside it, fsynced, renamed over
    it, the directory fsynced."""
    tmp = path.with_name(path.name + ".erase-tmp")
    with open(tmp, "wb") as fh:
        fh.write(new)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


@dataclass
class FsckReport:
    """What ``fsck`` found, and did."""

    found: Findings
    repaired: bool = False
    backup: str | None = None
    """Where the file a repair replaced is kept."""
    written_records: int = 0
    written_bytes: int = 0
    after: Findings | None = None
    """The check of the repaired file."""
    refused: str | None = None
    """Why a requested repair was not done."""

    @property
    def ok(self) -> bool:
        """Clean as found, or repaired and clean now."""
        return not (self.after or self.found).problems


def _backup_path(directory: Path) -> Path:
    n = 1
    while (directory / f"{BACKUP_PREFIX}{n}").exists():
        n += 1
    return directory / f"{BACKUP_PREFIX}{n}"


def fsck(directory: Path, repair: bool = False, drop_unreadable: bool = False) -> FsckReport:
    """Check ``directory``'s log under the store's lock; with ``repair``, replace it by
    ``repaired`` (atomically; the old file is kept beside it) when it has a problem or holds
    derived records. ``StoreError`` when there is no store there or it is in use."""
    path = directory / LOG_NAME
    if not path.is_file():
        raise StoreError(f"no embedded store log at {path}")
    lock = lock_directory(directory)
    try:
        data = path.read_bytes()
        sc = scan(data)
        report = FsckReport(check(sc, str(path)))
        if not repair or not (report.found.problems or report.found.derived_records):
            return report
        try:
            new = repaired(data, sc, drop_unreadable)
        except Unrepairable as exc:
            report.refused = str(exc)
            return report
        tmp = directory / f"{LOG_NAME}.fsck-tmp"
        with open(tmp, "wb") as fh:
            fh.write(new)
            fh.flush()
            os.fsync(fh.fileno())
        backup = _backup_path(directory)
        os.link(path, backup)
        os.replace(tmp, path)
        fsync_dir(directory)
        after = scan(new)
        report.repaired, report.backup = True, str(backup)
        report.written_records, report.written_bytes = len(after.records), len(new)
        report.after = check(after, str(path))
        return report
    finally:
        lock.close()
