"""The embedded store (``memory://``): fakeredis in this process, optionally kept on disk.

``memory://`` (nothing after the scheme) stays in memory and is gone when the process ends.
``memory://PATH`` keeps every append to a source stream (``keys.is_source_stream``: the event
logs, the audit streams, the config history and query embeddings, any future hivemind stream
not named derived) in an append-only file ``PATH/streams.log`` (format: ``store.logfile``),
replayed at start. What it guarantees:

- the hook sits where fakeredis runs each command (plain, in MULTI/EXEC, or ``redis.call``
  inside a Lua script), so no XADD can bypass it;
- one order: an XADD's entry id is assigned and its record queued under one lock
  (``StreamLog.ordering``), and the queue reaches the file in that order, so within every
  stream the file's ids strictly increase and replay re-adds them as given, refusing nothing
  it wrote (with many threads: ids X and X+1 are never written X+1 first);
- durable before the reply: a client write (a pipeline, a transaction, a script) returns
  only once the file holds its records, fsynced. Writers that meet share one write and one
  fsync (group commit); a failed write is undone (truncated) and raises ``StoreError``;
- derived data is not logged: dead letters and the changes stream (the worker rebuilds the
  read model from the replayed log, its checkpoint being gone, so ``sweep`` finds every
  namespace behind), RQ's results and every other RQ key; older files that hold
  ``rq:results:*`` records still open (replay skips them; ``fsck --repair`` drops them);
- a torn last record (a crash mid-write, never acknowledged) is cut off at start, with a
  warning; anything else replay cannot take (unreadable bytes between records, ids out of
  order, as files written before this design can have) stops the start with ``LogDamaged``
  naming the file and ``hivemind fsck --store memory://PATH [--repair]``, and nothing is
  changed;
- one process at a time: the directory is locked (``PATH/lock``), a second opener gets
  ``StoreLocked`` (a ``StoreError``).

Why fakeredis and not a real ``redis-server`` from the package index: the redis-server
wheels found there are unofficial repackagings with irregular releases, and the embedded
store must install on a fresh machine from PyPI alone; fakeredis is already a dependency.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import IO, Any

import fakeredis
import redis
import structlog
from fakeredis._clients._sync import FakeRedisConnection
from fakeredis._socket import FakeSocket

from hivemind_memory.events.errors import LogDamaged, StoreError
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.logfile import (
    BACKUP_PREFIX,
    LOG_NAME,
    TRIM_FIELD,
    Position,
    Record,
    RecordChange,
    check,
    compact_file,
    frame,
    lock_directory,
    parse_id,
    rewrite_file,
    scan,
    trims,
)
from hivemind_memory.projections.store.types import Store

log = structlog.get_logger("hivemind.embedded")

REPLAY_CHUNK = 5000
"""Replayed records per pipeline."""


def is_persistent(url: str) -> bool:
    """True for ``memory://PATH`` (kept on disk), False for plain ``memory://``."""
    return url.startswith("memory://") and len(url) > len("memory://")


def fsck_hint(url: str) -> str:
    """The sentence that sends a user from a refused start to ``hivemind fsck``."""
    return (f"nothing was changed; `hivemind fsck --store {url}` says what is wrong and "
            f"`hivemind fsck --store {url} --repair` repairs what can be repaired without "
            "losing an acknowledged record (the old file is kept beside it)")


COMPACT_EVERY_S = 3600.0
"""Longest a ``memory://PATH`` file keeps the records of entries a trim (the audit retention)
dropped: it is compacted (``logfile.compact_file``) at most this long after, and at every
start."""


def _xadd_parts(args: list[bytes]) -> tuple[bytes | None, list[bytes]]:
    """The ``MINID`` (or None) and the field/value list of an ``XADD key [NOMKSTREAM]
    [MAXLEN|MINID [=|~] n] [LIMIT c] id field value ...`` argument list (``args[0]`` is the
    key), read in one pass."""
    minid: bytes | None = None
    i = 1
    while i < len(args):
        word = args[i].upper()
        if word == b"NOMKSTREAM":
            i += 1
        elif word in (b"MAXLEN", b"MINID"):
            j = i + 2 if args[i + 1] in (b"=", b"~") else i + 1
            if word == b"MINID":
                minid = args[j]
            i = j + 1
        elif word == b"LIMIT":
            i += 2
        else:
            return minid, list(args[i + 1:])  # args[i] is the id
    return minid, []


