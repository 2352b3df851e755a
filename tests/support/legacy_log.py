"""The ``streams.log`` writer of hivemind up to b30edac, kept to make logs as that version
made them (``projections/store/embedded.py`` then: records staged per thread while the
command ran, written under a mutex when the client write ended, so two threads could write
ids X+1 before X). Only what wrote the file is here, verbatim; the directory lock and the
reader are left out. Tests use it to build broken logs that ``hivemind fsck`` must repair."""

from __future__ import annotations

import os
import struct
import threading
import zlib
from pathlib import Path
from typing import IO

import msgspec

LOG_NAME = "streams.log"
_HEADER = struct.Struct(">II")  # payload length, CRC-32 of the payload
_enc = msgspec.msgpack.Encoder()


class LegacyStreamLog:
    """The old writer: ``stage`` buffers a record per thread, ``flush`` writes the thread's
    buffer and fsyncs."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / LOG_NAME
        self._fh: IO[bytes] = open(self.path, "ab")  # noqa: SIM115
        self._mutex = threading.Lock()
        self._pending = threading.local()

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


Append = tuple[bytes, list[bytes]]
"""A stream key and the field/value list of one XADD."""


def race(directory: Path, pairs: list[tuple[Append, Append]]) -> list[tuple[bytes, bytes,
                                                                             list[bytes]]]:
    """The old writer's race, forced for each pair ``(a, b)``: thread A XADDs ``a`` (id X)
    and stages it, thread B XADDs ``b`` (id X+1) and one of RQ's result records and flushes,
    then A flushes: the file holds X+1 before X, as 12-40 parallel HTTP writes made it.
    Returns the source records ``(key, id, fields)`` in the order the ids were given."""
    import fakeredis

    server = fakeredis.FakeRedis()
    old = LegacyStreamLog(directory)
    made: list[tuple[bytes, bytes, list[bytes]]] = []

    def xadd(key: bytes, fields: list[bytes]) -> None:
        entry_id = server.xadd(key, dict(zip(fields[::2], fields[1::2], strict=True)))
        assert isinstance(entry_id, bytes)
        old.stage(key, entry_id, fields)
        if not key.startswith(b"rq:"):
            made.append((key, entry_id, fields))

    for n, (first, second) in enumerate(pairs):
        a_staged, b_flushed = threading.Event(), threading.Event()

        def a(first: Append = first, staged: threading.Event = a_staged,
              flushed: threading.Event = b_flushed) -> None:
            xadd(*first)
            staged.set()
            assert flushed.wait(10)
            old.flush()

        def b(second: Append = second, n: int = n, flushed: threading.Event = b_flushed
              ) -> None:
            xadd(*second)
            xadd(b"rq:results:job%d" % n, [b"data", b"x" * 120])
            old.flush()
            flushed.set()

        ta = threading.Thread(target=a)
        ta.start()
        assert a_staged.wait(10)
        tb = threading.Thread(target=b)
        tb.start()
        for t in (ta, tb):
            t.join(10)
    old.close()
    return made
