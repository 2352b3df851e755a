"""A checked write's round trips: the projection marker and the namespace registry set in one
(``jobs.schedule_and_register``), the append script sent by its hash alone (no ``SCRIPT
EXISTS`` first), loaded again only when Redis lost it."""

from __future__ import annotations

from typing import Any

import fakeredis

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.projections.store import keys
from tests.support.factories import created, ev

NS = "trips"
QUEUE = "rq:queue:hivemind-project"


def _client(store: Any) -> Client:
    return Client(store, settings=Settings(redis_url="redis://unused"))


def _note(nid: str) -> Any:
    return ev(created(nid, ns=NS, agent="alice", text=f"note {nid} about the deploy window"))


def test_a_checked_append_sends_its_script_by_hash_alone(store: Any) -> None:
    """On a redis-server (which counts commands): no ``SCRIPT EXISTS`` before the append,
    one ``EVALSHA`` of it, one ``SADD`` of the registry; the entry is in the stream."""
    c = _client(store)
    c.append_checked([_note("n0")])  # the script is loaded once
    ns = _note("n1").ns
    if isinstance(store, fakeredis.FakeRedis):
        assert c.append_checked([_note("n1")]).appended == 1
        assert store.xlen(keys.stream(ns)) == 2
        return
    store.config_resetstat()
    assert c.append_checked([_note("n1")]).appended == 1
    stats = store.info("commandstats")
    assert "cmdstat_script|exists" not in stats and "cmdstat_script" not in stats
    assert stats["cmdstat_evalsha"]["calls"] == 1
    assert stats["cmdstat_sadd"]["calls"] == 1
    assert store.xlen(keys.stream(ns)) == 2


def test_the_append_loads_its_script_again_after_a_script_flush(store: Any) -> None:
    """A store whose script cache was flushed (a restart, ``SCRIPT FLUSH``): the append's
    ``NOSCRIPT`` wrote nothing, so the script is loaded and sent again, once."""
    c = _client(store)
    c.append_checked([_note("n1")])
    store.script_flush()
    assert c.append_checked([_note("n2")]).appended == 1
    ns = _note("n2").ns
    assert store.xlen(keys.stream(ns)) == 2
    assert c.append_checked([_note("n2")]).appended == 0  # a retry: already in the log
    assert store.xlen(keys.stream(ns)) == 2


def test_the_first_write_registers_and_schedules_the_namespace_once(store: Any) -> None:
    """Before the first entry lands the namespace is registered and its marker set; a job is
    enqueued only by the call that set the marker (here the step before the append; the
    one after it finds the marker set)."""
    c = _client(store)
    ns = _note("n1").ns
    assert c.append_checked([_note("n1")]).appended == 1
    assert store.sismember(keys.NAMESPACES, ns)
    assert store.get(keys.scheduled(ns)) == b"1"
    assert store.llen(QUEUE) == 1
    assert c.append_checked([_note("n2")]).appended == 1
    assert store.llen(QUEUE) == 1  # the marker was set: no second job
    store.delete(keys.scheduled(ns))
    assert c.append_checked([_note("n3")]).appended == 1
    assert store.llen(QUEUE) == 2


def test_a_refused_write_registers_and_schedules_nothing(store: Any) -> None:
    """A write the check refuses (a note created twice with other ids) lands no entry, so
    it registers nothing and enqueues no job."""
    from hivemind_memory.events.errors import HivemindError

    c = _client(store)
    ns = _note("n1").ns
    bad = created("n1", ns=NS, agent="alice", text="one", eid="e1")
    again = created("n1", ns=NS, agent="alice", text="two", eid="e2")
    try:
        c.append_checked([ev(bad), ev(again)])
    except HivemindError:
        pass
    else:
        raise AssertionError("a note created twice in one write must be refused")
    assert not store.sismember(keys.NAMESPACES, ns)
    assert store.get(keys.scheduled(ns)) is None and store.llen(QUEUE) == 0
