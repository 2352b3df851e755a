"""An ``event_id`` already in the log, sent again: the same content is an idempotent retry,
other content is refused (``EventIdConflict``, nothing appended), whether the first is still
in the unprojected tail or already folded (its keyed digest in ``event_digests``)."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from typing import Any

import pytest

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.events.codec import parse_json_event
from hivemind_memory.events.errors import EventIdConflict, WriteRefused
from hivemind_memory.projections.store import eventdigest, keys, readmodel
from tests.support.factories import T0, created


def _client(store: Any) -> Client:
    return Client(store, settings=Settings(redis_url="redis://unused"))  # no worker


def _project(c: Client) -> None:
    while readmodel.project_batch(c.store, "t") is not None:
        pass
    assert readmodel.write_view(c.store, "t", [], []).tail == \
        c.store.get(keys.checkpoint("t")).decode()


@pytest.mark.parametrize("projected", [False, True], ids=["in-tail", "projected"])
def test_same_content_is_a_retry_other_content_a_conflict(store: Any, projected: bool) -> None:
    c = _client(store)
    first = created("n1", eid="e1", text="deploys happen on tuesday")
    assert c.append_checked([first]).appended == 1
    if projected:
        _project(c)
        assert store.hexists(keys.event_digests("t"), "e1")
    else:
        assert store.get(keys.checkpoint("t")) is None
    again = c.append_checked([dict(first)])
    assert (again.appended, again.already) == (0, 1)
    # at is not compared: a retry whose at the server filled again is still a retry
    later = c.append_checked([{**first, "at": (T0 + timedelta(minutes=5)).isoformat()}])
    assert (later.appended, later.already) == (0, 1)
    n = store.xlen(keys.stream("t"))
    for other in ({**first, "text": "deploys happen on friday"},
                  {**first, "agent": "mallory"},  # another agent reusing the id
                  {**first, "note_id": "n2"},
                  {**first, "scope": "private"}):
        with pytest.raises(EventIdConflict) as exc:
            c.append_checked([other])
        assert exc.value.event_id == "e1" and "'e1'" in str(exc.value)
        assert exc.value.status == 409 and exc.value.code == "event_id_conflict"
        assert isinstance(exc.value, WriteRefused)
    assert store.xlen(keys.stream("t")) == n == 1  # nothing appended


def test_a_conflict_refuses_the_whole_write_and_names_its_place(store: Any) -> None:
    c = _client(store)
    c.append_checked([created("n1", eid="e1", text="alpha")])
    with pytest.raises(EventIdConflict) as exc:
        c.append_checked([created("n3", eid="e3", text="fresh"),
                          created("n1", eid="e1", text="beta")])
    assert exc.value.index == 1 and exc.value.message.startswith("events[1]")
    assert store.xlen(keys.stream("t")) == 1  # the good one is not appended either


def test_one_write_reusing_an_id_with_other_content_is_refused(store: Any) -> None:
    c = _client(store)
    with pytest.raises(EventIdConflict):
        c.append_checked([created("n1", eid="e1", text="alpha"),
                          created("n1", eid="e1", text="beta")])
    assert c.append_checked([created("n1", eid="e1", text="alpha"),
                             created("n1", eid="e1", text="alpha")]).appended == 1


def test_the_digest_is_keyed_not_a_plain_hash(store: Any) -> None:
    c = _client(store)
    ev = created("n1", eid="e1", text="pin 1234")
    c.append_checked([ev])
    _project(c)
    got = store.hget(keys.event_digests("t"), "e1")
    canon = eventdigest.canonical(parse_json_event(json.dumps(ev)))
    assert b"1234" not in got
    assert got != hashlib.sha256(canon).hexdigest().encode()
    assert got == eventdigest.digest(eventdigest.store_key(store), parse_json_event(json.dumps(ev)))


def test_after_an_erasure_the_original_event_resent_is_refused(store: Any) -> None:
    c = _client(store)
    ev = created("n1", eid="e1", text="the door code is 4711")
    c.append_checked([ev])
    _project(c)
    before = store.hget(keys.event_digests("t"), "e1")
    c.erase("t", ["n1"], catch_up=lambda ns, target, timeout: _project(c))
    assert store.hget(keys.event_digests("t"), "e1") == eventdigest.ERASED != before
    n = store.xlen(keys.stream("t"))
    with pytest.raises(EventIdConflict):
        c.append_checked([ev])
    assert store.xlen(keys.stream("t")) == n
