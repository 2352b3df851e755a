"""The store and worker contract, run on fakeredis and on a real redis-server alike."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hivemind_memory.api_stub.protocol.jobs import schedule_projection
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.events.positions import parse_pos
from hivemind_memory.projections.ranking.config import RankingConfig
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.lease import try_lease
from hivemind_memory.projections.store.log import append, tail
from hivemind_memory.projections.store.readmodel import (
    checkpoint,
    commit,
    prepare_batch,
    project_batch,
    read_dead,
    read_notes,
)
from hivemind_memory.projections.store.rebuild import (
    diff_notes,
    fold_log,
    live_snapshot,
    write_back,
)
from hivemind_memory.worker import runtime
from hivemind_memory.worker.loop import run_worker
from hivemind_memory.worker.projector import ensure_projected, run_projection
from tests.support import rq_for
from tests.support.factories import T0, created, ev, forgotten, used

CFG = RankingConfig()


def _events(n_notes: int = 5, uses: int = 7) -> list[Any]:
    out = [created(f"n{i}", text=f"note {i} " * (i + 1)) for i in range(n_notes)]
    for k in range(uses):
        out.append(used(f"n{k % n_notes}", f"u{k}"))
    out += [used("n0", "u0"), used("ghost", "ug"), forgotten("n1", "f1"), used("n1", "u-late")]
    return [ev(d) for d in out]


def _drain(r: Any, ns: str = "t", size: int = 3) -> None:
    while project_batch(r, ns, size) is not None:
        pass


def test_projection_equals_pure_fold(store: Any) -> None:
    append(store, _events())
    _drain(store)
    rb = fold_log(store, "t")
    assert read_notes(store, "t") == rb.projection.notes
    assert checkpoint(store, "t") == tail(store, "t")
    notes = read_notes(store, "t")
    assert notes["n0"].uses == 2  # u0 once (its redelivery ignored) + u5
    assert notes["n1"].forgotten and notes["n1"].uses == 2
    reasons = [d.reason for d in read_dead(store, "t")]
    assert len(reasons) == 2
    assert "unknown_note" in reasons[0] and "forgotten_note" in reasons[1]


def test_dead_letter_keeps_the_original_entry(store: Any) -> None:
    ids = append(store, [ev(used("ghost", "u1"))])
    _drain(store)
    [(_, fields)] = store.xrange(keys.dead("t"))
    assert fields[b"entry"].decode() == ids[0]
    assert fields[b"raw"] == store.xrange(keys.stream("t"))[0][1][b"d"]


def test_undecodable_entry_is_dead_lettered_and_skipped(store: Any) -> None:
    append(store, [ev(created("n1"))])
    store.xadd(keys.stream("t"), {b"d": b"\xc1not msgpack"})
    append(store, [ev(used("n1", "u1"))])
    _drain(store, size=10)
    assert read_notes(store, "t")["n1"].uses == 1
    assert "undecodable" in read_dead(store, "t")[0].reason


def test_stale_commit_is_a_no_op(store: Any) -> None:
    append(store, [ev(created("n1")), ev(used("n1", "u1"))])
    first = prepare_batch(store, "t", 10)
    again = prepare_batch(store, "t", 10)  # a redelivered copy of the same batch
    assert first is not None and again is not None
    assert commit(store, first, 1) is True
    assert commit(store, again, 2) is False
    assert read_notes(store, "t")["n1"].uses == 1
    assert store.scard(keys.seen("t")) == 2


def test_crash_before_commit_loses_nothing(store: Any) -> None:
    append(store, [ev(created("n1")), ev(used("n1", "u1"))])
    assert prepare_batch(store, "t", 10) is not None  # folded, then "crashed"
    assert read_notes(store, "t") == {}
    _drain(store)
    assert read_notes(store, "t")["n1"].uses == 1


def test_rerun_after_commit_does_nothing(store: Any) -> None:
    append(store, _events())
    _drain(store)
    before = read_notes(store, "t")
    assert project_batch(store, "t") is None
    assert read_notes(store, "t") == before


def test_namespaces_are_isolated(store: Any) -> None:
    append(store, [ev(created("n1", ns="a")), ev(used("n1", "u1", ns="b"))])
    _drain(store, "a")
    _drain(store, "b")
    assert list(read_notes(store, "a")) == ["n1"] and read_notes(store, "b") == {}
    assert len(read_dead(store, "b")) == 1


def test_replay_verify_and_write_back(store: Any) -> None:
    append(store, _events())
    _drain(store)
    cp, live = live_snapshot(store, "t")
    assert diff_notes(live, fold_log(store, "t", until=cp).projection.notes) == []
    store.hdel(keys.notes("t"), "n2")  # damage the read model
    cp, live = live_snapshot(store, "t")
    rb = fold_log(store, "t", until=cp)
    assert [d.split(":")[0] for d in diff_notes(live, rb.projection.notes)] == ["n2"]
    write_back(store, "t", rb)
    assert read_notes(store, "t") == rb.projection.notes
    assert checkpoint(store, "t") == tail(store, "t")


def test_as_of_fold_filters_by_event_time(store: Any) -> None:
    append(store, [ev(created("old", at=T0)), ev(created("new", at=T0 + timedelta(days=10))),
                   ev(used("old", "u1", at=T0 + timedelta(days=1))),
                   ev(used("old", "u2", at=T0 + timedelta(days=20)))])
    rb = fold_log(store, "t", as_of=T0 + timedelta(days=5))
    assert set(rb.projection.notes) == {"old"} and rb.projection.notes["old"].uses == 1


def test_lease_excludes_a_second_projector(store: Any) -> None:
    held = try_lease(store, "t", 60_000)
    assert held is not None
    assert try_lease(store, "t", 60_000) is None
    held.release()
    assert try_lease(store, "t", 60_000) is not None


def test_expired_lease_can_be_taken(store: Any) -> None:
    assert try_lease(store, "t", 50) is not None
    deadline = time.monotonic() + 5
    while store.exists(keys.lock("t")) and time.monotonic() < deadline:
        store.pttl(keys.lock("t"))  # fakeredis expires lazily on access
    assert try_lease(store, "t", 60_000) is not None


def test_ensure_projected_catches_up_inline(store: Any) -> None:
    append(store, _events())
    target = tail(store, "t")
    s = Settings(batch_size=4)
    assert ensure_projected(store, "t", target, s, timeout_s=10) >= target
    assert read_notes(store, "t") == fold_log(store, "t").projection.notes


def test_ensure_projected_times_out_when_lease_is_held(store: Any) -> None:
    from hivemind_memory.events.errors import CatchUpTimeout

    append(store, _events())
    assert try_lease(store, "t", 60_000) is not None  # a projector that hangs
    with pytest.raises(CatchUpTimeout, match="'t'"):
        ensure_projected(store, "t", tail(store, "t"), Settings(), timeout_s=0.3)


def _rt(store: Any, **kw: Any) -> runtime.Runtime:
    rt = runtime.build(Settings(**kw), store, rq_for(store))
    runtime.install(rt)
    return rt


def test_projection_job_reschedules_until_caught_up(store: Any) -> None:
    rt = _rt(store, batch_size=2, max_batches_per_job=1)
    append(store, _events())
    assert schedule_projection(store, rt.project_queue, "t") is True
    assert schedule_projection(store, rt.project_queue, "t") is False  # one queued job per ns
    out = run_projection(store, rt.project_queue, "t", rt.settings)
    assert out["status"] == "more" and store.exists(keys.scheduled("t"))
    assert rt.project_queue.count == 2  # the scheduled one + the re-enqueued one


def test_burst_worker_projects_every_namespace(store: Any) -> None:
    rt = _rt(store, batch_size=3, max_batches_per_job=2)
    evs = [*_events(), ev(created("x", ns="other")), ev(used("x", "ux", ns="other"))]
    append(store, evs)
    for ns in ("t", "other"):
        schedule_projection(store, rt.project_queue, ns)
    assert run_worker(rt, burst=True) == 0
    for ns in ("t", "other"):
        assert checkpoint(store, ns) == tail(store, ns)
        assert read_notes(store, ns) == fold_log(store, ns).projection.notes
        assert not store.exists(keys.scheduled(ns))


def test_burst_worker_sweeps_work_nobody_scheduled(store: Any) -> None:
    rt = _rt(store)
    append(store, _events())  # appended, but no job enqueued (as after a crash)
    assert run_worker(rt, burst=True) == 0
    assert read_notes(store, "t") == fold_log(store, "t").projection.notes


def test_jobs_are_stored_as_json_not_pickle(store: Any) -> None:
    rt = _rt(store)
    schedule_projection(store, rt.project_queue, "t")
    [job_id] = rt.project_queue.job_ids
    data = rt.rq.hget(f"rq:job:{job_id}", "data")
    import zlib

    raw = zlib.decompress(data) if data[:1] == b"x" else data
    assert raw.startswith(b"[") and b"project_namespace" in raw


# --- Hypothesis: interleavings of appends, batches, redeliveries and duplicates -------------

STEP = st.one_of(
    st.tuples(st.just("append"), st.lists(st.tuples(
        st.sampled_from(["c", "u", "u", "u", "f"]), st.sampled_from(["a", "b", "c", "zz"]),
        st.integers(0, 9)), min_size=1, max_size=6)),
    st.tuples(st.just("batch"), st.integers(1, 5)),
    st.tuples(st.just("stale"), st.integers(1, 5)),
)


def _make(kind: str, nid: str, k: int) -> Any:
    if kind == "c":
        return ev(created(nid, eid=f"c{nid}{k % 2}"))
    if kind == "u":
        return ev(used(nid, f"u{k}", at=T0 + timedelta(days=k)))
    return ev(forgotten(nid, f"f{k % 3}"))


@pytest.mark.slow
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(STEP, max_size=25))
def test_any_interleaving_equals_single_in_order_fold(store: Any, steps: list[Any]) -> None:
    store.flushall()
    pending = []
    for step in steps:
        if step[0] == "append":
            append(store, [_make(*x) for x in step[1]])
        elif step[0] == "batch":
            project_batch(store, "t", step[1])
        else:  # fold a batch now, commit it later (a redelivery from a slow or dead worker)
            prep = prepare_batch(store, "t", step[1])
            if prep is not None:
                pending.append(prep)
        if pending and step[0] == "batch":
            commit(store, pending.pop(0), 0)
    for prep in pending:
        commit(store, prep, 0)
    _drain(store, size=4)
    if not store.exists(keys.stream("t")):
        return
    ref = fold_log(store, "t")
    assert read_notes(store, "t") == ref.projection.notes
    assert store.smembers(keys.seen("t")) == {s.encode() for s in ref.projection.seen}
    assert [d.entry for d in read_dead(store, "t")] == [d.entry_id for d in ref.projection.dead]
    assert parse_pos(store.get(keys.checkpoint("t"))) == tail(store, "t")


def test_replay_never_moves_the_checkpoint_back(store: Any) -> None:
    append(store, [ev(created("n1"))])
    _drain(store)
    rb = fold_log(store, "t")  # a replay that folded, then was slow to write
    append(store, [ev(used("n1", "u1"))])
    _drain(store)  # a projector went further meanwhile
    assert write_back(store, "t", rb) is False
    assert checkpoint(store, "t") == tail(store, "t")
    assert read_notes(store, "t")["n1"].uses == 1


def test_a_batch_folded_before_a_replay_cannot_commit_after_it(store: Any) -> None:
    append(store, [ev(created("n1"))])
    _drain(store)
    append(store, [ev(used("n1", "u1"))])
    stale = prepare_batch(store, "t", 10)  # read checkpoint T, not committed yet
    assert stale is not None
    rb = fold_log(store, "t", until=checkpoint(store, "t"))  # the state as of T
    assert write_back(store, "t", rb) is True  # same checkpoint string T, new generation
    assert commit(store, stale, 0) is False
    _drain(store)
    assert read_notes(store, "t")["n1"].uses == 1


def test_replay_write_back_needs_the_lease(store: Any) -> None:
    from hivemind_memory.projections.store.rebuild import LeaseLost

    append(store, [ev(created("n1"))])
    held = try_lease(store, "t", 60_000)
    assert held is not None
    rb = fold_log(store, "t")
    with pytest.raises(LeaseLost):
        write_back(store, "t", rb, token="not-" + held.token)
    assert write_back(store, "t", rb, token=held.token) is True
    assert read_notes(store, "t") == rb.projection.notes


def test_a_write_back_raced_by_a_commit_writes_nothing(store: Any,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from hivemind_memory.projections.store import rebuild

    append(store, [ev(created("n1")), ev(used("n1", "u1"))])
    assert project_batch(store, "t", 1) is not None
    rb = fold_log(store, "t", until=checkpoint(store, "t"))
    before = (store.get(keys.checkpoint("t")), store.hgetall(keys.notes("t")),
              store.smembers(keys.seen("t")), store.get(keys.generation("t")))
    orig = rebuild._write_commands

    def raced(*args: Any) -> Any:  # the checkpoint is WATCHed and read, then a batch commits
        assert project_batch(store, "t", 1) is not None
        yield from orig(*args)

    monkeypatch.setattr(rebuild, "_write_commands", raced)
    assert write_back(store, "t", rb) is False
    after_commit = (store.get(keys.checkpoint("t")), store.hgetall(keys.notes("t")),
                    store.smembers(keys.seen("t")), store.get(keys.generation("t")))
    assert after_commit != before and after_commit[3] == before[3]  # the commit alone landed
    assert read_notes(store, "t")["n1"].uses == 1
    assert checkpoint(store, "t") == tail(store, "t")


def test_ensure_projected_to_a_position_past_the_log_fails_fast(store: Any) -> None:
    from hivemind_memory.events.errors import CatchUpTimeout
    from hivemind_memory.events.positions import format_pos

    ids = append(store, [ev(created("n1")), ev(created("n2"))])
    store.xdel(keys.stream("t"), ids[-1])  # an operator removed the entry a query waits for
    t0 = time.monotonic()
    with pytest.raises(CatchUpTimeout, match="past the end"):
        ensure_projected(store, "t", parse_pos(ids[-1]), Settings(), timeout_s=30)
    assert time.monotonic() - t0 < 10
    assert format_pos(checkpoint(store, "t")) == ids[0]


def test_as_of_never_applies_a_duplicate_the_live_state_ignores(store: Any) -> None:
    append(store, [ev(created("n", at=T0)),
                   ev(used("n", "u1", at=T0 + timedelta(days=20))),  # applied live
                   ev(used("n", "u1", at=T0 + timedelta(days=2)))])  # a duplicate: never
    _drain(store)
    assert read_notes(store, "t")["n"].uses == 1
    at5 = fold_log(store, "t", as_of=T0 + timedelta(days=5)).projection.notes["n"]
    assert at5.uses == 0
    at30 = fold_log(store, "t", as_of=T0 + timedelta(days=30)).projection.notes["n"]
    assert at30.uses == 1 and at30.last_used_at == T0 + timedelta(days=20)
