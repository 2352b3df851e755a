"""An event id resent with other content through the doors users take: HTTP answers 409
``event_id_conflict`` naming the id and appends nothing; the SDK raises ``EventIdConflict``;
the same content resent stays an idempotent success, before and after projection."""

from __future__ import annotations

import time

import pytest

from hivemind_memory.api_stub.sdk import Memory
from hivemind_memory.events.errors import EventIdConflict
from hivemind_memory.projections.store import keys
from tests.support.frontdoor import ALICE, BOB, Live, call, created

EVENTS = "/v1/ns/team-a/events"


def _wait_projected(live: Live) -> None:
    r = live.served.client.store
    deadline = time.monotonic() + 30
    while not r.hexists(keys.event_digests("team-a"), "e1"):
        assert time.monotonic() < deadline, "the in-process worker did not project e1"
        time.sleep(0.02)  # polling a condition with a deadline


@pytest.mark.parametrize("projected", [False, True], ids=["in-tail", "projected"])
def test_http_resend_same_is_idempotent_other_is_409(live: Live, projected: bool) -> None:
    b, r = live.base, live.served.client.store
    first = created("e1", "n1@@alice", "deploys happen on tuesday")
    assert call(b, "POST", EVENTS, [first], token=ALICE) == \
        (200, {"appended": 1, "event_ids": ["e1"], "already": 0})
    if projected:
        _wait_projected(live)
    assert call(b, "POST", EVENTS, [first], token=ALICE) == \
        (200, {"appended": 1, "event_ids": ["e1"], "already": 1})  # as before: a retry
    no_at = {k: v for k, v in first.items() if k != "at"}  # the server fills at again
    assert call(b, "POST", EVENTS, [no_at], token=ALICE)[0] == 200
    n = r.xlen(keys.stream("team-a"))
    for token, ev in ((ALICE, {**first, "text": "deploys happen on friday"}),
                      (BOB, {**first, "note_id": "n1@@bob"})):  # bob resending alice's
        # event id: other agent, other content (a note id of bob's own space)
        st, body = call(b, "POST", EVENTS, [ev], token=token)
        assert st == 409, body
        assert body["error"]["code"] == "event_id_conflict"
        assert "'e1'" in body["error"]["message"]
    assert r.xlen(keys.stream("team-a")) == n == 1


def test_sdk_raises_event_id_conflict_naming_the_id(live: Live) -> None:
    with Memory(live.base, ns="team-a", token=ALICE) as m:
        ev = {"type": "note.created", "event_id": "e1", "note_id": "n1@@alice",
              "text": "deploys happen on tuesday"}
        assert m.append([ev]) == 1  # at filled anew by the SDK: still the same event
        _wait_projected(live)
        assert m.append([ev]) == 1  # the count the server answers, as for any retry
        assert live.served.client.store.xlen(keys.stream("team-a")) == 1
        with pytest.raises(EventIdConflict) as exc:
            m.append([{**ev, "text": "deploys happen on friday"}])
        assert exc.value.event_id == "e1"
        assert live.served.client.store.xlen(keys.stream("team-a")) == 1
