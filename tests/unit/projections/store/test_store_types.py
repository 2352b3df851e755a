"""Reply checks at the Redis boundary: a connection that decodes replies is refused."""

from __future__ import annotations

import fakeredis
import pytest

from hivemind_memory.events.errors import StoreError
from hivemind_memory.projections.store.types import StreamEntry, stream_entries


def test_stream_entries_keep_bytes_and_refuse_decoded_replies() -> None:
    raw = fakeredis.FakeRedis()
    raw.xadd("s", {b"d": b"x"})
    raw.xadd("s", {b"d": b"y"})
    got = stream_entries(raw.xrange("s"))
    assert [e.fields for e in got] == [{b"d": b"x"}, {b"d": b"y"}]
    assert all(isinstance(e, StreamEntry) and isinstance(e.id, bytes) for e in got)
    assert stream_entries([]) == [] and stream_entries(None) == []
    decoded = fakeredis.FakeRedis(decode_responses=True)
    decoded.xadd("s", {"d": "x"})
    with pytest.raises(StoreError, match="decode_responses"):
        stream_entries(decoded.xrange("s"))
    with pytest.raises(StoreError):
        stream_entries([(b"1-0", {b"d": "text"})])
