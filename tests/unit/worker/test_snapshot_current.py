"""Snapshots kept current incrementally, so no query job rebuilds a namespace from scratch:
the projector queues a ``refresh_snapshot`` job every ``SNAPSHOT_REFRESH_CHANGES`` committed
batches, which brings the stored snapshot up to date from the old one plus the changes; a
worker whose changes stream was trimmed past its index (or a restarted one) goes on from that
snapshot; and when even the snapshot is past the trim, a large namespace's queries get
``index_warming`` at once while a thread builds it."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol import jobs
from hivemind_memory.api_stub.protocol.messages import Envelope
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.events.positions import format_pos
from hivemind_memory.projections.ranking.config import DEFAULT
from hivemind_memory.projections.store import index_loader, keys
from hivemind_memory.projections.store.index_loader import changes_last, snapshot_changes_seen
from hivemind_memory.projections.store.lease import Renewing
from hivemind_memory.worker import engine as engine_mod
from hivemind_memory.worker.engine import QueryEngine
from hivemind_memory.worker.projector import run_projection
from tests.support.factories import created

NOW = datetime(2026, 6, 1, tzinfo=UTC)
WORDS = ["redis", "stream", "lease", "batch", "replay", "agent", "budget", "note", "query",
         "index", "shard", "memory"]


@pytest.fixture
def fixed_now(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_mod, "utcnow", lambda: NOW)


def _note(ns: str, i: int) -> dict[str, Any]:
    text = " ".join(WORDS[(i * 5 + j) % len(WORDS)] for j in range(2 + i % 5))
    return created(f"{ns}{i:03d}", ns=ns, text=f"{text} n{i}", agent="ab"[i % 2],
                   at=datetime(2026, 1 + i % 5, 1 + i % 27, tzinfo=UTC))


def _commit(store: Any, c: Client, ns: str, first: int, n: int = 1) -> None:
    """Append ``n`` notes and project them: one committed batch (one changes entry)."""
    c.append([_note(ns, i) for i in range(first, first + n)])
    run_projection(store, c._pq, ns, c.settings)


def _ask(eng: QueryEngine, c: Client, ns: str) -> list[bytes]:
    """The answers (query ids taken out) of four queries to ``ns``, as one job."""
    reqs = [{"ns": ns, "text": f"{w} {v}", "budget": 60, "agent": "a" if i % 2 else ""}
            for i, (w, v) in enumerate(zip(WORDS[:4], reversed(WORDS), strict=False))]
    ids = c.submit_batch(reqs)
    [job] = c._qq.jobs
    c._qq.empty()
    eng.serve([msgspec.convert(e, Envelope) for e in job.args[0]])
    return [c.result_json(q, 5).replace(q.encode(), b"Q") for q in ids]


def _snapshot_jobs(c: Client) -> list[Any]:
    return [j for j in c._pq.jobs if j.func_name == jobs.SNAPSHOT_JOB]


def _no_full_loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every full load, and the thread it ran in."""
    where: list[str] = []
    real = index_loader.load_index

    def recorded(r: Any, idx: Any, **kw: Any) -> None:
        where.append(threading.current_thread().name)
        real(r, idx, **kw)

    monkeypatch.setattr(index_loader, "load_index", recorded)
    monkeypatch.setattr(engine_mod, "load_index", recorded)
    return where


def test_a_trimmed_changes_stream_is_bridged_by_the_snapshot_the_projector_keeps_current(
        store: Any, fixed_now: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keys, "SNAPSHOT_REFRESH_CHANGES", 3)
    c = Client(store, settings=Settings())
    _commit(store, c, "a", 0, 8)
    held = QueryEngine(store, DEFAULT, Settings(), embedder=None, project_queue=c._pq)
    _ask(held, c, "a")  # 8 notes: built inline, the snapshot written
    taken = snapshot_changes_seen(store, "a")
    assert taken is not None and held.live["a"].full_loads == 1
    full = _no_full_loads(monkeypatch)
    for k in range(4):  # 4 batches: the 3rd queues one snapshot refresh (and only one)
        _commit(store, c, "a", 8 + k)
    [job] = _snapshot_jobs(c)
    assert job.args == ["a"]
    # the job runs on another worker (none of its indexes): the snapshot read, the changes
    # since folded in, and written back; no full build
    other = QueryEngine(store, DEFAULT, Settings(), embedder=None)
    assert other.refresh_snapshot("a") == {"ns": "a", "status": "refreshed", "notes": 12}
    assert full == []
    assert snapshot_changes_seen(store, "a") == changes_last(store, "a") != taken
    assert not store.exists(keys.index_lag("a"), keys.snapshot_queued("a"),
                            keys.index_build_lease("a"))
    # everything before the snapshot's changes entry is trimmed away, then one more commit
    store.xtrim(keys.changes("a"), minid=format_pos(changes_last(store, "a")),
                approximate=False)
    _commit(store, c, "a", 12, 2)
    # the worker that held the index before the trim goes on from the snapshot
    got = _ask(held, c, "a")
    assert full == [] and held.live["a"].snapshot_loads == 1
    # so does a restarted worker, even one that would build nothing inline
    restarted = QueryEngine(store, DEFAULT, Settings(warm_inline_max_notes=3), embedder=None)
    assert _ask(restarted, c, "a") == got
    assert full == [] and restarted.live["a"].snapshot_loads == 1
    # and the answers are those of a full build of the same notes
    store.delete(keys.index_snapshot("a"))
    monkeypatch.undo()
    monkeypatch.setattr(engine_mod, "utcnow", lambda: NOW)
    fresh = QueryEngine(store, DEFAULT, Settings(), embedder=None)
    assert _ask(fresh, c, "a") == got
    assert fresh.live["a"].full_loads == 1
    assert not any(b'"error"' in a for a in got)
    assert any(b'"a013"' in a for a in got)  # the newest note is in the answers


