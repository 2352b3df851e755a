"""Erasure on every store (fakeredis, a real redis-server, a Redis Cluster): the log rewrite
keeps ids and counters, replay equals live, dead letters, results and snapshots lose the
content, concurrent appenders and the projector lose nothing."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import msgspec
import pytest

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.events.codec import decode_event
from hivemind_memory.events.errors import UnknownNote
from hivemind_memory.events.positions import Position
from hivemind_memory.projections.ranking.index import NamespaceIndex
from hivemind_memory.projections.store import erasure, keys
from hivemind_memory.projections.store.index_loader import load_index, write_snapshot
from hivemind_memory.projections.store.readmodel import project_batch, read_dead, read_notes
from hivemind_memory.projections.store.rebuild import diff_notes, fold_log, live_snapshot
from hivemind_memory.worker import runtime
from hivemind_memory.worker.loop import run_worker
from tests.support import rq_for
from tests.support.factories import T0, created, iso, used

SECRET = "the vault passphrase is zebra-quartz-4471"
EMB = [0.7182818284590452, -0.3141592653589793]


def _client(store: Any) -> Client:
    return Client(store, rq_for(store), settings=Settings())


def _drain(store: Any, ns: str = "t") -> None:
    while project_batch(store, ns) is not None:
        pass


def _catch_up(store: Any) -> Any:
    def go(ns: str, target: Position, timeout_s: float) -> None:
        _drain(store, ns)
    return go


def _revised(nid: str, eid: str, text: str) -> dict[str, Any]:
    return {"type": "note.revised", "event_id": eid, "ns": "t", "note_id": nid, "agent": "a",
            "at": iso(T0 + timedelta(days=1)), "text": text}


def _log() -> list[dict[str, Any]]:
    return [created("s", text=SECRET, embedding=EMB), created("k", text="keep this zebra note"),
            used("s", "u1"), _revised("s", "r1", SECRET + " rotated"),
            created("s", eid="c-dup", text=SECRET + " twice")]  # a dead letter with content


def _raw_entries(store: Any, key: str) -> list[tuple[bytes, dict[bytes, bytes]]]:
    return [(bytes(i), dict(f)) for i, f in store.xrange(key)]


def _holds_secret(store: Any) -> bool:
    blobs = [v for _, f in _raw_entries(store, keys.stream("t")) for v in f.values()]
    blobs += [v for _, f in _raw_entries(store, keys.dead("t")) for v in f.values()]
    blobs += list(store.hgetall(keys.notes("t")).values())
    return any(b"zebra-quartz" in b for b in blobs)


def test_erasure_rewrites_the_log_in_place_and_replay_equals_live(store: Any) -> None:
    c = _client(store)
    c.append(_log())
    _drain(store)
    before = _raw_entries(store, keys.stream("t"))
    assert _holds_secret(store)
    got = c.erase("t", ["s"], catch_up=_catch_up(store))
    assert got.redaction.erased == ["s"] and len(got.event_ids) == 1
    assert got.redaction.events == 3 and got.redaction.dead == 1  # created, revised, dup
    after = _raw_entries(store, keys.stream("t"))
    assert [i for i, _ in after[:len(before)]] == [i for i, _ in before]  # same ids
    for (_, old), (_, new) in zip(before, after, strict=False):
        e_old, e_new = decode_event(old[b"d"]), decode_event(new[b"d"])
        if e_old.note_id == "s" and e_old.event_id in ("c-s", "r1", "c-dup"):
            assert e_new.text == "" and e_new.redacted is not None  # type: ignore[union-attr]
            assert e_new.event_id == e_old.event_id
        else:
            assert new == old  # every other entry byte for byte
    assert decode_event(after[-1][1][b"d"]).note_id == "s"  # the note.erased itself
    assert not _holds_secret(store)
    cp, live = live_snapshot(store, "t")
    assert diff_notes(live, fold_log(store, "t", until=cp).projection.notes) == []
    assert live["s"].erased and live["k"].text == "keep this zebra note"
    assert len(read_dead(store, "t")) == 1


def test_erasure_keeps_the_stream_counters_and_later_appends_continue(store: Any) -> None:
    c = _client(store)
    c.append(_log())
    _drain(store)
    c.erase("t", ["s"], catch_up=_catch_up(store))
    info = store.xinfo_stream(keys.stream("t"))
    assert info["entries-added"] == info["length"] == len(_log()) + 1
    assert info["last-generated-id"] == store.xrevrange(keys.stream("t"), count=1)[0][0]
    c.append([created("later", text="after the erasure")])
    _drain(store)
    assert "later" in read_notes(store, "t")
    assert not store.exists(keys.rewrite("t"))


def test_erase_of_an_unknown_note_appends_nothing(store: Any) -> None:
    c = _client(store)
    c.append(_log())
    n = store.xlen(keys.stream("t"))
    with pytest.raises(UnknownNote, match="nope"):
        c.erase("t", ["nope"], catch_up=_catch_up(store))
    assert store.xlen(keys.stream("t")) == n


def test_an_erasure_cut_short_is_completed_by_erasing_again(store: Any) -> None:
    """A crash after the note.erased landed but before the rewrite: erasing again appends
    nothing and completes the redaction; a third run changes nothing."""
    c = _client(store)
    c.append([*_log(), {"type": "note.erased", "event_id": "x0", "ns": "t", "note_id": "s",
                        "agent": "ops", "at": iso(T0 + timedelta(days=3)), "as_admin": True}])
    _drain(store)
    assert read_notes(store, "t")["s"].erased and _holds_secret(store)
    n = store.xlen(keys.stream("t"))
    got = c.erase("t", ["s"], catch_up=_catch_up(store))
    assert got.event_ids == [] and got.redaction.events == 3
    assert store.xlen(keys.stream("t")) == n and not _holds_secret(store)
    again = c.erase("t", ["s"], catch_up=_catch_up(store))
    assert erasure.erasure_counts(again.redaction) == dict.fromkeys(
        erasure.erasure_counts(again.redaction), 0)


def test_redact_leaves_a_note_that_is_not_erased_alone(store: Any) -> None:
    c = _client(store)
    c.append(_log())
    _drain(store)
    red = erasure.redact(store, "t", ["s"])  # no note.erased: nothing may be redacted
    assert red.not_erased == ["s"] and red.events == 0 and _holds_secret(store)


def test_results_showing_the_note_become_erased_errors_and_snapshots_go(store: Any) -> None:
    s = Settings()
    rt = runtime.build(s, store, rq_for(store))
    runtime.install(rt)
    c = Client(store, rq_for(store), settings=s)
    c.append(_log())
    shown = c.submit_query("t", "vault passphrase zebra", 500, agent="b")
    other = c.submit_query("t", "keep note", 500, agent="b")
    assert run_worker(rt, burst=True) == 0
    assert [n["note_id"] for n in c.result(shown)["notes"]][:1] == ["s"]
    assert store.exists(keys.index_snapshot("t"))  # the worker's full load wrote one
    stale = NamespaceIndex("t")
    load_index(store, stale, snapshot=False)  # an index loaded before the erasure
    got = c.erase("t", ["s"], catch_up=_catch_up(store))
    assert got.redaction.snapshots >= 1 and not store.exists(keys.index_snapshot("t"))
    body = c.result(shown)
    assert body["error"]["code"] == "erased" and "zebra" not in msgspec.json.encode(body).decode()
    assert got.redaction.results == 1
    assert all(n["note_id"] != "s" for n in c.result(other).get("notes", []))
    write_snapshot(store, stale)  # the fence: an index from before never stores its text
    assert not store.exists(keys.index_snapshot("t"))
    fresh = NamespaceIndex("t")
    load_index(store, fresh)  # one loaded after the erasure does
    assert store.exists(keys.index_snapshot("t"))
    blob = b"".join(store.hgetall(keys.index_snapshot("t")).values())
    assert b"zebra-quartz" not in blob and b"keep this zebra note" in blob


@pytest.mark.slow
def test_appenders_and_the_projector_lose_nothing_while_the_log_is_rewritten(
        store: Any) -> None:
    """Writers keep appending (uses of the erased note too, whose entries name it) and a
    projector keeps folding while the erasure copies and swaps the stream: every entry is
    there once, in order, and replay equals live."""
    c = _client(store)
    c.append([*_log(), *[created(f"f{i}", text=f"filler note {i}") for i in range(1500)]])
    _drain(store)
    before = [i for i, _ in store.xrange(keys.stream("t"))]
    stop = threading.Event()
    appended: list[str] = []
    errors: list[BaseException] = []

    def appender() -> None:
        try:
            w = _client(store)
            i = 0
            while not stop.is_set() or i < 60:
                batch = [used("s" if i % 3 == 0 else f"f{i % 1500}", f"w{i}-{j}")
                         for j in range(5)]
                w.append(batch)
                appended.extend(e["event_id"] for e in batch)
                i += 1
        except BaseException as exc:
            errors.append(exc)

    def projector() -> None:
        try:
            while not stop.is_set():
                _drain(store)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=appender), threading.Thread(target=projector)]

    def wait(ns: str, target: Position, timeout_s: float) -> None:
        # the note.erased is in (a checked append under a stream of writers could keep
        # losing its compare-and-set): from here on writers and the projector run while the
        # erasure waits for the fold, then copies and swaps the stream
        for t in threads:
            t.start()
        assert c.wait_projected(ns, 30)

    try:
        got = c.erase("t", ["s"], catch_up=wait)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not errors, errors
    assert got.redaction.events == 3
    entries = [(bytes(i), decode_event(f[b"d"])) for i, f in store.xrange(keys.stream("t"))]
    ids = [i for i, _ in entries]
    assert ids == sorted(ids, key=lambda x: tuple(map(int, x.split(b"-"))))
    assert len(set(ids)) == len(ids) and ids[:len(before)] == before
    eids = [e.event_id for _, e in entries]
    assert len(eids) == len(set(eids)) == len(before) + len(appended) + 1
    assert set(appended) <= set(eids)
    _drain(store)
    cp, live = live_snapshot(store, "t")
    assert diff_notes(live, fold_log(store, "t", until=cp).projection.notes) == []
    assert not _holds_secret(store)


def test_the_projector_queues_the_redaction_of_what_it_folds(store: Any) -> None:
    """An erasure that reached the log without its redaction (appended by ``ingest``, or a
    crash after the append), and content written later for an erased note (dead-lettered):
    the worker that folds them redacts them."""
    s = Settings()
    rt = runtime.build(s, store, rq_for(store))
    runtime.install(rt)
    c = Client(store, rq_for(store), settings=s)
    c.append([*_log(), {"type": "note.erased", "event_id": "x0", "ns": "t", "note_id": "s",
                        "agent": "ops", "at": iso(T0 + timedelta(days=3)), "as_admin": True}])
    assert run_worker(rt, burst=True) == 0
    assert read_notes(store, "t")["s"].erased and not _holds_secret(store)
    c.append([_revised("s", "r-late", "written after: zebra-quartz-late"),
              created("s", eid="c-late", text="reused id: zebra-quartz-again")])
    assert run_worker(rt, burst=True) == 0
    assert [d.reason.split(": ")[1] for d in read_dead(store, "t")][-2:] == ["erased_note"] * 2
    assert not _holds_secret(store)
    cp, live = live_snapshot(store, "t")
    assert diff_notes(live, fold_log(store, "t", until=cp).projection.notes) == []


@pytest.mark.parametrize("job_first", [False, True])
def test_the_erase_answer_counts_the_copies_redacted_in_all_whoever_ran_first(
        store: Any, job_first: bool) -> None:
    """The projector queues a redaction job when it folds the ``note.erased``. Run before
    the call's own redaction (``job_first``), the job rewrites every copy and the call
    finds nothing left (its ``redaction`` counts 0); run after, the job finds nothing left.
    Either way ``in_all`` counts every copy now redacted: the three content events in the
    log, the dead letter, the audit entry and the query embedding of a query that quoted
    the note; erasing again rewrites nothing and counts the same ``in_all``."""
    s = Settings()
    rt = runtime.build(s, store, rq_for(store))
    runtime.install(rt)
    c = Client(store, rq_for(store), settings=s)
    c.append(_log())
    qid = c.submit_query("t", SECRET, 500, agent="b", embedding=EMB)  # quotes the note
    assert run_worker(rt, burst=True) == 0
    assert "s" in [n["note_id"] for n in c.result(qid, timeout=5)["notes"]]

    def worker_first(ns: str, target: Position, timeout_s: float) -> None:
        assert run_worker(rt, burst=True) == 0  # folds the erasure, runs its redaction job

    got = c.erase("t", ["s"], catch_up=worker_first if job_first else _catch_up(store))
    assert not _holds_secret(store)
    mine = erasure.erasure_counts(got.redaction)
    rewritten = {"log_entries": 3, "dead_letters": 1, "audit_entries": 1,
                 "query_embeddings": 1}
    assert {k: mine[k] for k in rewritten} == (dict.fromkeys(rewritten, 0) if job_first
                                               else rewritten)
    assert got.in_all == rewritten
    assert run_worker(rt, burst=True) == 0  # the job, if it had not run: nothing left
    again = c.erase("t", ["s"], catch_up=_catch_up(store))
    assert again.event_ids == [] and again.in_all == rewritten
    assert {k: v for k, v in erasure.erasure_counts(again.redaction).items()
            if k != "snapshot_keys"} == dict.fromkeys(set(mine) - {"snapshot_keys"}, 0)


@pytest.mark.parametrize("as_of", [False, True])
def test_an_answer_ranked_before_an_erasure_and_published_after_it_is_redacted(
        store: Any, as_of: bool) -> None:
    """A query job ranks a wave, an erasure runs (and sweeps the result keys) before the
    wave is published: the job sees the fence move with its own write and turns its answer
    that showed the erased note into an ``erased`` error; its kept as-of fold goes too."""
    from hivemind_memory.api_stub.protocol.messages import Envelope
    from hivemind_memory.projections.store import results
    from hivemind_memory.worker.engine import QueryEngine

    s = Settings()
    rt = runtime.build(s, store, rq_for(store))
    runtime.install(rt)
    c = Client(store, rq_for(store), settings=s)
    c.append(_log())
    _drain(store)
    kw: dict[str, Any] = {"as_of": iso(T0 + timedelta(days=2))} if as_of else {}
    qid = c.submit_query("t", "vault passphrase zebra", 500, agent="b", **kw)
    [job] = rt.query_queue.jobs
    envs = [msgspec.convert(e, Envelope) for e in job.args[0]]
    job.delete()
    engine = QueryEngine(store, rt.cfg, s, project_queue=rt.project_queue)

    def erase_then_publish(wave: list[Any]) -> None:
        assert "zebra-quartz" in (wave[0].body or b"").decode()  # ranked with the content
        c.erase("t", ["s"], catch_up=_catch_up(store))
        engine._publish(wave, pub)

    with results.Publisher(store) as pub:
        engine.answer(envs, erase_then_publish)
    body = c.result(qid, timeout=5)
    assert body["error"]["code"] == "erased"
    assert b"zebra-quartz" not in store.get(keys.result("t", qid))
    assert not [k for k in engine.as_of if k[0] == "t"]
