"""Calibrated relevance's per-note arithmetic in C (``projections/ranking/_calibrated.c``)
against the numpy code it replaces on the query path (``calibrated.signals``,
``probability``, ``evidence``, ``candidates``: the reference): the same candidates and the same
probability bits on every input, with every signal varying (BM25 hits, cosines of either sign
or none, caller embeddings, the context window and its width, named authors, the floor, the
candidate limit). Without the compiled module these skip on a laptop and fail under
``CI=true``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hivemind_memory.projections.ranking import calibrated
from hivemind_memory.projections.ranking.calibrated import layout_of, likely
from hivemind_memory.projections.ranking.config import DEFAULT, Calibration, RankingConfig
from hivemind_memory.projections.ranking.index import NamespaceIndex, build_index
from hivemind_memory.projections.state import NoteState
from tests.support import built_native, numpy_path

NOW = datetime(2026, 6, 1, tzinfo=UTC)
WORDS = ["alpha", "beta", "gamma", "delta", "kiwi", "plum", "ann", "bob", "ship", "deploy"]
AGENTS = ["ann", "bob", "cy"]


@pytest.fixture(scope="module")
def native() -> ModuleType:
    return built_native(calibrated,
                        "the calibrated kernel (hivemind_memory.projections.ranking._calibrated)")


def _both(idx: NamespaceIndex, text: str, agent: str, cosine: Any, cal: Calibration,
          limit: int) -> tuple[tuple[list[int], bytes], tuple[list[int], bytes]]:
    """``likely`` with the C path, then with the numpy path: (positions, probability bytes)."""
    cols = idx.cols
    cfg = RankingConfig(calibration=cal)
    seq = idx.visible_order(agent)
    lay = layout_of(cols, seq, cal)
    lex_slots, lex = cols.bm25(text, cfg, agent)
    named = calibrated.named_owners(cols, text)

    def run() -> tuple[list[int], bytes]:
        at, p = likely(cols, seq, lex_slots, lex, cosine, named, lay, cal, limit)
        return at.tolist(), p.tobytes()

    got = run()
    with numpy_path(calibrated):
        want = run()
    return got, want


def fitted(**changes: Any) -> Calibration:
    """The default (fitted) calibration with ``changes``."""
    return msgspec.structs.replace(DEFAULT.calibration, **changes)


notes_strategy = st.lists(
    st.tuples(st.lists(st.sampled_from(WORDS), min_size=1, max_size=6),  # words
              st.sampled_from(AGENTS), st.booleans(),  # agent, private
              st.integers(0, 90), st.integers(1, 3_000)),  # minutes after the last, tokens
    min_size=1, max_size=40)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(notes=notes_strategy,
       query=st.lists(st.sampled_from(WORDS), min_size=0, max_size=4),
       agent=st.sampled_from(["", *AGENTS]),
       cosines=st.one_of(st.none(), st.lists(
           st.one_of(st.floats(-1.0, 1.0), st.sampled_from([0.0, -0.0, 0.45, 1.0, -1.0])),
           min_size=40, max_size=40)),
       context_notes=st.integers(0, 4), context_minutes=st.sampled_from([0.0, 5.0, 60.0]),
       floor=st.sampled_from([0.0, 0.05, 0.5]), limit=st.integers(1, 45),
       signs=st.tuples(*[st.sampled_from([-2.5, -0.5, 0.0, 0.7, 3.0])] * 4),
       nearest=st.tuples(st.sampled_from([0, 1, 3, 10]), st.sampled_from([0, 8, 50]),
                         st.sampled_from([-1.0, 0.05, 0.5])))
def test_c_path_scores_as_the_numpy_path(native: ModuleType, notes: list[Any],
                                         query: list[str], agent: str,
                                         cosines: list[float] | None, context_notes: int,
                                         context_minutes: float, floor: float, limit: int,
                                         signs: tuple[float, float, float, float],
                                         nearest: tuple[int, int, float]) -> None:
    states = []
    at = NOW - timedelta(days=3)
    for i, (words, who, private, gap, tokens) in enumerate(notes):
        at += timedelta(minutes=gap)
        states.append(NoteState(note_id=f"n{i:02d}", agent=who,
                                scope="private" if private else "shared", kind="note",
                                text=" ".join(words), tokens=tokens, created_at=at))
    idx = build_index("t", {n.note_id: n for n in states}, None)
    base = DEFAULT.calibration
    cal = fitted(context_notes=context_notes, context_minutes=context_minutes, floor=floor,
                 context_bm25=base.context_bm25 + signs[0],
                 context_cosine=base.context_cosine + signs[1],
                 author_named=base.author_named + signs[2], cosine=base.cosine + signs[3],
                 nearest=nearest[0], nearest_max_notes=nearest[1],
                 nearest_min_cosine=nearest[2])
    cos = None if cosines is None else np.array(cosines[:len(idx.cols)], np.float64)
    got, want = _both(idx, " ".join(query), agent, cos, cal, limit)
    assert got == want


def test_every_signal_moves_the_c_path_as_the_numpy_path(native: ModuleType) -> None:
    """A namespace where each signal decides something (a shared word, a cosine above and
    below ``min_cosine``, a neighbour within the window, a named author, the floor), each
    compared bit for bit, and each shown to matter: dropping it changes the probabilities."""
    states = [
        NoteState(note_id="a", agent="ann", scope="shared", kind="note", text="kiwi deploy",
                  tokens=40, created_at=NOW - timedelta(minutes=30)),
        NoteState(note_id="b", agent="bob", scope="shared", kind="note", text="plum ship",
                  tokens=400, created_at=NOW - timedelta(minutes=25)),
        NoteState(note_id="c", agent="cy", scope="shared", kind="note", text="gamma delta",
                  tokens=9, created_at=NOW - timedelta(days=2)),
        NoteState(note_id="d", agent="bob", scope="private", kind="note", text="kiwi plum",
                  tokens=120, created_at=NOW - timedelta(minutes=20)),
    ]
    idx = build_index("t", {n.note_id: n for n in states}, None)
    slot = idx.cols.slot
    cos = np.zeros(len(idx.cols))
    cos[slot["b"]], cos[slot["c"]], cos[slot["d"]] = 0.6, 0.44, -0.3
    cal = fitted(context_notes=2, context_minutes=10.0, floor=0.01, nearest=0)
    got, want = _both(idx, "kiwi bob", "bob", cos, cal, 10)
    assert got == want
    # each input moves the answer: without it the probabilities differ
    for other in (_both(idx, "kiwi", "bob", cos, cal, 10)[0],  # no named author
                  _both(idx, "kiwi bob", "bob", None, cal, 10)[0],  # no cosines
                  _both(idx, "kiwi bob", "bob", cos,  # no context
                        Calibration(context_notes=0, context_minutes=10.0, floor=0.01,
                                    nearest=0), 10)[0],
                  _both(idx, "kiwi bob", "", cos, cal, 10)[0]):  # d is not visible
        assert other != got
    positions, _ = got
    seq = idx.visible_order("bob").tolist()
    ids = {idx.cols.ids[seq[i]] for i in positions}
    assert "c" not in ids  # no shared word, a cosine under min_cosine (nearest off): no evidence
    assert {"a", "b", "d"} <= ids


def test_the_query_path_runs_the_c_kernel(native: ModuleType, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    calls: list[int] = []

    class Counting:
        def logits(self, *args: Any) -> None:
            calls.append(len(args[0]))
            native.logits(*args)

        def finish(self, *args: Any) -> int:
            return int(native.finish(*args))

        def nearest(self, *args: Any) -> int:
            return int(native.nearest(*args))

        def compact(self, *args: Any) -> int:
            return int(native.compact(*args))

    monkeypatch.setattr(calibrated, "native", Counting())
    states = [NoteState(note_id=f"n{i}", agent="ann", scope="shared", kind="note",
                        text=f"kiwi {WORDS[i % len(WORDS)]}", tokens=10,
                        created_at=NOW - timedelta(hours=i)) for i in range(7)]
    idx = build_index("t", {n.note_id: n for n in states}, None)
    slots, rel = idx.calibrated_slots("kiwi", None, DEFAULT)
    assert calls == [7]
    assert len(slots) == 7 and (rel > 0).all()


def test_bad_arrays_are_refused_with_the_function_named(native: ModuleType) -> None:
    n = 3
    f8, i8 = np.zeros(n), np.arange(n, dtype=np.int64)
    out, ev = np.empty(n), np.empty(n, np.uint8)
    with pytest.raises(ValueError, match="logits: arrays of different lengths"):
        native.logits(i8, i8, f8[:2], f8, np.zeros(n, np.int32), f8, f8, f8, f8,
                      np.zeros(0, np.uint8), 0, 1.0, 1.0, 1.0, 0.5, out, ev)
    with pytest.raises(ValueError, match="logits: a BM25 hit outside the notes"):
        native.logits(i8, np.array([5], np.int64), np.ones(1), f8, np.zeros(n, np.int32), f8,
                      f8, f8, f8, np.zeros(0, np.uint8), 0, 1.0, 1.0, 1.0, 0.5, out, ev)
    with pytest.raises(ValueError, match="logits: a slot outside the cosines"):
        native.logits(np.array([0, 1, 9], np.int64), i8[:0], f8[:0], f8,
                      np.zeros(n, np.int32), f8[:0], f8, f8, f8, np.zeros(0, np.uint8), 0,
                      1.0, 1.0, 1.0, 0.5, out, ev)
    with pytest.raises(ValueError, match="finish: arrays of different lengths"):
        native.finish(out, ev[:2], 0.0, i8)
    with pytest.raises(ValueError, match="nearest: a slot outside the cosines"):
        native.nearest(np.array([0, 1, 9], np.int64), f8, 1, 0.0, i8.copy())
    with pytest.raises(ValueError, match="nearest: arrays of different lengths"):
        native.nearest(i8, f8, 1, 0.0, i8[:2].copy())
    with pytest.raises(ValueError, match=r"nearest: k outside \[0, 4096\]"):
        native.nearest(i8, f8, 5000, 0.0, i8.copy())
    with pytest.raises(ValueError, match="compact: arrays of different lengths"):
        native.compact(out, ev[:2], i8.copy())


def test_the_nearest_kernel_is_calibrated_nearest_over_the_gathered_cosines(
        native: ModuleType) -> None:
    """``nearest`` in C against ``calibrated.nearest`` (a partition) over ``cosine[seq]``:
    ties at the k-th value (all of them in), fewer notes than k, the least cosine, signed
    zeros, k of 0."""
    rng = np.random.default_rng(3)
    checked = 0
    for trial in range(400):
        n_slots = int(rng.integers(1, 300))
        levels = [np.linspace(-1, 1, 9), rng.uniform(-1, 1, 50),
                  np.array([0.0, -0.0, 0.3, 0.3, 0.3])][trial % 3]
        cosine = rng.choice(levels, n_slots).astype(np.float64)
        seq = rng.permutation(n_slots)[:int(rng.integers(0, n_slots + 1))].astype(np.int64)
        for k in (0, 1, 3, 7, 400):
            for least in (-1.0, 0.05, 0.3):
                cal = fitted(nearest=min(k, 100), nearest_min_cosine=least)
                want = calibrated.nearest(cosine[seq] if len(seq) else None, cal)
                out = np.empty(len(seq), np.int64)
                got = out[:native.nearest(seq, cosine, cal.nearest, least, out)]
                assert got.tolist() == want.tolist(), (trial, k, least)
                checked += len(want)
    assert checked > 2_000


def test_compact_keeps_the_notes_with_evidence_in_order(native: ModuleType) -> None:
    neg = np.array([0.5, -1.0, 2.0, 3.0, -0.0, 7.0])
    ev = np.array([0, 1, 1, 0, 1, 0], np.uint8)
    at = np.empty(6, np.int64)
    m = native.compact(neg, ev, at)
    assert m == 3 and at[:m].tolist() == [1, 2, 4]
    assert neg[:m].tobytes() == np.array([-1.0, 2.0, -0.0]).tobytes()
    e = np.array([0.0, 1.0, 3.0])  # exp(neg) of three notes, every one with evidence
    pos = np.empty(3, np.int64)
    assert native.finish(e, np.zeros(0, np.uint8), 0.3, pos) == 2  # 1/2 and 1/4 under 0.3
    assert e.tolist() == [1.0, 0.5, 0.0] and pos[:2].tolist() == [0, 1]


def test_a_large_namespaces_nearest_notes_score_as_the_numpy_path(native: ModuleType) -> None:
    """300 notes (past ``nearest_max_notes``), cosines with ties and of either sign, the
    nearest rule on and off, floors that drop some of them: the C path (nearest, compaction,
    the exponential over the notes with evidence) gives the numpy path's bits."""
    rng = np.random.default_rng(11)
    states = [NoteState(note_id=f"n{i:03d}", agent=AGENTS[i % 3],
                        scope="private" if i % 7 == 0 else "shared", kind="note",
                        text=" ".join(rng.choice(WORDS, int(rng.integers(1, 5)))),
                        tokens=int(rng.integers(1, 2_000)),
                        created_at=NOW - timedelta(minutes=int(7 * (300 - i))))
              for i in range(300)]
    idx = build_index("t", {n.note_id: n for n in states}, None)
    differ = 0
    for trial in range(12):
        cos = rng.choice(np.linspace(-0.4, 0.44, 22), len(idx.cols))  # under min_cosine
        for nearest, floor in ((0, 0.0), (3, 0.0), (10, 0.2), (3, 0.6)):
            cal = fitted(nearest=nearest, floor=floor, nearest_min_cosine=0.05)
            for text in ("kiwi plum", "zzz"):
                got, want = _both(idx, text, AGENTS[trial % 3], cos, cal, 40)
                assert got == want
                off = _both(idx, text, AGENTS[trial % 3], cos,
                            fitted(nearest=0, floor=floor), 40)[0]
                differ += off != got
    assert differ > 10  # the nearest notes move the answer in many of these
