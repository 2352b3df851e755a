"""The embedded store (``memory://``): fakeredis in this process, optionally kept on disk.

``memory://`` (nothing after the scheme) stays in memory and is gone when the process ends.
``memory://PATH`` keeps every stream append (the event logs, the audit streams, any future
source stream) in an append-only file ``PATH/streams.log``, replayed at start:

- the hook sits where fakeredis runs each command (plain, in MULTI/EXEC, or ``redis.call``
  inside a Lua script), so no XADD can bypass it;
- each record is ``[key, entry id, [field, value, ...]]`` (msgpack), framed by its length and
  CRC-32; the entry id is the one the server gave, so the replayed streams are identical;
- the records of one client write (a pipeline, a transaction, a script) are written and
  fsynced before the client sees the reply;
- projection outputs (dead letters, the changes stream) are derived data, not logged: after
  a restart the worker rebuilds the read model from the replayed log (its checkpoint is gone,
  so ``sweep`` finds every namespace behind);
- a torn last record (a crash mid-write) is cut off at start, with a warning;
- one process at a time: the directory is locked (``PATH/lock``), a second opener gets
  ``StoreLocked`` (a ``StoreError``).

Why fakeredis and not a real ``redis-server`` from the package index: the redis-server
wheels found there are unofficial repackagings with irregular releases, and the embedded
store must install on a fresh machine from PyPI alone; fakeredis is already a dependency.
"""

from __future__ import annotations

import fcntl
import os
import struct
import threading
import zlib
from pathlib import Path
from typing import IO, Any

import fakeredis
import msgspec
import structlog
from fakeredis._clients._sync import FakeRedisConnection
from fakeredis._socket import FakeSocket

from hivemind_memory.events.errors import StoreLocked
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.types import Store

log = structlog.get_logger("hivemind.embedded")

LOG_NAME = "streams.log"
"""The append-only file of stream appends under ``PATH``."""
DERIVED_STREAM_SUFFIXES = (b":dead", b":changes")
"""Stream keys the worker derives from the log (``keys.dead``, ``keys.changes``): not logged,
a restart rebuilds them."""
_HEADER = struct.Struct(">II")  # payload length, CRC-32 of the payload
_enc = msgspec.msgpack.Encoder()
_dec = msgspec.msgpack.Decoder(tuple[bytes, bytes, list[bytes]])


def is_persistent(url: str) -> bool:
    """True for ``memory://PATH`` (kept on disk), False for plain ``memory://``."""
    return url.startswith("memory://") and len(url) > len("memory://")


def _xadd_fields(args: list[bytes]) -> list[bytes]:
    """The field/value list of an ``XADD key [NOMKSTREAM] [MAXLEN|MINID [=|~] n [LIMIT c]]
    id field value ...`` argument list (``args[0]`` is the key)."""
    i = 1
    while i < len(args):
        word = args[i].upper()
        if word == b"NOMKSTREAM":
            i += 1
        elif word in (b"MAXLEN", b"MINID"):
            i += 2 if args[i + 1] not in (b"=", b"~") else 3
        elif word == b"LIMIT":
            i += 2
        else:
            return list(args[i + 1:])  # args[i] is the id
    return []


class StreamLog:
    """The append-only file of one ``memory://PATH`` store (records buffered per thread,
    written and fsynced once per client write)."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / LOG_NAME
        self._lock_fh: IO[bytes] = open(directory / "lock", "ab")  # noqa: SIM115
        try:
            fcntl.flock(self._lock_fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            self._lock_fh.close()
            raise StoreLocked(f"embedded store {directory} is in use by another process") from exc
        self._fh: IO[bytes] = open(self.path, "ab")  # noqa: SIM115
        self._mutex = threading.Lock()
        self._pending = threading.local()

    def records(self) -> list[tuple[bytes, bytes, list[bytes]]]:
        """Every whole record in order; a torn tail is cut off (and logged)."""
        data = self.path.read_bytes()
        out: list[tuple[bytes, bytes, list[bytes]]] = []
        pos = 0
        while pos < len(data):
            if pos + _HEADER.size > len(data):
                break
            n, crc = _HEADER.unpack_from(data, pos)
            body = data[pos + _HEADER.size: pos + _HEADER.size + n]
            if len(body) < n or zlib.crc32(body) != crc:
                break
            out.append(_dec.decode(body))
            pos += _HEADER.size + n
        if pos < len(data):
            log.warning("embedded_log_torn_tail", path=str(self.path), kept_bytes=pos,
                        dropped_bytes=len(data) - pos)
            with self._mutex:
                self._fh.truncate(pos)
                self._fh.flush()
                os.fsync(self._fh.fileno())
        return out

    def stage(self, key: bytes, entry_id: bytes, fields: list[bytes]) -> None:
        """Buffer one stream append of the current client write."""
        body = _enc.encode((key, entry_id, fields))
        buf: list[bytes] | None = getattr(self._pending, "buf", None)
        if buf is None:
            buf = self._pending.buf = []
        buf.append(_HEADER.pack(len(body), zlib.crc32(body)) + body)

    def flush(self) -> None:
        """Write and fsync what the current client write appended."""
        buf: list[bytes] | None = getattr(self._pending, "buf", None)
        if not buf:
            return
        data = b"".join(buf)
        buf.clear()
        with self._mutex:
            self._fh.write(data)
            self._fh.flush()
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        self._fh.close()
        self._lock_fh.close()


class _LoggingSocket(FakeSocket):
    """A fakeredis socket that stages every source-stream XADD into the server's log."""

    stream_log: StreamLog

    def _run_command(self, func: Any, sig: Any, args: list[Any], from_script: bool) -> Any:
        result = super()._run_command(func, sig, args, from_script)
        if (sig.name == "xadd" and isinstance(result, bytes)
                and not bytes(args[0]).endswith(DERIVED_STREAM_SUFFIXES)):
            self.stream_log.stage(bytes(args[0]), result,
                                  [bytes(a) for a in _xadd_fields(list(args))])
        return result

    def sendall(self, data: Any) -> None:
        try:
            super().sendall(data)
        finally:
            self.stream_log.flush()


class _LoggingConnection(FakeRedisConnection):
    stream_log: StreamLog

    def _connect(self) -> FakeSocket:
        sock = super()._connect()
        sock.__class__ = _LoggingSocket
        setattr(sock, "stream_log", self.stream_log)  # noqa: B010 (set on the swapped class)
        return sock


class Embedded:
    """One embedded server of this process, and its log when it is kept on disk."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.server = fakeredis.FakeServer()
        self.stream_log: StreamLog | None = None
        if is_persistent(url):
            self.stream_log = StreamLog(Path(url[len("memory://"):]).expanduser())
            self._replay()

    def _replay(self) -> None:
        assert self.stream_log is not None
        r = fakeredis.FakeRedis(server=self.server)
        p = r.pipeline(transaction=False)
        nss: set[bytes] = set()
        n = 0
        for key, entry_id, fields in self.stream_log.records():
            p.xadd(key, dict(zip(fields[::2], fields[1::2], strict=True)), id=entry_id)
            if key.endswith(b":events") and key.startswith(keys.PREFIX.encode() + b":{"):
                nss.add(key[len(keys.PREFIX) + 2: -len(b"}:events")])
            n += 1
            if n % 5000 == 0:
                p.execute()
        if nss:
            p.sadd(keys.NAMESPACES, *sorted(nss))
        p.execute()
        log.info("embedded_replayed", path=str(self.stream_log.path), entries=n,
                 namespaces=len(nss))

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