def replay_args(rec: Record) -> list[bytes]:
    """The XADD arguments that replay ``rec``: its fields, and the trim it made (``MINID =``)
    when it carries ``TRIM_FIELD``."""
    fields = list(rec.fields)
    trim: list[bytes] = []
    if len(fields) >= 2 and fields[-2] == TRIM_FIELD:
        trim = [b"MINID", b"=", fields[-1]]
        del fields[-2:]
    return [rec.key, *trim, rec.entry_id, *fields]


class StreamLog:
    """The append-only file of one ``memory://PATH`` store.

    Records are queued in entry-id order (``queue``, under ``ordering``, held around the
    XADD that made the id) and written in queue order (``sync``): whoever syncs first writes
    and fsyncs everything queued so far, the others find their records already durable."""

    def __init__(self, directory: Path, url: str | None = None) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / LOG_NAME
        self.url = url or f"memory://{directory}"
        self._lock_fh: IO[bytes] = lock_directory(directory)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._size = os.fstat(self._fd).st_size
        """Bytes of the file that are whole, written records."""
        self.ordering = threading.Lock()
        """Held around an XADD and the ``queue`` of its record: ids and queue share one order.
        (fakeredis runs each command under its server lock too, so this one is uncontended
        there; holding our own makes the order a property of this module, not of fakeredis's
        internals.)"""
        self._writing = threading.Lock()
        self._queued: list[bytes] = []
        self._seq = 0
        """Records queued so far (the sequence number of the last one)."""
        self._durable = 0
        """Records written and fsynced so far."""
        self._broken: str | None = None
        self._oldest: dict[bytes, Position] = {}
        """Per stream key, the id of its oldest record in the file."""
        self._stale = False
        """The file holds records a later trim dropped (``compact``)."""
        self._compacted_at = time.monotonic()

    def _note_records(self, records: list[Record]) -> None:
        """Learn the oldest record of each key and whether any was trimmed since."""
        self._oldest = {}
        for rec in records:
            self._oldest.setdefault(rec.key, rec.position)
        self._stale = any(m > self._oldest.get(k, m) for k, m in trims(records).items())

    def load(self) -> list[Record]:
        """Every record of the file, in order, once it is known to replay: a torn tail is cut
        off (and logged); anything else raises ``LogDamaged``."""
        data = Path(self.path).read_bytes()
        sc = scan(data)
        found = check(sc, str(self.path))
        if not found.openable:
            raise LogDamaged(f"cannot replay the embedded store's log {self.path}: "
                             + "; ".join(found.problems) + "; " + fsck_hint(self.url))
        if sc.tail is not None:
            log.warning("embedded_log_torn_tail", path=str(self.path), kept_bytes=sc.tail.start,
                        dropped_bytes=sc.tail.size)
            with self._writing:
                os.ftruncate(self._fd, sc.tail.start)
                os.fsync(self._fd)
                self._size = sc.tail.start
        self._note_records(sc.records)
        if self._stale:  # at every start: the trimmed records go (replay is the same)
            with self._writing:
                self._compact()
        return sc.records

    def queue(self, key: bytes, entry_id: bytes, fields: list[bytes]) -> int:
        """Queue the record of an XADD that just ran; the caller holds ``ordering`` since
        before that XADD. Returns its sequence number (for ``sync``)."""
        self._queued.append(frame(key, entry_id, fields))
        self._seq += 1
        if len(fields) >= 2 and fields[-2] == TRIM_FIELD:
            m = parse_id(fields[-1])
            oldest = self._oldest.get(key)
            if m is not None and oldest is not None and m > oldest:
                self._stale = True
        if key not in self._oldest and (p := parse_id(entry_id)) is not None:
            self._oldest[key] = p
        return self._seq

    def append(self, key: bytes, entry_id: bytes, fields: list[bytes]) -> None:
        """Queue one record and make it durable (ids must come in order: for tests/tools)."""
        with self.ordering:
            seq = self.queue(key, entry_id, fields)
        self.sync(seq)

    def sync(self, upto: int) -> None:
        """Return once records ``1..upto`` are written and fsynced."""
        if upto <= self._durable:
            return
        with self._writing:
            if upto <= self._durable:
                return  # another writer's fsync covered ours
            self._flush()
            if self._stale and time.monotonic() - self._compacted_at >= COMPACT_EVERY_S:
                self._compact()

    def _compact(self) -> int:
        """Drop the records of trimmed entries from the file and the backups ``fsck`` kept
        beside it, crash-safely (``logfile.compact_file``); the caller holds ``_writing`` and
        everything queued is written. A failure is logged and retried at the next chance
        (the file stays whole either way). How many records were dropped."""
        n = 0
        try:
            with self.ordering:
                n = compact_file(self.path)
                for backup in sorted(self.path.parent.glob(BACKUP_PREFIX + "*")):
                    n += compact_file(backup)
                os.close(self._fd)
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND, 0o644)
                self._size = os.fstat(self._fd).st_size
                self._note_records(scan(self.path.read_bytes()).records)
        except OSError as exc:
            log.warning("embedded_log_compaction_failed", path=str(self.path), error=str(exc))
        self._compacted_at = time.monotonic()
        if n:
            log.info("embedded_log_compacted", path=str(self.path), records_dropped=n)
        return n

    def rewrite(self, change: RecordChange) -> int:
        """Rewrite the records ``change`` changes (an erasure's redaction), in the file and in
        the backups ``fsck`` kept beside it, crash-safely (``logfile.rewrite_file``). Appends
        wait meanwhile: records queued before are written first, then the file is replaced
        and reopened. How many records changed."""
        with self._writing:
            self._flush()
            with self.ordering:
                try:
                    n = rewrite_file(self.path, change)
                    for backup in sorted(self.path.parent.glob(BACKUP_PREFIX + "*")):
                        n += rewrite_file(backup, change)
                finally:  # the file may have been replaced: append to the one at the path
                    os.close(self._fd)
                    self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND, 0o644)
                    self._size = os.fstat(self._fd).st_size
        return n

    def _flush(self) -> None:
        """Write and fsync every queued record (the caller holds ``_writing``). A failed
        write is cut back and queued again (``_undo``) and raised as ``StoreError``; a log
        that could not be cut back refuses every write."""
        if self._broken is not None:
            raise StoreError(self._broken)
        with self.ordering:
            chunk, self._queued = self._queued, []
            last = self._seq
        try:
            self._write(chunk, last)
        except OSError as exc:
            self._undo(chunk, exc)
            raise StoreError(f"cannot write the embedded store's log {self.path}: "
                             f"{exc}") from exc

    def _write(self, chunk: list[bytes], last: int) -> None:
        """Write the queued records ``chunk`` (up to record ``last``) and fsync them (the
        caller holds ``_writing``; ``OSError`` leaves the size and the durable mark as they
        were, for the caller to cut back)."""
        data = b"".join(chunk)
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]
        os.fsync(self._fd)
        self._size += len(data)
        self._durable = last

    def _undo(self, chunk: list[bytes], exc: OSError) -> None:
        """A write failed part-way: cut the file back to its whole records and queue the
        chunk again (the next sync retries it); if even that fails, refuse every later
        write (the file would have a hole)."""
        try:
            os.ftruncate(self._fd, self._size)
        except OSError as again:
            self._broken = (f"the embedded store's log {self.path} could not be cut back after "
                            f"a failed write ({exc}; then {again}); restart the process and "
                            f"run `hivemind fsck --store {self.url}`")
            return
        with self.ordering:
            self._queued[:0] = chunk

    def close(self) -> None:
        """Close the file once no write is under way; a write after that (a thread of the
        process still running, a worker its owner stopped waiting for) is refused: its
        descriptor number may belong to another file by then."""
        with self._writing:
            self._broken = (f"the embedded store's log {self.path} is closed (its store was "
                            "released); open the store again")
            os.close(self._fd)
        self._lock_fh.close()


