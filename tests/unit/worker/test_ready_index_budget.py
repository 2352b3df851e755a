"""An index a worker's thread loaded (a large namespace's snapshot read after a restart, or a
build) counts in the memory budget while it waits for the query that takes it: until then it
is memory the worker holds, and the budget (evictions, the heartbeat's report) must see it."""

from __future__ import annotations

from typing import Any

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.projections.ranking.config import DEFAULT
from hivemind_memory.projections.ranking.footprint import index_bytes
from hivemind_memory.worker.engine import READY_KEEP_S, QueryEngine
from tests.unit.worker.test_snapshot_current import _ask, _commit, fixed_now

__all__ = ["fixed_now"]


def test_an_index_read_in_a_thread_counts_in_the_budget_until_a_query_takes_it(
        store: Any, fixed_now: None) -> None:
    c = Client(store, settings=Settings())
    _commit(store, c, "a", 0, 12)
    _commit(store, c, "b", 0, 4)
    _ask(QueryEngine(store, DEFAULT, Settings(), embedder=None), c, "a")  # its snapshot
    eng = QueryEngine(store, DEFAULT, Settings(snapshot_inline_max_notes=12), embedder=None)
    _ask(eng, c, "b")  # small: read inline
    assert all(b'"index_warming"' in a for a in _ask(eng, c, "a"))
    assert eng.wait_warm("a", 60) and "a" not in eng.live
    size = index_bytes(eng.ready["a"])
    assert eng.live.outside() >= eng.kept.held + size  # held, not in the cache yet
    report = eng.live.publish()
    assert report.held + report.outside >= eng.live.held_bytes() + size
    answers = _ask(eng, c, "a")  # taken: now in the cache, counted there once
    assert not any(b'"error"' in a for a in answers)
    assert "a" in eng.live and not eng.ready
    assert eng.live.outside() == eng.kept.held


def test_an_index_nobody_comes_back_for_is_dropped_after_a_while(
        store: Any, fixed_now: None) -> None:
    """A thread's index waits in ``ready`` for ``READY_KEEP_S``: a query of another namespace
    within that leaves it there; one after it drops it (its memory no longer held), and the
    namespace's next query reads the snapshot again (``index_warming``, then answered)."""
    c = Client(store, settings=Settings())
    _commit(store, c, "a", 0, 12)
    _commit(store, c, "b", 0, 4)
    _ask(QueryEngine(store, DEFAULT, Settings(), embedder=None), c, "a")  # its snapshot
    eng = QueryEngine(store, DEFAULT, Settings(snapshot_inline_max_notes=12), embedder=None)
    t = [1000.0]
    eng.clock = lambda: t[0]
    assert all(b'"index_warming"' in a for a in _ask(eng, c, "a"))
    assert eng.wait_warm("a", 60) and "a" in eng.ready
    t[0] += READY_KEEP_S - 1
    _ask(eng, c, "b")
    assert "a" in eng.ready
    t[0] += 2
    _ask(eng, c, "b")
    assert not eng.ready and not eng.ready_bytes and eng.live.outside() == eng.kept.held
    assert all(b'"index_warming"' in a for a in _ask(eng, c, "a"))
    assert eng.wait_warm("a", 60)
    assert not any(b'"error"' in a for a in _ask(eng, c, "a"))
