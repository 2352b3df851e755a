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