class _LoggingSocket(FakeSocket):
    """A fakeredis socket that logs every source-stream XADD into the server's log, in the
    order the XADDs got their ids, before the client reads the reply."""

    stream_log: StreamLog
    logged: int
    """Sequence number of the last record this connection queued."""

    def _run_command(self, func: Any, sig: Any, args: list[Any], from_script: bool) -> Any:
        if sig.name != "xadd" or not args or not keys.is_source_stream(bytes(args[0])):
            return super()._run_command(func, sig, args, from_script)
        slog = self.stream_log
        with slog.ordering:  # the id and the record's place in the file: one order
            result = super()._run_command(func, sig, args, from_script)
            if isinstance(result, bytes):
                raw = [bytes(a) for a in args]
                minid, fields = _xadd_parts(raw)
                if minid is not None:
                    fields += [TRIM_FIELD, minid]
                self.logged = slog.queue(raw[0], result, fields)
        return result

    def sendall(self, data: Any) -> None:
        try:
            super().sendall(data)  # runs the commands; their replies wait in the socket
        finally:
            self.stream_log.sync(self.logged)


class _LoggingConnection(FakeRedisConnection):
    stream_log: StreamLog

    def _connect(self) -> FakeSocket:
        sock = super()._connect()
        sock.__class__ = _LoggingSocket
        setattr(sock, "stream_log", self.stream_log)  # noqa: B010 (set on the swapped class)
        setattr(sock, "logged", 0)  # noqa: B010
        return sock