def test_a_gap_past_the_snapshot_gets_index_warming_at_once_and_is_built_off_the_query_path(
        store: Any, fixed_now: None, monkeypatch: pytest.MonkeyPatch) -> None:
    c = Client(store, settings=Settings())
    _commit(store, c, "a", 0, 8)
    held = QueryEngine(store, DEFAULT, Settings(warm_inline_max_notes=5), embedder=None)
    held.live.budget = 1 << 40
    _ask(QueryEngine(store, DEFAULT, Settings(), embedder=None), c, "a")  # the snapshot
    _ask(held, c, "a")  # from the snapshot
    for k in range(3):  # no refresh job runs: the snapshot falls behind
        _commit(store, c, "a", 8 + k)
    store.xtrim(keys.changes("a"), maxlen=1, approximate=False)  # past the index and the snapshot
    full = _no_full_loads(monkeypatch)
    got = _ask(held, c, "a")
    assert all(b'"index_warming"' in a for a in got), got[0]
    assert "a" not in held.live  # nothing stale kept meanwhile
    assert held.wait_warm("a", 60)
    assert full and threading.main_thread().name not in full  # built in a thread, not inline
    assert not store.exists(keys.index_build_lease("a"))
    after = _ask(held, c, "a")
    assert not any(b'"error"' in a for a in after) and any(b'"a010"' in a for a in after)
    # the thread's index handed over: the snapshot it wrote is not read back
    assert held.live["a"].full_loads == 1 and held.live["a"].snapshot_loads == 0
    assert full == ["warm-a"]
    # a namespace under warm_inline_max_notes is still rebuilt inline
    _commit(store, c, "a", 11)
    store.xtrim(keys.changes("a"), maxlen=0, approximate=False)
    _commit(store, c, "a", 12)
    small = QueryEngine(store, DEFAULT, Settings(warm_inline_max_notes=100), embedder=None)
    assert not any(b'"error"' in a for a in _ask(small, c, "a"))
    assert small.live["a"].full_loads == 1


def test_a_build_lease_is_renewed_while_its_holder_works(store: Any) -> None:
    key = keys.index_build_lease("a")
    store.set(key, "me", px=600)
    lease = Renewing(store, key, "me", 0.6)
    deadline = threading.Event()
    for _ in range(100):  # wait until it renewed past the first TTL (0.2 s a renewal)
        if lease.renewals >= 4:
            break
        deadline.wait(0.1)
    assert lease.renewals >= 4 and store.get(key) == b"me"  # held past its 0.6 s TTL
    lease.stop()
    assert not store.exists(key)
    store.set(key, "other", px=600)  # a lease taken by another is never given back by us
    Renewing(store, key, "me", 0.6).stop()
    assert store.get(key) == b"other"


def test_a_restarted_worker_reads_a_large_snapshot_in_a_thread_answering_index_warming_at_once(
        store: Any, fixed_now: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """At ``snapshot_inline_max_notes`` notes and more, a worker that does not hold the
    namespace answers ``index_warming`` at once and reads the snapshot in a thread (never a
    full load); the next query gets the answers a worker that read it inline gives. Below
    it, the read stays inline."""
    c = Client(store, settings=Settings())
    _commit(store, c, "a", 0, 10)
    built = QueryEngine(store, DEFAULT, Settings(), embedder=None)
    want = _ask(built, c, "a")  # built inline, the snapshot written
    _commit(store, c, "a", 10, 2)  # the snapshot falls behind by one batch
    inline = QueryEngine(store, DEFAULT, Settings(snapshot_inline_max_notes=13), embedder=None)
    want = _ask(inline, c, "a")
    assert inline.live["a"].snapshot_loads == 1 and not any(b'"error"' in a for a in want)
    full = _no_full_loads(monkeypatch)
    reads: list[str] = []
    real = index_loader.read_snapshot

    def recorded(r: Any, idx: Any) -> bool:
        reads.append(threading.current_thread().name)
        return real(r, idx)

    monkeypatch.setattr(index_loader, "read_snapshot", recorded)
    restarted = QueryEngine(store, DEFAULT, Settings(snapshot_inline_max_notes=12),
                            embedder=None)
    first = _ask(restarted, c, "a")
    assert all(b'"index_warming"' in a for a in first), first[0]
    assert "a" not in restarted.live
    assert restarted.wait_warm("a", 60)
    assert reads == ["read-a"] and full == []  # in its thread, from the snapshot
    assert _ask(restarted, c, "a") == want
    assert restarted.live["a"].snapshot_loads == 1 and reads == ["read-a"] and full == []
    # a snapshot the thread cannot go on from (trimmed past it): the usual full-load way
    _commit(store, c, "a", 12)
    store.xtrim(keys.changes("a"), maxlen=1, approximate=False)
    gap = QueryEngine(store, DEFAULT, Settings(snapshot_inline_max_notes=12,
                                               warm_inline_max_notes=100), embedder=None)
    assert all(b'"index_warming"' in a for a in _ask(gap, c, "a"))
    assert gap.wait_warm("a", 60) and "a" in gap.unread
    after = _ask(gap, c, "a")
    assert not any(b'"error"' in a for a in after) and gap.live["a"].full_loads == 1
