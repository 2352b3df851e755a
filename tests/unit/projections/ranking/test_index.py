"""The worker's in-memory index: incremental refresh equals a full load; its relevance (the
production path: BM25 via ``scores_over``, numpy cosine) equals the textbook reference in
``tests/support/reference.py``, and identical texts get identical relevance."""

from __future__ import annotations

from typing import Any

import fakeredis
from hypothesis import given, settings
from hypothesis import strategies as st

from hivemind_memory.projections.ranking.index import NamespaceIndex, build_index
from hivemind_memory.projections.store.index_loader import load_index, refresh_index
from hivemind_memory.projections.store.log import append
from hivemind_memory.projections.store.readmodel import project_batch
from tests.support import reference
from tests.support.factories import created, ev, forgotten, used
from tests.support.reference import lexical

CFG = lexical()
VEC = st.lists(st.floats(-1, 1, allow_nan=False, width=32), min_size=3, max_size=3)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["alpha beta", "beta gamma", "gamma", "delta alpha"]),
                          st.one_of(st.none(), VEC, st.just([0.0, 0.0, 0.0]),
                                    st.lists(st.just(0.5), min_size=4, max_size=4)),
                          st.booleans(), st.sampled_from(["", "alice", "bob"])),
                min_size=1, max_size=15),
       VEC, st.sampled_from(["alpha", "gamma delta", "zeta"]), st.sampled_from(["", "alice"]))
def test_vectorised_relevance_matches_reference(rows: list[Any], q: list[float],
                                                text: str, agent: str) -> None:
    from hivemind_memory.projections.reduce import Projection

    notes = {}
    for i, (t, vec, gone, owner) in enumerate(rows):
        private = {"agent": owner, "scope": "private"} if owner else {}
        d = created(f"n{i}", text=t, **private,
                    **({"embedding": vec} if vec is not None else {}))
        p = Projection()
        p.feed([("1-0", ev(d), b"")])
        if gone:
            p.feed([("2-0", ev(forgotten(f"n{i}", f"f{i}")), b"")])
        notes.update(p.notes)
    idx = build_index("t", notes)
    for emb in (q, None):
        got = idx.relevance(text, emb, CFG, agent)
        ref = reference.relevance(notes.values(), text, emb, CFG, agent)
        assert set(got) == set(ref)
        for k in ref:
            assert abs(got[k] - ref[k]) < 1e-9
        # identical texts scored lexically get identical relevance, bit for bit
        by_text: dict[str, set[float]] = {}
        for k, v in got.items():
            e = notes[k].embedding
            if emb is None or e is None or len(e) != len(emb):
                by_text.setdefault(notes[k].text, set()).add(v)
        assert all(len(vs) == 1 for vs in by_text.values())


def test_incremental_refresh_equals_full_load() -> None:
    r = fakeredis.FakeRedis()
    inc = NamespaceIndex("t")
    batches = [
        [created("a", text="redis stream"), created("b", text="lunch menu", embedding=[1, 0])],
        [used("a", "u1"), created("c", text="redis lunch")],
        [forgotten("b", "fb"), used("c", "u2"), created("d", text="stream", embedding=[0, 1])],
        [used("ghost", "ug")],
    ]
    for batch in batches:
        append(r, [ev(d) for d in batch])
        while project_batch(r, "t", 2) is not None:
            pass
        refresh_index(r, inc)
        full = NamespaceIndex("t")
        load_index(r, full)
        assert inc.notes == full.notes
        assert inc.checkpoint == full.checkpoint
        for q in ("redis", "lunch", "stream menu"):
            assert inc.relevance(q, None, CFG) == full.relevance(q, None, CFG)
        assert inc.relevance("x", [0.0, 1.0], CFG) == full.relevance("x", [0.0, 1.0], CFG)
    assert inc.full_loads == 1
    assert "b" not in inc.relevance("lunch", [1.0, 0.0], CFG)


def test_trimmed_changes_stream_forces_full_reload() -> None:
    from hivemind_memory.projections.store import keys

    r = fakeredis.FakeRedis()
    append(r, [ev(created("a"))])
    project_batch(r, "t")
    idx = NamespaceIndex("t")
    refresh_index(r, idx)
    append(r, [ev(created("b"))])
    project_batch(r, "t")
    append(r, [ev(created("c"))])
    project_batch(r, "t")
    # the entries for "b" and our own last one are trimmed away
    r.xtrim(keys.changes("t"), maxlen=1, approximate=False)
    refresh_index(r, idx)
    assert idx.full_loads == 2 and set(idx.notes) == {"a", "b", "c"}