def stream_log_of(r: Store) -> StreamLog | None:
    """The file a ``memory://PATH`` client's writes are logged in (None: any other store)."""
    pool = getattr(r, "connection_pool", None)
    cls = getattr(pool, "connection_class", None)
    slog = getattr(cls, "stream_log", None)
    return slog if isinstance(slog, StreamLog) else None


def fake_server() -> fakeredis.FakeServer:
    """A new fakeredis server whose database 0 is made already. fakeredis makes a database
    when a first connection to it opens, outside its lock (``FakeServer.dbs`` is a
    defaultdict): two threads whose first connections open at once could each make one, and
    the writes made in the one replaced were lost (two checked writers of the same note id
    both "won", one of their entries gone). Made here, before any thread connects."""
    server = fakeredis.FakeServer()
    _ = server.dbs[0]
    return server


class Embedded:
    """One embedded server of this process, and its log when it is kept on disk."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.server = fake_server()
        self.stream_log: StreamLog | None = None
        if is_persistent(url):
            self.stream_log = StreamLog(Path(url[len("memory://"):]).expanduser(), url)
            try:
                self._replay()
            except BaseException:
                self.stream_log.close()  # unlocked: fsck (or a retry) may open it
                raise

    def _replay(self) -> None:
        assert self.stream_log is not None
        records = self.stream_log.load()
        r = fakeredis.FakeRedis(server=self.server)
        p = r.pipeline(transaction=False)
        nss: set[bytes] = set()
        n = skipped = 0
        events = keys.PREFIX.encode() + b":{"
        try:
            for rec in records:
                if not keys.is_source_stream(rec.key):
                    skipped += 1  # written by an older version (rq:results:*): derived
                    continue
                p.execute_command("XADD", *replay_args(rec))  # type: ignore[no-untyped-call]
                if rec.key.startswith(events) and rec.key.endswith(b"}:events"):
                    nss.add(rec.key[len(events): -len(b"}:events")])
                n += 1
                if n % REPLAY_CHUNK == 0:
                    p.execute()
            if nss:
                p.sadd(keys.NAMESPACES, *sorted(nss))
            p.execute()
        except redis.ResponseError as exc:  # checked before, so not expected: still say where
            raise LogDamaged(f"cannot replay the embedded store's log {self.stream_log.path}: "
                             f"{exc}; {fsck_hint(self.url)}") from exc
        log.info("embedded_replayed", path=str(self.stream_log.path), entries=n,
                 namespaces=len(nss), skipped_derived=skipped)

    def client(self) -> Store:
        """A client of this server (its writes are logged when the store is kept on disk)."""
        if self.stream_log is None:
            return fakeredis.FakeRedis(server=self.server)
        slog = self.stream_log

        class Conn(_LoggingConnection):
            stream_log = slog

        return fakeredis.FakeRedis(server=self.server, connection_class=Conn)

    def close(self) -> None:
        if self.stream_log is not None:
            self.stream_log.close()
