"""Every byte a store or a data folder holds, for the erasure tests' searches."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def opened(data: bytes) -> bytes:
    """``data`` and, when it is zlib (RQ's job payloads), what it holds."""
    try:
        return data + zlib.decompress(data)
    except zlib.error:
        return data


def key_bytes(r: Any) -> Iterator[tuple[str, bytes]]:
    """Every key of the store: its DUMP and its contents read by type (an unknown type fails
    the search rather than go unread)."""
    for k in r.scan_iter(count=1000):
        name = k.decode("utf-8", "replace")
        yield f"DUMP {name}", r.dump(k) or b""
        kind = r.type(k)
        if kind == b"string":
            yield name, opened(r.get(k) or b"")
        elif kind == b"hash":
            yield name, b"".join(a + opened(b) for a, b in r.hgetall(k).items())
        elif kind == b"stream":
            yield name, b"".join(opened(v) for _, f in r.xrange(k) for v in f.values())
        elif kind == b"list":
            yield name, b"".join(opened(x) for x in r.lrange(k, 0, -1))
        elif kind == b"set":
            yield name, b"".join(r.smembers(k))
        elif kind == b"zset":
            yield name, b"".join(m for m, _ in r.zrange(k, 0, -1, withscores=True))
        elif kind != b"none":  # none: expired since the SCAN (a heartbeat)
            raise AssertionError(f"key {name} of type {kind!r} is not read")


def file_bytes(d: Path) -> Iterator[tuple[str, bytes]]:
    """Every file under ``d``, whole."""
    for p in sorted(d.rglob("*")):
        if p.is_file():
            yield str(p), p.read_bytes()
