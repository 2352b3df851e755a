"""``readmodel.write_view``: what a checked write is checked against when the projector has
not folded the log's tail yet (a burst of writes, or a ``memory://PATH`` store just opened,
whose read model the worker is rebuilding from the replayed log)."""

from __future__ import annotations

from datetime import timedelta

import fakeredis
import pytest

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.events.errors import NotAllowed, UnknownNote
from hivemind_memory.projections.store import keys, readmodel
from tests.support.factories import T0, created, revised


def _client() -> Client:
    r = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    return Client(r, settings=Settings(redis_url="redis://unused"))  # no worker: no projection


def test_a_superseding_note_in_the_tail_is_known_with_the_note_it_supersedes() -> None:
    """A created, B created to supersede A, then B revised, none of it projected: B's
    creation folds onto A's (in the tail too), so B exists and A is superseded."""
    c = _client()
    c.append_checked([created("a", agent="alice")])
    c.append_checked([created("b", agent="alice", at=T0 + timedelta(hours=1),
                              supersedes=["a"])])
    assert c.store.get(keys.checkpoint("t")) is None  # nothing folded by a projector
    view = readmodel.write_view(c.store, "t", ["b"], [])
    assert sorted(view.notes) == ["a", "b"]
    assert view.notes["a"].superseded_by == "b"
    assert c.append_checked([revised("b", "r-b", agent="alice",
                                     at=T0 + timedelta(hours=2))]).appended == 1
    with pytest.raises(NotAllowed):  # the author's note: another agent may not revise it
        c.append_checked([revised("b", "r-b2", agent="mallory", at=T0 + timedelta(hours=3))])


def test_a_chain_of_supersessions_in_the_tail_is_followed_to_its_start() -> None:
    c = _client()
    c.append_checked([created("a")])
    c.append_checked([created("b", at=T0 + timedelta(hours=1), supersedes=["a"])])
    c.append_checked([created("c", at=T0 + timedelta(hours=2), supersedes=["b"])])
    view = readmodel.write_view(c.store, "t", ["c"], [])
    assert sorted(view.notes) == ["a", "b", "c"]
    assert c.append_checked([revised("c", "r-c", at=T0 + timedelta(hours=3))]).appended == 1
    with pytest.raises(UnknownNote):
        c.append_checked([revised("d", "r-d", at=T0 + timedelta(hours=3))])


def test_a_refused_checked_write_registers_and_schedules_nothing() -> None:
    """Only a write with something to append registers its namespace and schedules its
    projection: a refused one leaves a namespace nobody wrote to unlisted."""
    c = _client()
    with pytest.raises(UnknownNote):
        c.append_checked([revised("ghost", "r-g", ns="fresh")])
    assert b"fresh" not in c.store.smembers(keys.NAMESPACES)
    assert not c.store.exists(keys.scheduled("fresh"))
    c.append_checked([created("real", ns="fresh")])
    assert b"fresh" in c.store.smembers(keys.NAMESPACES)
