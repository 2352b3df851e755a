"""RQ without pickle: jobs, arguments and results travel as JSON.

RQ's default serializer is pickle, so whoever can write to Redis could run code in the worker.
Every queue and worker of hivemind uses this one; job arguments are plain JSON values.
"""

from __future__ import annotations

from typing import Any

import msgspec

_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder()


class JSONSerializer:
    """``dumps``/``loads`` as RQ expects; tuples come back as lists (RQ unpacks either)."""

    @staticmethod
    def dumps(obj: Any) -> bytes:
        return _enc.encode(obj)

    @staticmethod
    def loads(data: bytes) -> Any:
        return _dec.decode(data)
