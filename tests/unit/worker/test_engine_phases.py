"""The query job works in phases over its whole batch: one catch-up and one index refresh per
namespace, then every answer published together."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
import structlog.testing

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.messages import Envelope
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.projections.ranking.config import DEFAULT
from hivemind_memory.projections.store import index_loader, results
from hivemind_memory.projections.store.log import tail
from hivemind_memory.worker import engine as engine_mod
from hivemind_memory.worker.engine import QueryEngine
from hivemind_memory.worker.projector import ensure_projected
from tests.support.factories import created, used


def _envelopes(store: Any, c: Client, reqs: list[dict[str, Any]]) -> list[Envelope]:
    ids = c.submit_batch(reqs)
    # take the queued job's envelopes off the queue instead of running a worker
    [job] = c._qq.jobs
    envs = [msgspec.convert(e, Envelope) for e in job.args[0]]
    assert [e.query_id for e in envs] == ids
    return envs


def test_one_catch_up_and_one_refresh_per_namespace(store: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    c = Client(store, settings=Settings())
    c.append([created("a1", ns="a", text="redis stream"), created("b1", ns="b", text="redis"),
              used("a1", "u1", ns="a")])
    calls: dict[str, list[str]] = {"catch_up": [], "refresh": []}
    real_catch_up, real_refresh = engine_mod.ensure_projected, index_loader.refresh_index

    def catch_up(r: Any, ns: str, *a: Any, **kw: Any) -> Any:
        calls["catch_up"].append(ns)
        return real_catch_up(r, ns, *a, **kw)

    def refresh(r: Any, idx: Any, embedder: Any = None, **kw: Any) -> None:
        calls["refresh"].append(idx.ns)
        real_refresh(r, idx, embedder, **kw)

    monkeypatch.setattr(engine_mod, "ensure_projected", catch_up)
    monkeypatch.setattr(engine_mod, "refresh_index", refresh)
    reqs = [{"ns": ns, "text": f"redis {i}", "budget": 50, "agent": "x"}
            for i, ns in enumerate("aabab")]
    reqs.append({"ns": "a", "text": "redis", "budget": 50, "as_of": "2026-06-01T00:00:00Z"})
    eng = QueryEngine(store, DEFAULT, Settings())
    out = eng.serve(_envelopes(store, c, reqs))
    assert out == {"ok": 6, "failed": 0, "already": 0}
    assert sorted(calls["catch_up"]) == ["a", "b"]  # live queries only, once per namespace
    assert sorted(calls["refresh"]) == ["a", "b"]
    # every answer was published, and each served query left one audit event
    assert store.xlen("hm:{a}:audit") == 4 and store.xlen("hm:{b}:audit") == 2


def test_nothing_new_means_no_catch_up_and_no_refresh(store: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # one probe (checkpoint + newest changes entry) tells the job its index is current
    c = Client(store, settings=Settings())
    c.append([created("a1", ns="a", text="redis stream")])
    eng = QueryEngine(store, DEFAULT, Settings())
    first = eng.answer(_envelopes(store, c, [{"ns": "a", "text": "redis", "budget": 50}]))
    assert [n.note_id for n in first[0].result.notes] == ["a1"]  # type: ignore[union-attr]
    c._qq.empty()
    calls: list[str] = []
    real_catch_up, real_refresh = engine_mod.ensure_projected, index_loader.refresh_index

    def catch_up(r: Any, ns: str, *a: Any, **kw: Any) -> Any:
        calls.append("catch_up")
        return real_catch_up(r, ns, *a, **kw)

    def refresh(r: Any, idx: Any, embedder: Any = None, **kw: Any) -> None:
        calls.append("refresh")
        real_refresh(r, idx, embedder, **kw)

    monkeypatch.setattr(engine_mod, "ensure_projected", catch_up)
    monkeypatch.setattr(engine_mod, "refresh_index", refresh)
    again = eng.answer(_envelopes(store, c, [{"ns": "a", "text": "redis", "budget": 50}]))
    assert calls == [] and [n.note_id for n in again[0].result.notes] == ["a1"]  # type: ignore[union-attr]
    c._qq.empty()
    # a write since: caught up and refreshed, and the query sees it (read-your-writes)
    c.append([created("a2", ns="a", text="redis redis redis")])
    seen = eng.answer(_envelopes(store, c, [{"ns": "a", "text": "redis", "budget": 50}]))
    assert calls == ["catch_up", "refresh"]
    assert sorted(n.note_id for n in seen[0].result.notes) == ["a1", "a2"]  # type: ignore[union-attr]
    c._qq.empty()
    # projected by someone else in between: nothing to catch up, but the index must refresh
    c.append([created("a3", ns="a", text="redis stream consumer")])  # not a1's near twin
    ensure_projected(store, "a", tail(store, "a"), Settings())
    calls.clear()
    last = eng.answer(_envelopes(store, c, [{"ns": "a", "text": "redis", "budget": 50}]))
    assert calls == ["refresh"]
    assert sorted(n.note_id for n in last[0].result.notes) == ["a1", "a2", "a3"]  # type: ignore[union-attr]


def test_a_bad_request_among_good_ones_gets_its_own_error(store: Any) -> None:
    c = Client(store, settings=Settings())
    c.append([created("a1", ns="a", text="redis stream")])
    reqs = [{"ns": "a", "text": "redis", "budget": 50}, {"ns": "a", "text": "redis", "budget": 9}]
    envs = _envelopes(store, c, reqs)
    bad = msgspec.structs.replace(envs[1], request={**envs[1].request, "budget": -1})
    wrong_ns = msgspec.structs.replace(envs[0], query_id="b." + envs[0].query_id[2:])
    eng = QueryEngine(store, DEFAULT, Settings())
    done = eng.answer([envs[0], bad, wrong_ns])
    assert done[0].result is not None and done[0].result.notes[0].note_id == "a1"
    assert done[1].result is None and b'"invalid_request"' in (done[1].body or b"")
    assert b"budget" in (done[1].body or b"")
    assert done[2].result is None and b"does not belong" in (done[2].body or b"")


def test_a_job_pauses_the_cycle_collector_and_leaves_it_as_it_found_it(
        store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    c = Client(store, settings=Settings())
    c.append([created("a1", ns="a", text="redis stream")])
    seen: list[bool] = []
    real = engine_mod.run_rank

    def spy(*a: Any, **kw: Any) -> Any:
        seen.append(gc.isenabled())
        return real(*a, **kw)

    monkeypatch.setattr(engine_mod, "run_rank", spy)
    eng = QueryEngine(store, DEFAULT, Settings())
    assert gc.isenabled()
    assert eng.serve(_envelopes(store, c, [{"ns": "a", "text": "redis", "budget": 50}])) == \
        {"ok": 1, "failed": 0, "already": 0}
    assert seen == [False] and gc.isenabled()
    c._qq.empty()
    gc.disable()
    try:
        eng.serve(_envelopes(store, c, [{"ns": "a", "text": "redis", "budget": 50}]))
        assert not gc.isenabled()  # it was off: it stays off
    finally:
        gc.enable()


def test_answers_are_published_a_wave_at_a_time(store: Any,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # the results of a wave are in Redis while later waves are still being ranked
    c = Client(store, settings=Settings())
    c.append([created("a1", ns="a", text="redis stream")])
    monkeypatch.setattr(engine_mod, "WAVE", 2)
    envs = _envelopes(store, c, [{"ns": "a", "text": f"redis {i}", "budget": 50}
                                 for i in range(7)])
    ids = [e.query_id for e in envs]
    there: list[list[bool]] = []
    real = QueryEngine._rank

    def spy(self: QueryEngine, q: Any, *a: Any, **kw: Any) -> None:
        there.append([results.read_result(store, "a", i) is not None for i in ids])
        real(self, q, *a, **kw)

    monkeypatch.setattr(QueryEngine, "_rank", spy)
    with structlog.testing.capture_logs() as logged:
        out = QueryEngine(store, DEFAULT, Settings()).serve(envs)
    assert out == {"ok": 7, "failed": 0, "already": 0}
    # one log line per wave, naming its queries (with their notes and durations)
    lines = [e for e in logged if e["event"] == "queries_served"]
    assert [e["query_ids"] for e in lines] == [ids[0:2], ids[2:4], ids[4:6], ids[6:7]]
    assert all(e["ns"] == "a" and e["failed"] == 0 and e["notes"] == [1] * len(e["query_ids"])
               and len(e["duration_ms"]) == len(e["query_ids"]) for e in lines)
    # ranking query k (wave k // 2): every wave before the previous one has been settled
    for k, seen in enumerate(there):
        settled = max(0, 2 * (k // 2 - 1))
        assert all(seen[:settled]) and not any(seen[k:]), (k, seen)
    assert there[0] == [False] * 7 and there[6][:4] == [True] * 4
    assert all(results.read_result(store, "a", i) is not None for i in ids)
    assert store.xlen("hm:{a}:audit") == 7


def test_a_job_run_again_answers_only_what_it_had_not_published(
        store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # at-least-once delivery: a wave's MULTI fails after the first went out, RQ runs the job
    # again; every query ends with one result and exactly one audit event
    c = Client(store, settings=Settings())
    c.append([created("a1", ns="a", text="redis stream")])
    monkeypatch.setattr(engine_mod, "WAVE", 2)
    envs = _envelopes(store, c, [{"ns": "a", "text": f"redis {i}", "budget": 50}
                                 for i in range(5)])
    real_send = results.Publisher.send
    sent: list[int] = []

    def failing_send(self: results.Publisher, p: Any, *rest: Any) -> None:
        sent.append(len(p))
        if len(sent) == 2:
            raise ConnectionError("redis went away")
        real_send(self, p, *rest)

    monkeypatch.setattr(results.Publisher, "send", failing_send)
    eng = QueryEngine(store, DEFAULT, Settings())
    with pytest.raises(ConnectionError):
        eng.serve(envs)
    assert store.xlen("hm:{a}:audit") == 2  # the first wave went out, the second did not
    monkeypatch.setattr(results.Publisher, "send", real_send)
    assert eng.serve(envs) == {"ok": 3, "failed": 0, "already": 2}
    assert store.xlen("hm:{a}:audit") == 5
    events = [msgspec.json.decode(e[1][results.AUDIT_FIELD]) for e in store.xrange("hm:{a}:audit")]
    assert sorted(e["query_id"] for e in events) == sorted(e.query_id for e in envs)
    # and once more: nothing left to answer, nothing written
    assert eng.serve(envs) == {"ok": 0, "failed": 0, "already": 5}
    assert store.xlen("hm:{a}:audit") == 5


def test_a_jobs_query_embeddings_are_one_call_and_give_the_same_bytes(
        store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # calibrated relevance (the default): the queries of a whole job are embedded in one
    # call and one matrix product while PRIME_FLOATS allows, else a wave or more at a time;
    # either way every answer is the one each query gets when ranked on its own
    c = Client(store, settings=Settings())
    c.append([created(f"n{i}", ns="a", text=f"redis stream {i} deploy tuesday")
              for i in range(30)])
    monkeypatch.setattr(engine_mod, "WAVE", 4)
    # one instant for every pass: the three passes must differ only in how the embeddings
    # were batched (on the wall clock, recency moved in its 6th decimal between passes)
    fixed = engine_mod.utcnow()
    monkeypatch.setattr(engine_mod, "utcnow", lambda: fixed)
    reqs = [{"ns": "a", "text": f"redis deploy {i}", "budget": 40, "agent": "x",
             "as_of": None} for i in range(10)]
    eng = QueryEngine(store, DEFAULT, Settings())
    assert eng.embedder is not None
    calls: list[int] = []
    real = type(eng.embedder).embed

    def embed(self: Any, texts: Any) -> Any:
        calls.append(len(texts))
        return real(self, texts)

    monkeypatch.setattr(type(eng.embedder), "embed", embed)
    envs = _envelopes(store, c, reqs)
    whole = {q.env.query_id: q.body for q in eng.answer(envs)}
    assert calls[-1:] == [10]  # the whole job at once (the index's own load came before)
    calls.clear()
    monkeypatch.setattr(engine_mod, "PRIME_FLOATS", 30 * 6)  # 6 queries x 30 notes
    capped = {q.env.query_id: q.body for q in eng.answer(envs)}
    assert calls == [6, 6]  # the first wave and what fits, then the second wave and the rest
    calls.clear()
    alone = {}
    for env in envs:
        [q] = eng.answer([env])
        alone[env.query_id] = q.body
    assert calls == [1] * 10
    assert all(body is not None and b'"notes":[{' in body for body in whole.values())
    assert len(whole) == 10 and whole == capped == alone


def test_a_large_namespace_gets_its_dense_stage_built_off_the_query_path(store: Any) -> None:
    # scan_max_notes 3: the first job answers by scanning and starts the build in a thread;
    # once it is attached, the same query answers from the candidates, with the same bytes
    # (every note is proposed at this size)
    from hivemind_memory.projections.ranking.config import Candidates

    c = Client(store, settings=Settings())
    texts = ["redis stream lag", "the vehicle needs new tyres", "redis aof fsync",
             "postgres vacuum", "kubernetes helm chart", "car insurance renewal"]
    c.append([created(f"n{i}", ns="a", text=t) for i, t in enumerate(texts)])
    cfg = msgspec.structs.replace(DEFAULT, candidates=Candidates(scan_max_notes=3))
    eng = QueryEngine(store, cfg, Settings())
    req = {"ns": "a", "text": "redis car", "budget": 500}

    def envelopes() -> list[Envelope]:
        c.submit_batch([req])
        return [msgspec.convert(e, Envelope) for e in c._qq.jobs[-1].args[0]]

    [first] = eng.answer(envelopes())
    assert eng.wait_dense("a", 60)
    assert eng.live["a"].dense_ready(cfg)
    [second] = eng.answer(envelopes())
    assert first.result is not None and second.result is not None
    # (live queries: ``now`` is the clock, so ages move; relevance is what candidates decide)
    assert [(n.note_id, n.relevance) for n in second.result.notes] == \
        [(n.note_id, n.relevance) for n in first.result.notes]
    assert len(first.result.notes) >= 2
    small = QueryEngine(store, DEFAULT, Settings())  # 6 notes < 20,000: never built
    small.answer(envelopes())
    assert small.dense_builds == {} and small.live["a"].dense is None


@pytest.mark.parametrize("inline_max, warming", [(4, True), (5, False)])
def test_first_build_inline_below_warm_inline_max_notes_else_warming(
        store: Any, inline_max: int, warming: bool) -> None:
    from hivemind_memory.projections.store import keys

    c = Client(store, settings=Settings())
    c.append([created(f"n{i}", ns="a", text=f"redis {i}") for i in range(4)])
    store.set(keys.index_build_lease("a"), "another-worker")  # someone else is building
    eng = QueryEngine(store, DEFAULT, Settings(warm_inline_max_notes=inline_max))
    c.submit_batch([{"ns": "a", "text": "redis", "budget": 50}])
    [q] = eng.answer([msgspec.convert(e, Envelope) for e in c._qq.jobs[-1].args[0]])
    if warming:  # 4 notes >= 4: not built here, and not by this worker (the lease is taken)
        assert q.result is None and b'"index_warming"' in (q.body or b"")
        assert eng.warm_builds == {} and "a" not in eng.live
        store.delete(keys.index_build_lease("a"))  # the other worker died: this one builds
        c.submit_batch([{"ns": "a", "text": "redis", "budget": 50}])
        [q] = eng.answer([msgspec.convert(e, Envelope) for e in c._qq.jobs[-1].args[0]])
        assert q.result is None and b'"index_warming"' in (q.body or b"")
        assert eng.wait_warm("a", 60)
        assert store.exists(keys.index_snapshot("a")) and \
            not store.exists(keys.index_build_lease("a"))
        c.submit_batch([{"ns": "a", "text": "redis", "budget": 50}])
        [q] = eng.answer([msgspec.convert(e, Envelope) for e in c._qq.jobs[-1].args[0]])
    assert q.result is not None and len(q.result.notes) == 4
