"""``remember`` with its near-duplicate check on a real Redis Cluster (3 masters, RQ on a plain
Redis beside it): the lookup's MULTI (its script, the tail's XRANGE, the priors) runs on the
slot's master, since a cluster pipeline refuses EVALSHA."""

from __future__ import annotations

from typing import Any

import pytest

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.events.schema import NoteCreated
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.readmodel import DEFAULT_SPEC, project_batch
from tests.support import RQ_OF
from tests.support.factories import T0, created, ev

pytestmark = [pytest.mark.redis_server, pytest.mark.redis_cluster]

SENTENCE = "the deploy runbook says restart nginx after the certificate rotation"


def _note(nid: str, text: str, agent: str = "alice", **kw: Any) -> NoteCreated:
    got = ev(created(nid, agent=agent, text=text, at=T0, **kw))
    assert isinstance(got, NoteCreated)
    return got


def _client(rc: Any) -> Client:
    return Client(rc, RQ_OF[id(rc)], settings=Settings(redis_url="redis://unused"))


def test_the_same_sentence_three_times_is_one_note_on_a_cluster(cluster_store: Any) -> None:
    c = _client(cluster_store)
    first = c.remember(_note("n1", SENTENCE))
    assert first.write.appended == 1 and first.duplicate_of is None
    for nid in ("n2", "n3"):
        again = c.remember(_note(nid, SENTENCE))
        assert again.duplicate_of == "n1"
        assert again.write.appended == 0
    assert cluster_store.xlen(keys.stream("t")) == 1


def test_a_projected_near_note_is_reported_and_another_agents_private_one_is_not(
        cluster_store: Any) -> None:
    c = _client(cluster_store)
    c.remember(_note("mine", SENTENCE + " tonight"))
    c.remember(_note("theirs", SENTENCE + " tomorrow", agent="bob", scope="private"))
    while project_batch(cluster_store, "t", spec=DEFAULT_SPEC) is not None:
        pass
    got = c.remember(_note("n9", SENTENCE + " today"), duplicates="report")
    assert [n for n, _ in got.duplicates or []] == ["mine"]
    assert got.write.appended == 1
