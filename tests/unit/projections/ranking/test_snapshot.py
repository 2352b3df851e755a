"""Notes kept in columns (texts in UTF-8 chunks, embeddings as arrays) give back exactly the
``NoteState``s that were put, through puts, a bulk load, a snapshot round trip and the
incremental changes after it; the snapshot (layout 3, a Redis hash) loads without a per-note
object, and a snapshot of another layout is ignored and rebuilt."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import fakeredis
import msgspec
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hivemind_memory.events.positions import ZERO
from hivemind_memory.projections.ranking import texts as texts_mod
from hivemind_memory.projections.ranking.config import RankingConfig
from hivemind_memory.projections.ranking.index import NamespaceIndex
from hivemind_memory.projections.ranking.ranker import rank_index
from hivemind_memory.projections.ranking.snapshot import (
    SNAPSHOT_VERSION,
    decode_index,
    encode_index,
)
from hivemind_memory.projections.ranking.texts import TextColumn
from hivemind_memory.projections.state import NoteState
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.index_loader import (
    load_index,
    read_snapshot,
    refresh_index,
)
from hivemind_memory.projections.store.log import append
from hivemind_memory.projections.store.readmodel import project_batch
from tests.support.factories import T0, created, ev, forgotten, used

CFG = RankingConfig()
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


@settings(max_examples=80, deadline=None)
@given(st.lists(TEXT, max_size=40), st.integers(1, 64), st.integers(1, 200),
       st.lists(st.integers(0, 60), max_size=20))
def test_text_column_gives_back_every_text(texts: list[str], chunk: int, target: int,
                                           probes: list[int]) -> None:
    old = texts_mod.TEXT_CHUNK
    texts_mod.TEXT_CHUNK = chunk  # many small chunks
    try:
        col = TextColumn()
        for i, t in enumerate(texts):
            col.append(t)
            if i % 7 == 3:
                col.seal()
        assert len(col) == len(texts)
        assert [col.get(s) for s in range(len(texts))] == texts
        some = [p for p in probes if p < len(texts)]
        assert col.many(some) == [texts[s] for s in some]
        chunks, first, off = col.parts(target)
        assert all(len(c) <= max(target, chunk + 4 * 40) for c in chunks)
        assert col.many(list(range(len(texts)))) == texts  # the joined chunks read the same
        again = TextColumn.from_parts(chunks, first, off)
        assert [again.get(s) for s in range(len(texts))] == texts
        again.append("après")
        assert again.get(len(texts)) == "après" and again.many([len(texts)]) == ["après"]
    finally:
        texts_mod.TEXT_CHUNK = old


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(max_size=12), min_size=1, max_size=30), st.integers(0, 40),
       st.lists(st.lists(st.integers(0, 29), max_size=12), max_size=8))
def test_text_column_keeps_what_it_decoded_within_its_bound(
        texts: list[str], cap: int, reads: list[list[int]]) -> None:
    # reads that repeat slots, sealed and unsealed, while the kept texts outgrow a small bound
    old = texts_mod.DECODED_CHARS
    texts_mod.DECODED_CHARS = cap
    try:
        col = TextColumn()
        half = len(texts) // 2
        for t in texts[:half]:
            col.append(t)
        col.seal()
        for t in texts[half:]:
            col.append(t)  # the tail: not sealed
        biggest = 0
        for slots in reads:
            some = [s for s in slots if s < len(texts)]
            biggest = max(biggest, sum(len(texts[s]) for s in set(some)))
            assert col.many(some) == [texts[s] for s in some]
            kept = col.kept()
            assert all(kept[s] == texts[s] for s in kept)
            # within the bound, unless one read alone holds more
            assert col._decoded_chars == sum(len(t) for t in kept.values())
            assert col._decoded_chars <= max(cap, biggest)
    finally:
        texts_mod.DECODED_CHARS = old


def test_text_parts_that_do_not_fit_are_refused() -> None:
    col = TextColumn.of(["alpha", "beta", "gamma"])
    chunks, first, off = col.parts()
    with pytest.raises(ValueError):
        TextColumn.from_parts([chunks[0][:-1]], first, off)
    with pytest.raises(ValueError):
        TextColumn.from_parts(chunks, [1], off)
    with pytest.raises(ValueError):
        TextColumn.from_parts([], [], off)
    assert TextColumn.from_parts([], [], np.zeros(1, np.int64)).many([]) == []


WORDS = ["redis", "stream", "lunch", "café", "deploy", "argo", "x_y", "v2", "Ｃａｆé!"]
AGENTS = ["alice", "bob"]
VEC = st.one_of(st.none(), st.lists(st.floats(-1, 1, allow_nan=False), min_size=2,
                                    max_size=2),
                st.lists(st.floats(-1, 1, allow_nan=False), min_size=3, max_size=3))


@st.composite
def note_states(draw: st.DrawFn) -> NoteState:
    i = draw(st.integers(0, 25))
    used_days = draw(st.one_of(st.none(), st.integers(0, 900)))
    return NoteState(
        note_id=f"n{i:02d}", agent=draw(st.sampled_from(AGENTS)),
        scope=draw(st.sampled_from(["shared", "private"])),
        kind=draw(st.sampled_from(["note", "scratch"])),
        text=" ".join(draw(st.lists(st.sampled_from(WORDS), max_size=8))),
        tokens=draw(st.integers(1, 500)),
        created_at=T0 - timedelta(microseconds=draw(st.integers(0, 10**14))),
        uses=draw(st.integers(0, 9)),
        last_used_at=None if used_days is None else T0 + timedelta(days=used_days, seconds=1),
        forgotten=draw(st.booleans()), embedding=draw(VEC))


def _same_answers(a: NamespaceIndex, b: NamespaceIndex) -> None:
    for q, emb, agent in (("redis lunch", None, ""), ("café", None, "alice"),
                          ("stream deploy", [0.5, -0.25], "bob"), ("v2", [1.0, 0.0, 1.0], "")):
        sa, ra = a.relevance_slots(q, emb, CFG, agent)
        sb, rb = b.relevance_slots(q, emb, CFG, agent)
        assert a.relevance(q, emb, CFG, agent) == b.relevance(q, emb, CFG, agent)
        got = [rank_index(x, s, r, agent=agent, now=T0 + timedelta(days=3), budget=300,
                          cfg=CFG) for x, s, r in ((a, sa, ra), (b, sb, rb))]
        assert msgspec.json.encode(got[0]) == msgspec.json.encode(got[1])


def _note(i: int, at: timedelta, text: str) -> NoteState:
    return NoteState(note_id=f"n{i:02d}", agent="alice", scope="shared", kind="note", text=text,
                     tokens=10, created_at=T0 + at)


@settings(max_examples=80, deadline=None)
@given(st.lists(note_states(), max_size=25), st.lists(note_states(), max_size=15))
# found on a fresh machine: the same note put again 1 µs earlier kept the slot, and the answers
# showed the creation time converted before the put
@pytest.mark.slow
@example(first=[_note(0, timedelta(0), "redis redis redis redis redis")],
         later=[_note(0, timedelta(microseconds=-1), "redis redis redis redis redis")])
def test_notes_survive_puts_bulk_snapshot_and_changes_after_it(
        first: list[NoteState], later: list[NoteState]) -> None:
    truth: dict[str, NoteState] = {}
    live = NamespaceIndex("t")
    for n in first:
        live.put(n)
        truth[n.note_id] = n
    assert dict(live.notes) == truth
    bulk = NamespaceIndex("t")
    bulk.reset(truth.values(), live.checkpoint, live.checkpoint)
    assert dict(bulk.notes) == truth
    _same_answers(live, bulk)
    snap = decode_index(encode_index(bulk), "t")
    assert snap is not None and dict(snap.notes) == truth
    _same_answers(snap, bulk)
    # the decoded index takes changes (read-only CSR base, sealed texts): new notes, new
    # texts, uses, forgets, a note coming back, then a compaction
    for n in later:
        snap.put(n)
        truth[n.note_id] = n
    assert dict(snap.notes) == truth
    fresh = NamespaceIndex("t")
    fresh.reset(truth.values(), snap.checkpoint, snap.checkpoint)
    _same_answers(snap, fresh)
    snap.cols.compact(force=True)
    _same_answers(snap, fresh)
    again = decode_index(encode_index(snap), "t")
    assert again is not None and dict(again.notes) == truth


@pytest.mark.parametrize("decoded", [False, True])
def test_a_note_put_again_at_another_creation_time_answers_like_a_fresh_build(
        decoded: bool) -> None:
    # n03 keeps its slot (same text, scope and owner) and its creation time is rewritten in
    # place: what was worked out from the old time before the put (the datetime an answer
    # shows, the creation order whose neighbours give the calibrated model its context) must
    # not outlive it
    minute = timedelta(minutes=1)
    notes = [_note(0, 0 * minute, "redis stream"), _note(1, minute, "lunch"),
             _note(2, 2 * minute, "deploy"), _note(3, 3 * minute, "redis argo argo argo")]
    moved = _note(3, -minute, "redis argo argo argo")  # now just before n00: its neighbour
    idx = NamespaceIndex("t")
    idx.reset(notes, ZERO, ZERO)
    if decoded:
        got = decode_index(encode_index(idx), "t")
        assert got is not None
        idx = got
    now = T0 + timedelta(days=3)

    def answer(x: NamespaceIndex) -> bytes:
        slots, rel = x.relevance_slots("redis", None, CFG)
        return msgspec.json.encode(rank_index(x, slots, rel, agent="", now=now, budget=300,
                                              cfg=CFG))

    answer(idx)  # the caches filled from the old time
    idx.put(moved)
    assert idx.notes["n03"] == moved
    fresh = NamespaceIndex("t")
    fresh.reset([*notes[:3], moved], ZERO, ZERO)
    assert idx.relevance("redis", None, CFG) == fresh.relevance("redis", None, CFG)
    assert answer(idx) == answer(fresh)
    shown = msgspec.json.decode(answer(idx))["notes"]
    assert {n["note_id"]: n["created_at"] for n in shown}["n03"] == "2025-12-31T23:59:00Z"


def _project(r: fakeredis.FakeRedis, events: list[dict[str, object]]) -> None:
    append(r, [ev(d) for d in events])
    while project_batch(r, "t", 10) is not None:
        pass


def test_snapshot_round_trip_through_redis_keeps_embeddings_and_catches_up() -> None:
    r = fakeredis.FakeRedis()
    _project(r, [created("a", text="redis stream", embedding=[1, 0]),
                 created("b", text="lunch menu", embedding=[0.6, 0.8]),
                 created("c", text="redis lunch", agent="bob", scope="private"),
                 created("d", text="stream", embedding=[1, 2, 3])])
    first = NamespaceIndex("t")
    refresh_index(r, first)  # full load, writes the snapshot
    assert r.type(keys.index_snapshot("t")) == b"hash"
    _project(r, [used("a", "u1"), forgotten("b", "fb"), created("e", text="lunch", agent="bob",
                                                                 embedding=[0, 1])])
    second = NamespaceIndex("t")
    refresh_index(r, second)
    assert second.snapshot_loads == 1 and second.full_loads == 0
    full = NamespaceIndex("t")
    load_index(r, full, snapshot=False)
    assert second.notes == full.notes
    assert second.notes["a"].uses == 1 and second.notes["a"].last_used_at is not None
    assert second.notes["b"].forgotten and second.notes["d"].embedding == [1.0, 2.0, 3.0]
    for q, emb, agent in (("lunch", [0.0, 1.0], "bob"), ("redis", [1.0, 0.0], ""),
                          ("x", [1.0, 2.0, 3.0], "alice"), ("lunch", None, "alice")):
        assert second.relevance(q, emb, CFG, agent) == full.relevance(q, emb, CFG, agent)
    assert "b" not in second.relevance("lunch", [0.6, 0.8], CFG)
    # a damaged snapshot is refused (the caller then loads in full)
    good = encode_index(second)
    assert decode_index(good, "t") is not None
    for field, value in ((b"vec_slot", np.array([99, 0, 1, 3], "<i8").tobytes()),
                         (b"text_off", good[b"text_off"][:-8]),
                         (b"base_slot", good[b"base_slot"][:-4]),
                         (b"ids", b"a\nb"),
                         (b"meta", good[b"meta"][:-1])):
        assert decode_index({**good, field: value}, "t") is None, field
    assert decode_index({k: v for k, v in good.items() if k != b"text.0"}, "t") is None


def test_a_snapshot_of_an_older_layout_is_ignored_rebuilt_and_deleted() -> None:
    r = fakeredis.FakeRedis()
    _project(r, [created("a", text="redis"), created("b", text="lunch")])
    old = [f"hm:{{t}}:index:v{v}" for v in range(1, SNAPSHOT_VERSION)]
    assert old and keys.old_index_snapshots("t") == old
    for k in old:  # what a worker of layout 1 left (one msgpack string)
        r.set(k, msgspec.msgpack.encode([1, "t", "0-0", "0-0", [], [], [], [], {}, b"", b"",
                                         b""]))
    idx = NamespaceIndex("t")
    refresh_index(r, idx)
    assert idx.snapshot_loads == 0 and idx.full_loads == 1
    assert not any(r.exists(k) for k in old) and r.exists(keys.index_snapshot("t"))
    assert set(keys.namespace_keys("t")) >= {keys.index_snapshot("t"), *old}
    # a hash under this layout's key that says another version is refused too
    fields = r.hgetall(keys.index_snapshot("t"))
    meta = msgspec.msgpack.decode(fields[b"meta"])
    meta[0] = SNAPSHOT_VERSION - 1
    r.hset(keys.index_snapshot("t"), b"meta", msgspec.msgpack.encode(meta))
    assert not read_snapshot(r, NamespaceIndex("t"))
    # and so is a string under it (WRONGTYPE): the next load writes a hash again
    r.delete(keys.index_snapshot("t"))
    r.set(keys.index_snapshot("t"), b"not a hash")
    third = NamespaceIndex("t")
    refresh_index(r, third)
    assert third.full_loads == 1 and third.notes == idx.notes
    assert read_snapshot(r, NamespaceIndex("t"))


def test_a_snapshot_is_assembled_in_a_draft_and_a_lost_draft_writes_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from hivemind_memory.projections.store.index_loader import write_snapshot

    r = fakeredis.FakeRedis()
    _project(r, [created("a", text="redis"), created("b", text="lunch")])
    idx = NamespaceIndex("t")
    refresh_index(r, idx)
    assert r.exists(keys.index_snapshot("t")) and r.ttl(keys.index_snapshot("t")) == -1
    assert not list(r.scan_iter(match="*draft*"))
    before = r.hgetall(keys.index_snapshot("t"))
    _project(r, [created("c", text="redis lunch")])
    refresh_index(r, idx)
    from hivemind_memory.projections.store import index_loader

    real_script = index_loader.script

    def expired_first(store: Any, name: str) -> Any:
        run = real_script(store, name)

        def go(keys: list[str], args: list[Any]) -> Any:
            store.delete(keys[0])  # as if the draft's TTL ran out before the rename
            return run(keys=keys, args=args)
        return go

    monkeypatch.setattr(index_loader, "script", expired_first)
    write_snapshot(r, idx)
    assert r.hgetall(keys.index_snapshot("t")) == before  # the stored one stays as it was
    assert not list(r.scan_iter(match="*draft*"))
    monkeypatch.undo()
    write_snapshot(r, idx)
    fresh = NamespaceIndex("t")
    assert read_snapshot(r, fresh) and fresh.notes == idx.notes and "c" in fresh.notes


class _Other:
    """Another embedder (another digest, other vectors) for the re-embedding test."""

    name = "other"
    dim = 4

    def digest(self) -> str:
        return "other:1"

    def embed(self, texts: list[str]) -> np.ndarray:
        return np.array([[len(t), t.count("e"), 1.0, 0.0] for t in texts])


def test_derived_vectors_live_in_the_snapshot_and_another_embedder_re_embeds() -> None:
    from hivemind_memory.projections.ranking.embedders import embedder_for
    from hivemind_memory.projections.store.rebuild import fold_log, write_back

    emb = embedder_for("wordllama")
    assert emb is not None
    r = fakeredis.FakeRedis()
    _project(r, [created("a", text="redis stream"), created("b", text="lunch menu"),
                 created("c", text="redis lunch", agent="bob", scope="private"),
                 created("d", text="!!!")])  # no words: embedded, no vector
    first = NamespaceIndex("t")
    refresh_index(r, first, emb)  # full load: embedded, then the snapshot written
    assert first.embedded == 4 and first.derived is not None
    assert first.derived.digest == emb.digest()
    assert r.hget(keys.index_snapshot("t"), b"dvec") is not None
    _project(r, [created("e", text="stream of lunch")])
    second = NamespaceIndex("t")
    refresh_index(r, second, emb)  # the snapshot's vectors, then only the new note embedded
    assert second.snapshot_loads == 1 and second.embedded == 1 and second.derived is not None
    n = len(first.cols)
    slot = second.cols.slot
    for k in "abcd":
        assert (second.derived.mat[slot[k]] == first.derived.mat[first.cols.slot[k]]).all()
    assert second.derived.norm[slot["d"]] == 0.0 and second.derived.done(n + 1)[slot["d"]]
    fresh = NamespaceIndex("t")
    load_index(r, fresh, snapshot=False, embedder=emb)
    q = emb.embed(["redis lunch"])
    got, want = second.query_cosines(q), fresh.query_cosines(q)
    assert got is not None and want is not None
    for k in "abcde":
        assert got[slot[k], 0] == want[fresh.cols.slot[k], 0]  # the same bits
    # a worker with another embedder: every note re-embedded, the snapshot rewritten
    third = NamespaceIndex("t")
    refresh_index(r, third, _Other())
    assert third.embedded == 5 and third.derived is not None
    assert third.derived.digest == "other:1" and third.derived.dim == 4
    meta = msgspec.msgpack.decode(r.hget(keys.index_snapshot("t"), b"meta"))
    assert "other:1" in meta
    # replay deletes the snapshot: the vectors are computed again from the texts
    assert write_back(r, "t", fold_log(r, "t"))
    fourth = NamespaceIndex("t")
    refresh_index(r, fourth, emb)
    assert fourth.full_loads == 1 and fourth.embedded == 5
