"""The candidate stage of large namespaces (``projections.ranking.dense``,
``calibrated.likely_among``): the candidates' probabilities are ``likely``'s to the bit, the
answer is ``likely``'s whenever every note with evidence is proposed, the HNSW index is
deterministic, and the switch from scanning to candidates sits at ``scan_max_notes``."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import msgspec
import numpy as np
import pytest

from hivemind_memory.api_stub.protocol.messages import QueryRequest
from hivemind_memory.projections.ranking import calibrated
from hivemind_memory.projections.ranking.calibrated import likely, likely_among, named_owners
from hivemind_memory.projections.ranking.config import DEFAULT, Candidates, RankingConfig
from hivemind_memory.projections.ranking.dense import build_dense
from hivemind_memory.projections.ranking.embedders import embedder_for
from hivemind_memory.projections.ranking.index import NamespaceIndex, build_index
from hivemind_memory.projections.ranking.ranker import BatchMemo
from hivemind_memory.projections.state import NoteState
from hivemind_memory.worker.engine import run_rank
from tests.support import numpy_path

NOW = datetime(2026, 6, 1, tzinfo=UTC)
EMBEDDER = embedder_for("wordllama")
assert EMBEDDER is not None
WORDS = ["redis", "persistence", "aof", "snapshot", "replica", "failover", "deploy", "rollout",
         "canary", "kubernetes", "helm", "chart", "latency", "budget", "tokens", "memory",
         "index", "shard", "queue", "worker", "lease", "cache", "eviction", "postgres",
         "vacuum", "migration", "schema", "backup", "restore", "incident", "pager"]


def corpus(n: int, seed: int = 1) -> list[NoteState]:
    """``n`` notes of 3-12 words; creation times in bursts (some notes within minutes of
    each other, so context features vary), three agents, some private, some forgotten."""
    rng = random.Random(seed)
    t = NOW - timedelta(days=400)
    out = []
    for i in range(n):
        t += timedelta(minutes=rng.choice((1, 5, 30, 90, 600, 3000)))
        out.append(NoteState(
            note_id=f"n{i:04d}", agent=rng.choice(("ann", "bob", "cy")),
            scope="private" if rng.random() < 0.15 else "shared", kind="note",
            text=" ".join(rng.choices(WORDS, k=rng.randint(3, 12))),
            tokens=rng.randint(5, 300), created_at=t, forgotten=rng.random() < 0.05))
    return out


def cfg_with(**kw: int) -> RankingConfig:
    return msgspec.structs.replace(DEFAULT, candidates=Candidates(**kw))


def attach(idx: NamespaceIndex, cfg: RankingConfig) -> None:
    got = idx.derived
    assert got is not None
    n = len(idx.cols)
    dense = build_dense(got.mat[:n].astype(np.int8),
                        got.done(n) & (got.norm[:n] > 0) & idx.cols.live[:n],
                        cfg.candidates, got.digest)
    assert idx.attach_dense(dense, idx.cols)


QUERIES = ("redis persistence", "deploy canary rollout", "postgres vacuum backup",
           "worker lease queue", "incident pager latency", "kubernetes helm")


@pytest.mark.parametrize("path", ["native", "numpy"])
def test_every_note_with_evidence_proposed_gives_likelys_answer_to_the_bit(path: str) -> None:
    idx = build_index("t", {n.note_id: n for n in corpus(600)}, EMBEDDER)
    cal = DEFAULT.calibration
    checked = 0
    with numpy_path(calibrated) if path == "numpy" else _nothing():
        for text in QUERIES:
            for agent in ("", "ann", "bob"):
                cos = idx.query_cosines(EMBEDDER.embed([text]))
                assert cos is not None
                c = cos[:, 0]
                seq, lay = idx._layout(agent, cal)
                ls, lx = idx.cols.bm25(text, DEFAULT, agent)
                named = named_owners(idx.cols, text)
                for limit in (5, 50, 10_000):
                    full = likely(idx.cols, seq, ls, lx, c, named, lay, cal, limit)
                    ev = seq[c[seq] >= cal.min_cosine]
                    part = likely_among(idx.cols, seq, lay.pos.astype(np.int64), ls, lx, ev,
                                        lambda s, c=c: c[s], named, cal, limit)
                    assert np.array_equal(full[0], part[0])
                    assert np.array_equal(full[1], part[1])  # the same bits
                    checked += len(full[0])
    assert checked > 500


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def test_a_note_left_unproposed_is_missing_and_the_others_keep_their_bits() -> None:
    extra = [NoteState(note_id=f"v{i}", agent="ann", scope="shared", kind="note", text=t,
                       tokens=12, created_at=NOW - timedelta(days=i), forgotten=False)
             for i, t in enumerate(("the vehicle needs new tyres", "automobile insurance renewal",
                                    "truck engine oil change"))]
    idx = build_index("t", {n.note_id: n for n in corpus(400) + extra}, EMBEDDER)
    # floor 0: the candidate stage is under test, not the probability floor (the default's
    # 0.001 leaves these meaning-only notes of a 403-note namespace out)
    cal = msgspec.structs.replace(DEFAULT.calibration, floor=0.0)
    text = "car"
    cos = idx.query_cosines(EMBEDDER.embed([text]))
    assert cos is not None
    c = cos[:, 0]
    seq, lay = idx._layout("", cal)
    ls, lx = idx.cols.bm25(text, DEFAULT, "")
    full_at, full_p = likely(idx.cols, seq, ls, lx, c, [], lay, cal, 10_000)
    lexical = set(lay.pos[ls].tolist())
    dense_only = [a for a in full_at.tolist() if a not in lexical]
    assert dense_only, "the corpus must have notes found by meaning alone"
    ev = seq[c[seq] >= cal.min_cosine]
    dropped = seq[dense_only[0]]
    part_at, part_p = likely_among(idx.cols, seq, lay.pos.astype(np.int64), ls, lx,
                                   ev[ev != dropped], lambda s: c[s], [], cal, 10_000)
    assert dense_only[0] not in part_at.tolist()
    want = dict(zip(full_at.tolist(), full_p.tolist(), strict=True))
    got = dict(zip(part_at.tolist(), part_p.tolist(), strict=True))
    assert set(got) == set(want) - {dense_only[0]}
    assert all(got[a] == want[a] for a in got)


@pytest.mark.parametrize("path", ["native", "numpy"])
def test_a_window_of_few_notes_is_valued_as_the_large_namespace_it_comes_from(path: str) -> None:
    """Whether a namespace is small (``nearest_max_notes``: its nearest notes are candidates
    whatever the floor, valued by meaning) is the asker's visible notes' count, not the
    candidate window's: a few proposals out of 400 notes keep the scan's bits, and the
    nearest notes found by meaning alone stay under the floor as the scan leaves them."""
    extra = [NoteState(note_id=f"v{i}", agent="ann", scope="shared", kind="note", text=t,
                       tokens=12, created_at=NOW - timedelta(days=i), forgotten=False)
             for i, t in enumerate(("the vehicle needs new tyres", "automobile insurance renewal",
                                    "truck engine oil change"))]
    idx = build_index("t", {n.note_id: n for n in corpus(400) + extra}, EMBEDDER)
    cal = DEFAULT.calibration
    text = "car"  # no word of the corpus: its notes come by meaning only
    cos = idx.query_cosines(EMBEDDER.embed([text]))
    assert cos is not None
    c = cos[:, 0]
    seq, lay = idx._layout("", cal)
    ls, lx = idx.cols.bm25(text, DEFAULT, "")
    near = seq[calibrated.nearest(c[seq], cal)]
    proposed = np.union1d(seq[c[seq] >= cal.min_cosine], near)
    assert len(near) and len(proposed) * 5 < cal.nearest_max_notes < len(seq)
    with numpy_path(calibrated) if path == "numpy" else _nothing():
        full = likely(idx.cols, seq, ls, lx, c, [], lay, cal, 10_000)
        part = likely_among(idx.cols, seq, lay.pos.astype(np.int64), ls, lx, proposed,
                            lambda s: c[s], [], cal, 10_000)
    assert np.array_equal(full[0], part[0])
    assert np.array_equal(full[1], part[1])
    # the nearest are no candidates here (under the floor), as a 5-note namespace's would be
    assert not set(lay.pos[near].tolist()) & set(full[0].tolist())


def test_the_dense_index_is_deterministic_and_finds_a_notes_own_vector_first() -> None:
    idx = build_index("t", {n.note_id: n for n in corpus(500)}, EMBEDDER)
    got = idx.derived
    assert got is not None
    n = len(idx.cols)
    has = got.done(n) & (got.norm[:n] > 0)
    ints = got.mat[:n].astype(np.int8)
    a = build_dense(ints, has, Candidates(), got.digest, chunk=64)
    b = build_dense(ints, has, Candidates(), got.digest, chunk=1_000)
    for s in (3, 77, 311):
        want = a.search(got.mat[s].astype(np.float64), 20)
        assert np.array_equal(want, b.search(got.mat[s].astype(np.float64), 20))
        first = want[0]  # its own vector (or an identical one) is the nearest
        assert np.array_equal(got.mat[first], got.mat[s])


def test_candidates_replace_the_scan_from_scan_max_notes_on() -> None:
    notes = corpus(300)
    idx = build_index("t", {n.note_id: n for n in notes}, EMBEDDER)
    live = idx.indexed()
    at = cfg_with(scan_max_notes=live, dense=512)
    above = cfg_with(scan_max_notes=live + 1, dense=512)
    assert not idx.dense_ready(at)  # nothing built yet
    attach(idx, at)
    assert idx.dense_ready(at)
    assert not idx.dense_ready(above)
    assert not idx.dense_ready(msgspec.structs.replace(at, relevance="bm25"))
    # how many proposals a query keeps and its lexical cap are its own; the settings the
    # index was built and searches with are not
    assert idx.dense_ready(cfg_with(scan_max_notes=live, dense=100, lexical=64))
    for other in ({"connectivity": 4}, {"expansion_add": 8}, {"expansion_search": 600}):
        assert not idx.dense_ready(cfg_with(scan_max_notes=live, dense=512, **other)), other
    idx.reset(notes, idx.checkpoint, idx.checkpoint)  # a full load: a new table
    idx.embed_missing(EMBEDDER)
    assert not idx.dense_ready(at)


def test_a_query_through_the_candidate_path_answers_as_the_scan_when_all_are_proposed() -> None:
    notes = corpus(300)
    idx = build_index("t", {n.note_id: n for n in notes}, EMBEDDER)
    dense = cfg_with(scan_max_notes=1, dense=10_000, expansion_search=10_000)
    attach(idx, dense)
    scan = cfg_with(scan_max_notes=10**9, dense=10_000, expansion_search=10_000)
    used_dense = 0
    for text in QUERIES:
        for agent in ("", "cy"):
            req = QueryRequest(ns="t", text=text, budget=400, agent=agent)
            memo = BatchMemo()
            memo.prime_vectors(idx, [text], EMBEDDER)
            a = run_rank(idx, req, dense, NOW, memo, embedder=EMBEDDER)
            b = run_rank(idx, req, scan, NOW, embedder=EMBEDDER)
            used_dense += idx.dense_ready(dense) and not idx.dense_ready(scan)
            assert msgspec.json.encode(a) == msgspec.json.encode(b)
    assert used_dense == 2 * len(QUERIES)


def test_new_notes_reach_the_dense_index_incrementally() -> None:
    notes = corpus(200)
    idx = build_index("t", {n.note_id: n for n in notes}, EMBEDDER)
    cfg = cfg_with(scan_max_notes=1, dense=8)
    attach(idx, cfg)
    d = idx.dense
    assert d is not None
    before = d.size
    fresh = NoteState(note_id="zz-new", agent="ann", scope="shared", kind="note",
                      text="quokka marsupial rottnest island selfie", tokens=9,
                      created_at=NOW, forgotten=False)
    idx.update([fresh], idx.checkpoint, idx.checkpoint)
    idx.embed_missing(EMBEDDER)
    req = QueryRequest(ns="t", text="quokka rottnest", budget=200)
    res = run_rank(idx, req, cfg, NOW, embedder=EMBEDDER)
    assert d.size == before + 1
    assert [n.note_id for n in res.notes][:1] == ["zz-new"]


def test_a_filter_bounds_the_candidate_path_as_it_bounds_the_scan() -> None:
    notes = [msgspec.structs.replace(n, metadata={"k": i % 7})
             for i, n in enumerate(corpus(300))]
    idx = build_index("t", {n.note_id: n for n in notes}, EMBEDDER)
    dense = cfg_with(scan_max_notes=1, dense=10_000, expansion_search=10_000)
    dense = msgspec.structs.replace(dense, max_candidates=20)
    attach(idx, dense)
    scan = msgspec.structs.replace(dense, candidates=msgspec.structs.replace(
        dense.candidates, scan_max_notes=10**9))
    keep = {n.note_id for n in notes if n.metadata == {"k": 3}}
    for text in QUERIES:
        req = QueryRequest(ns="t", text=text, budget=100, filter={"k": 3})
        memo = BatchMemo()
        memo.prime_vectors(idx, [text], EMBEDDER)
        assert idx.dense_ready(dense) and not idx.dense_ready(scan)
        a = run_rank(idx, req, dense, NOW, memo, embedder=EMBEDDER)
        b = run_rank(idx, req, scan, NOW, embedder=EMBEDDER)
        assert a.notes and {n.note_id for n in a.notes} <= keep
        assert msgspec.json.encode(a) == msgspec.json.encode(b)


@pytest.mark.parametrize("filtered", [False, True])
def test_the_lexical_cap_keeps_the_highest_bm25_hits_and_the_scans_bits(filtered: bool) -> None:
    """``candidates.lexical``: of the BM25 hits only the ``lexical`` highest (among the
    allowed, ties included) seed the candidates; each candidate's probability is still the
    scan's to the bit, since every hit lends its BM25 to its neighbours' context."""
    idx = build_index("t", {n.note_id: n for n in corpus(600)}, EMBEDDER)
    cal = msgspec.structs.replace(DEFAULT.calibration, floor=0.0)
    text = "redis persistence snapshot replica"
    cos = idx.query_cosines(EMBEDDER.embed([text]))
    assert cos is not None
    c = cos[:, 0]
    seq, lay = idx._layout("", cal)
    pos = lay.pos.astype(np.int64)
    ls, lx = idx.cols.bm25(text, DEFAULT, "")
    allowed = np.zeros(len(idx.cols), np.bool_)
    allowed[::2] = True  # every other slot may be a candidate
    ok = allowed if filtered else None
    full_at, full_p = likely(idx.cols, seq, ls, lx, c, [], lay, cal, 10_000, ok)
    want = dict(zip(full_at.tolist(), full_p.tolist(), strict=True))
    pool = ls[allowed[ls]] if filtered else ls
    pool_lx = lx[allowed[ls]] if filtered else lx
    by_bm25 = pos[pool[np.lexsort((pool, -pool_lx))]].tolist()  # the hits, best BM25 first
    best10 = full_at[calibrated.candidates(full_p, 10)].tolist()
    # a cap just below the BM25 rank of the worst of the scan's 10 likeliest: it bites
    cap = max(by_bm25.index(a) for a in best10)
    assert 10 <= cap < len(pool) // 2
    cut = np.sort(pool_lx)[::-1][cap - 1]
    seeds = set(pos[pool[pool_lx >= cut]].tolist())
    no_dense = np.zeros(0, np.int64)
    at, p = likely_among(idx.cols, seq, pos, ls, lx, no_dense, lambda s: c[s], [], cal, 10,
                         ok, lexical=cap)
    among = sorted(seeds & set(want))  # limit 10 <= cap: the 10 likeliest of the seeds
    top = calibrated.candidates(np.array([want[a] for a in among]), 10)
    assert sorted(at.tolist()) == [among[i] for i in top.tolist()]
    assert sorted(at.tolist()) != sorted(best10)  # a note of the scan's answer was cut
    assert all(want[a] == q for a, q in zip(at.tolist(), p.tolist(), strict=True))
    uncapped = likely_among(idx.cols, seq, pos, ls, lx, no_dense, lambda s: c[s], [], cal,
                            10, ok, lexical=len(pool))
    assert sorted(uncapped[0].tolist()) == sorted(best10)


def test_the_dense_stage_proposes_its_count_of_visible_notes_when_most_near_ones_are_not() -> None:
    """The dense stage over-fetches by a quarter; an asker for whom most of the nearest notes
    are someone else's private notes still gets ``dense`` proposals it may see, the nearest
    ones (asked again for more until enough remain or the index has no more)."""
    from hivemind_memory.projections.ranking.vectors import query_vector

    text = "redis persistence snapshot"
    notes = corpus(400, seed=3)
    # bob's private notes: every note about redis (the nearest to the query for ann)
    notes = [msgspec.structs.replace(n, agent="bob", scope="private", forgotten=False)
             if "redis" in n.text else msgspec.structs.replace(n, scope="shared")
             for n in notes]
    idx = build_index("t", {n.note_id: n for n in notes}, EMBEDDER)
    want = 20
    cfg = cfg_with(scan_max_notes=1, dense=want, expansion_search=10_000)
    attach(idx, cfg)
    q = query_vector(EMBEDDER.embed([text])[0])
    vis = idx.cols.visible("ann")
    d = idx.derived
    assert d is not None
    n = len(idx.cols)
    cos = d.rows_cosines(q, np.arange(n))
    has = d.done(n) & (d.norm[:n] > 0) & idx.cols.live[:n]
    first = idx.dense.search(q.near, want + want // 4) if idx.dense else None
    assert first is not None and int(vis[first].sum()) < want  # one search is not enough
    got = idx._dense_near(q, want, vis, None)
    assert len(got) == want and bool(vis[got].all())
    ok = np.sort(cos[has & vis])[::-1]
    assert bool((cos[got] >= ok[want - 1]).all())  # the nearest visible ones


def _check_asker_orders(idx: NamespaceIndex, askers: tuple[str, ...]) -> None:
    n = len(idx.cols)
    for agent in askers:
        seq = idx.visible_order(agent)
        order = idx.asker_order(agent)
        assert len(order) == len(seq)
        everywhere = np.arange(len(seq), dtype=np.int64)
        assert order[everywhere].tolist() == seq.tolist()
        rng = np.random.default_rng(len(seq))
        some = rng.permutation(len(seq))[: max(1, len(seq) // 3)]
        assert order[some].tolist() == seq[some].tolist()
        assert order[np.zeros(0, np.int64)].tolist() == []
        want = np.full(n, -1, np.int64)
        want[seq] = everywhere
        slots = np.arange(n, dtype=np.int64)
        assert order.positions[slots].tolist() == want.tolist()
        assert order.positions[slots[::-7]].tolist() == want[::-7].tolist()


def test_an_askers_order_is_visible_order_read_lazily() -> None:
    # the candidate stage reads each asker's creation order and positions as the shared
    # notes' merged with the asker's own private ones: the same slots at every position and
    # the same position (or -1: another's private note, a forgotten one) for every slot;
    # notes written in the same minute (ties by id), an asker with no note, and again
    # after writes (a new private note, one forgotten) change them
    notes = corpus(400, seed=5)
    for i in range(0, 400, 37):  # ties of creation time
        notes[i] = msgspec.structs.replace(notes[i], created_at=notes[i - 1].created_at)
    idx = build_index("t", {n.note_id: n for n in notes}, None)
    askers = ("", "ann", "bob", "cy", "nobody")
    _check_asker_orders(idx, askers)
    owned = {a: len(idx.asker_order(a).own) for a in askers}
    assert owned[""] == owned["nobody"] == 0 and min(owned["ann"], owned["bob"]) > 0
    first = min(n.created_at for n in notes)
    idx.put(NoteState(note_id="z-new", agent="bob", scope="private", kind="note",
                      text="redis failover", tokens=9, created_at=first - timedelta(days=1)))
    gone = next(n for n in notes if n.scope == "private" and n.agent == "ann"
                and not n.forgotten)
    idx.put(msgspec.structs.replace(gone, forgotten=True))
    _check_asker_orders(idx, askers)
    assert len(idx.asker_order("bob").own) == owned["bob"] + 1
    assert len(idx.asker_order("ann").own) == owned["ann"] - 1
    assert idx.asker_order("bob")[np.zeros(1, np.int64)].tolist() == [
        idx.cols.ids.index("z-new")]


@pytest.mark.parametrize("path", ["native", "numpy"])
def test_a_question_naming_a_time_gets_the_scans_answer_from_the_candidate_stage(
        path: str) -> None:
    """The time window's notes (``calibration.time_window_weight``) join the candidate
    stage's candidates as they join the scan's: with every note proposed, the same answer
    bytes (explain on: every candidate, the windows and their gains), for askers with
    private notes of their own; the windows hold notes and change the answer, so the
    window's part of both paths is compared."""
    notes = corpus(600)
    scan = cfg_with(scan_max_notes=1_000_000)
    cand = cfg_with(scan_max_notes=1, dense=600, lexical=600)
    off = msgspec.structs.replace(scan, calibration=msgspec.structs.replace(
        scan.calibration, time_window_weight=0.0))
    a = build_index("t", {n.note_id: n for n in notes}, EMBEDDER)
    b = build_index("t", {n.note_id: n for n in notes}, EMBEDDER)
    attach(b, cand)
    assert b.dense_ready(cand) and not a.dense_ready(scan)
    moved = 0
    with numpy_path(calibrated) if path == "numpy" else _nothing():
        for text in ("redis persistence ten months ago", "what did I deploy in August",
                     "postgres vacuum backup on October 3", "replica failover in 2025"):
            for agent in ("ann", "bob"):
                req = QueryRequest(ns="t", text=text, budget=800, explain=True, agent=agent)
                got = run_rank(a, req, scan, NOW, embedder=EMBEDDER)
                assert msgspec.json.encode(got) == msgspec.json.encode(
                    run_rank(b, req, cand, NOW, embedder=EMBEDDER))
                [w] = got.time_windows
                assert w.gain > 0 and w.notes
                plain = run_rank(a, req, off, NOW, embedder=EMBEDDER)
                moved += [c.note_id for c in plain.candidates] != \
                    [c.note_id for c in got.candidates]
    assert moved >= 6