def test_a_worker_start_loads_the_snapshot_then_catches_up_and_replay_drops_it() -> None:
    from hivemind_memory.projections.ranking.snapshot import decode_index, encode_index
    from hivemind_memory.projections.store import keys
    from hivemind_memory.projections.store.rebuild import fold_log, write_back

    r = fakeredis.FakeRedis()
    append(r, [ev(created("a", text="redis stream")), ev(created("b", text="lunch", agent="bob",
                                                                 scope="private"))])
    while project_batch(r, "t", 10) is not None:
        pass
    first = NamespaceIndex("t")
    refresh_index(r, first)  # nothing stored yet: a full load, which writes the snapshot
    assert first.full_loads == 1 and r.exists(keys.index_snapshot("t"))
    append(r, [ev(used("a", "u1")), ev(created("c", text="redis lunch"))])
    while project_batch(r, "t", 10) is not None:
        pass
    second = NamespaceIndex("t")  # a new worker: snapshot, then the changes after it
    refresh_index(r, second)
    assert second.full_loads == 0 and second.snapshot_loads == 1
    full = NamespaceIndex("t")
    load_index(r, full, snapshot=False)
    assert second.notes == full.notes and second.checkpoint == full.checkpoint
    for q, agent in (("redis", ""), ("lunch", "bob"), ("lunch", "alice")):
        assert second.relevance(q, None, CFG, agent) == full.relevance(q, None, CFG, agent)
    # round trip of the pure encoding; another namespace's or version's blob is refused
    again = decode_index(encode_index(second), "t")
    assert again is not None and again.notes == second.notes
    assert decode_index(encode_index(second), "other") is None
    assert decode_index({b"meta": b"not a snapshot"}, "t") is None
    assert decode_index({}, "t") is None
    damaged = encode_index(second)
    damaged[b"uses"] = damaged[b"uses"][:-8]  # one slot short
    assert decode_index(damaged, "t") is None
    # replay deletes it; the next worker loads in full (and writes a fresh one)
    assert write_back(r, "t", fold_log(r, "t"))
    assert not r.exists(keys.index_snapshot("t"))
    third = NamespaceIndex("t")
    refresh_index(r, third)
    assert third.full_loads == 1 and third.notes == full.notes


def test_a_snapshot_from_before_a_replay_is_reloaded_in_full() -> None:
    from hivemind_memory.projections.store import keys
    from hivemind_memory.projections.store.rebuild import fold_log, write_back

    r = fakeredis.FakeRedis()
    append(r, [ev(created("a", text="redis"))])
    project_batch(r, "t")
    refresh_index(r, NamespaceIndex("t"))
    stale = r.hgetall(keys.index_snapshot("t"))
    assert stale
    assert write_back(r, "t", fold_log(r, "t"))
    r.hset(keys.index_snapshot("t"), mapping=stale)  # e.g. a worker wrote it after the replay
    idx = NamespaceIndex("t")
    refresh_index(r, idx)  # snapshot, then the reset entry after it: full load
    assert idx.snapshot_loads == 1 and idx.full_loads == 1


def _askers_index(n: int, askers: int) -> tuple[NamespaceIndex, list[str]]:
    from datetime import UTC, datetime, timedelta

    from hivemind_memory.projections.state import NoteState

    agents = [f"a{i}" for i in range(askers - 1)]
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    notes = {f"n{i:04d}": NoteState(
        note_id=f"n{i:04d}", agent=agents[i % len(agents)],
        scope="private" if i % 5 == 0 else "shared", kind="note",
        text=f"word{i % 13} word{i % 7} shared", tokens=5 + i % 40,
        created_at=t0 + timedelta(minutes=i), forgotten=False) for i in range(n)}
    return build_index("t", notes), ["", *agents]


def test_every_asker_of_a_busy_namespace_keeps_its_layout(monkeypatch: Any) -> None:
    """Nine audiences asking in turn each build their order and layout once (up to
    ``LAYOUTS_KEPT_MAX`` are kept while they hold at most ``LAYOUT_NOTES_KEPT`` notes), not
    once per query as a cache of four did; past the notes bound only ``LAYOUTS_KEPT`` stay."""
    from hivemind_memory.projections.ranking import index as index_mod

    built: list[str] = []
    real = index_mod.layout_of

    def counting(cols: Any, seq: Any, cal: Any) -> Any:
        built.append("x")
        return real(cols, seq, cal)

    monkeypatch.setattr(index_mod, "layout_of", counting)
    idx, askers = _askers_index(600, 9)
    cal = index_mod.RankingConfig().calibration
    first = {a: idx._layout(a, cal) for a in askers}
    for _ in range(3):
        for a in askers:
            seq, lay = idx._layout(a, cal)
            assert seq is first[a][0] and lay is first[a][1]  # kept, not rebuilt
    assert len(built) == 9
    assert len(idx._order_vis) == len(idx._layouts) == 9
    # the same askers over a bound of fewer notes than 9 askers' sequences: the 4 most
    # recently used stay, each asker beyond them is rebuilt when it asks again
    monkeypatch.setattr(index_mod, "LAYOUT_NOTES_KEPT", 4 * 600)
    built.clear()
    for a in askers:  # the first one asked trims the nine to the four most recent
        idx._layout(a, cal)
    assert len(built) == 8
    assert len(idx._layouts) == index_mod.LAYOUTS_KEPT == 4
    assert list(idx._layouts) == [(a, cal) for a in askers[-4:]]
    built.clear()
    for a in askers:
        idx._layout(a, cal)
    assert len(built) == 9  # every one of them again: least recently used first out
