"""Questions that name a time (``calibration.time_window_weight``): the notes written in the
window the question names gain in their logit; the same text at other ages, another
``as_of``, the question without its time words, the signal off, the C and numpy paths, the
pure gain, and what ``explain`` shows."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import msgspec
import numpy as np
import pytest

from hivemind_memory.api_stub.protocol.messages import QueryRequest, encode
from hivemind_memory.projections.ranking.calibrated import window_gain, window_weights
from hivemind_memory.projections.ranking.config import (
    DEFAULT,
    LEGACY_TABLES,
    Calibration,
    config_from_json,
    with_overrides,
)
from hivemind_memory.projections.ranking.index import build_index
from hivemind_memory.projections.ranking.timewords import Span
from hivemind_memory.projections.state import NoteState
from hivemind_memory.worker.engine import run_rank, to_result
from tests.support.ranked import EMBEDDER, NOW, note, ranked

ON = DEFAULT
"""The default: the signal at its full weight (``time_window_weight`` 1)."""
OFF = with_overrides(DEFAULT, {"calibration": {"time_window_weight": 0.0}})
TOPICS = ("laptop battery replacement options", "marathon training plan for the spring",
          "bread recipe with sourdough starter", "tax return deadline questions",
          "hotel booking for the conference", "guitar chords for beginners",
          "car insurance renewal quotes", "birthday gift ideas for a coworker",
          "python script to rename files", "moving boxes and packing tips",
          "yoga poses for back pain", "budget spreadsheet for the month")
PLANTED = "user: I just planted 12 new tomato saplings in the backyard today."
Q = "What gardening-related activity did I do two weeks ago?"
DAY_US = 86_400 * 10**6


def history(age: float, *, planted: str = PLANTED) -> list[NoteState]:
    """400 unrelated questions of a chat history, one every 0.2 days from a day ago, and the
    turn on planting tomatoes (no word of ``Q``) written ``age`` days ago."""
    filler = [note(f"f{i:03d}", f"user: I have a question about {TOPICS[i % len(TOPICS)]}, "
                                f"can you help with item {i}?", 1 + i * 0.2, tokens=25)
              for i in range(400)]
    return [*filler, note("planted", planted, age, tokens=16)]


def relevance(res: Any, nid: str = "planted") -> float | None:
    return {c.note_id: c.relevance for c in res.candidates}.get(nid)


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize(("age", "cfg", "found"), [
    (14.0, OFF, False),  # off: no shared word, a cosine under min_cosine, under the floor
    (14.0, ON, True),  # on the named day
    (13.6, ON, True),  # on the named day (May 18, 14 to 13 days before NOW)
    (12.5, ON, True),  # within the tolerance (two weeks ago: 9.6 to 17.4 days)
    (16.9, ON, False),  # near the window's edge: too small a gain
    (40.0, ON, False),  # outside: unchanged
    (7.0, ON, False),
])
def test_a_note_in_the_named_window_becomes_a_candidate(
        age: float, cfg: Any, found: bool, native: bool,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from hivemind_memory.projections.ranking import calibrated

    if not native:
        monkeypatch.setattr(calibrated, "native", None)
    elif calibrated.native is None:
        pytest.skip("the C kernel is not built")
    res = ranked(history(age), Q, 1000, cfg)
    assert ("planted" in {n.note_id for n in res.notes}) == found
    p = relevance(res)
    assert (p is not None) == found
    if found:
        assert p is not None and cfg.calibration.floor <= p < 0.01


def test_the_gain_is_largest_on_the_named_day() -> None:
    on_day = relevance(ranked(history(14.0), Q, 1000, ON))
    near = relevance(ranked(history(12.5), Q, 1000, ON))  # half a day past the named one
    assert on_day is not None and near is not None and on_day > near


def test_the_window_moves_with_as_of() -> None:
    """The same notes asked 26 days later: the turn is 40 days old, outside "two weeks ago";
    asked 12 days earlier than ``NOW`` it has not been written (as of then)."""
    notes = history(14.0)
    idx = build_index("t", {n.note_id: n for n in notes}, EMBEDDER)
    later = NOW + timedelta(days=26)
    for at, found in ((NOW, True), (later, False)):
        req = QueryRequest(ns="t", text=Q, budget=1000, explain=True, as_of=at)
        res = run_rank(idx, req, ON, at, embedder=EMBEDDER)
        assert ("planted" in {n.note_id for n in res.notes}) == found
        [w] = res.time_windows
        assert w.start < at - timedelta(days=14) < w.end


def test_a_question_without_time_words_is_unchanged() -> None:
    """The same question without "two weeks ago": the same bytes on and off, and no window."""
    plain = "What gardening-related activity did I do?"
    notes = history(14.0)
    a = ranked(notes, plain, 1000, ON)
    b = ranked(notes, plain, 1000, OFF)
    assert msgspec.json.encode(a) == msgspec.json.encode(b)
    assert a.time_windows == []
    assert relevance(a) is None
    assert relevance(ranked(notes, Q, 1000, ON)) is not None


def test_a_window_without_notes_changes_nothing() -> None:
    notes = history(14.0)
    a = ranked(notes, "What gardening-related activity did I do in 2019?", 1000, ON)
    b = ranked(notes, "What gardening-related activity did I do in 2019?", 1000, OFF)
    assert [(c.note_id, c.relevance) for c in a.candidates] == \
        [(c.note_id, c.relevance) for c in b.candidates]
    [w] = a.time_windows
    assert w.gain == 0.0 and w.notes == []


def test_explain_shows_the_window_and_its_notes() -> None:
    # a candidate written after the window (it shares "gardening"): not one of its notes
    notes = [*history(14.0), note("recent", "user: gardening gloves are on sale", 2.0)]
    idx = build_index("t", {n.note_id: n for n in notes}, EMBEDDER)
    req = QueryRequest(ns="t", text=Q, budget=1000, explain=True)
    res = run_rank(idx, req, ON, NOW, embedder=EMBEDDER)
    [w] = res.time_windows
    assert w.words == "two weeks ago"
    # the named day, May 18, widened by a quarter of 13.5 days (from its middle to NOW)
    assert w.start == NOW - timedelta(days=14 + 13.5 / 4)
    assert w.end == NOW - timedelta(days=13 - 13.5 / 4)
    assert "planted" in w.notes and w.gain > 1.0
    assert "recent" in {c.note_id for c in res.candidates} and "recent" not in w.notes
    assert all(w.start <= c.created_at < w.end for c in res.candidates
               if c.note_id in w.notes)
    assert all(c.note_id in w.notes for c in res.candidates if w.start <= c.created_at < w.end)
    body = msgspec.json.decode(encode(to_result("q", req, NOW, res)))
    assert body["time_windows"][0]["words"] == "two weeks ago"
    assert "planted" in body["time_windows"][0]["notes"]
    # off: the window is shown, with no gain and without the note (no candidate)
    off = run_rank(idx, req, OFF, NOW, embedder=EMBEDDER)
    [w0] = off.time_windows
    assert w0.gain == 0.0 and "planted" not in w0.notes
    # without explain: nothing of it in the result
    quiet = msgspec.structs.replace(req, explain=False)
    got = run_rank(idx, quiet, ON, NOW, embedder=EMBEDDER)
    assert "time_windows" not in msgspec.json.decode(encode(to_result("q", quiet, NOW, got)))
    assert "planted" in {n.note_id for n in got.notes}


def test_explain_shows_each_window_its_own_gain() -> None:
    """A question naming two times: the window holding the planted turn shows its gain, the
    one holding no note 0 (each showed the larger of the two)."""
    res = ranked(history(14.0), "What gardening-related activity did I do two weeks ago or "
                 "in 2019?", 1000, ON)
    two, old = res.time_windows
    assert (two.words, old.words) == ("two weeks ago", "in 2019")
    assert two.gain > 1.0 and "planted" in two.notes
    assert old.gain == 0.0 and old.notes == []
    # the gain shown is the largest of the notes written in the window
    alone = ranked(history(14.0), Q, 1000, ON)
    assert two.gain == alone.time_windows[0].gain


def test_a_time_too_far_back_for_a_datetime_is_answered() -> None:
    """ "2025 years ago" widened by a quarter begins before year 1: the query crashed with
    OverflowError; its window now begins at year 1 and holds no note."""
    text = "What gardening-related activity did I do 2025 years ago?"
    res = ranked(history(14.0), text, 1000, ON)
    [w] = res.time_windows
    assert w.start.year == 1 and w.gain == 0.0 and w.notes == []
    plain = ranked(history(14.0), text, 1000, OFF)
    assert [(c.note_id, c.relevance) for c in res.candidates] == \
        [(c.note_id, c.relevance) for c in plain.candidates]


@pytest.mark.parametrize(("before", "found"), [(7, True), (8, False)])
def test_times_named_past_max_windows_count_as_words(before: int, found: bool) -> None:
    """ "two weeks ago" after 7 other times is the 8th window and finds the planted turn;
    after 8 it is the 9th, left out (``timewords.MAX_WINDOWS``)."""
    others = ", ".join(f"{n} years ago" for n in range(2, 2 + before))
    res = ranked(history(14.0), f"What gardening-related activity did I do {others} or "
                 "two weeks ago?", 1000, ON)
    assert len(res.time_windows) == min(before + 1, 8)
    assert (relevance(res) is not None) == found


def _span(named_start: float, named_end: float, tol: float) -> Span:
    return Span(int((named_start - tol) * DAY_US), int(named_start * DAY_US),
                int(named_end * DAY_US), int((named_end + tol) * DAY_US))


def test_window_weights_fall_linearly_across_the_tolerance() -> None:
    s = _span(10.0, 11.0, 2.0)  # day 10 named, give or take 2 days
    t = (np.array([7.0, 8.0, 9.0, 10.0, 10.5, 11.0, 12.0, 13.0, 14.0]) * DAY_US).astype(np.int64)
    got = window_weights(t, [s])
    assert got.tolist() == pytest.approx([0.0, 0.0, 0.5, 1.0, 1.0, 1.0, 0.5, 0.0, 0.0])
    two = window_weights(t, [s, _span(12.5, 13.0, 1.0)])  # the larger of two windows
    assert two.tolist() == pytest.approx([0.0, 0.0, 0.5, 1.0, 1.0, 1.0, 0.5, 1.0, 0.0])


def test_window_gain_is_the_odds_ratio_never_below_zero() -> None:
    cal = ON.calibration
    fit = np.array([1.0, 0.5, 0.5, 0.01])  # of 100 visible notes, these 4 in the window
    got = window_gain(fit, 100, cal)
    total = fit.sum()
    assert got[0] == pytest.approx(np.log(100 * 1.0 / total))
    assert got[1] == pytest.approx(np.log(100 * 0.5 / total))
    assert got[3] == 0.0  # ln(100 * 0.01 / 2.01) < 0: clamped
    half = with_overrides(DEFAULT, {"calibration": {"time_window_weight": 0.5}}).calibration
    assert window_gain(fit, 100, half)[0] == pytest.approx(0.5 * got[0])
    assert not window_gain(fit, 100, OFF.calibration).any()
    assert not window_gain(np.zeros(3), 100, cal).any()
    assert window_gain(fit, 400, cal)[0] == pytest.approx(got[0] + np.log(4))


@pytest.mark.parametrize(("key", "value"), [
    ("time_window_weight", -0.1), ("time_window_weight", float("nan")),
    ("time_window_weight", 101.0), ("time_window_fraction", 1.5),
    ("time_window_fraction", -0.1), ("time_window_min_days", -1.0),
    ("time_window_min_days", 400.0), ("time_window_min_cosine", 1.5),
])
def test_bad_time_window_settings_are_refused_by_name(key: str, value: float) -> None:
    with pytest.raises(msgspec.ValidationError, match=f"calibration.{key}"):
        with_overrides(DEFAULT, {"calibration": {key: value}})


def test_an_old_table_meant_the_signal_off() -> None:
    """A calibration table filed before the keys existed meant the signal off: the struct's
    defaults and ``LEGACY_TABLES`` say so, and such a table reads back off; the default
    config (``FITTED``) has it on, so its fingerprint names it."""
    added = LEGACY_TABLES["calibration"]
    assert added["time_window_weight"] == 0.0 == Calibration().time_window_weight
    for key in ("time_window_fraction", "time_window_min_days", "time_window_min_cosine"):
        assert added[key] == getattr(DEFAULT.calibration, key) == getattr(Calibration(), key)
    raw = msgspec.to_builtins(DEFAULT)
    old = {k: v for k, v in raw["calibration"].items() if not k.startswith("time_window")}
    filed = config_from_json(msgspec.json.encode({**raw, "calibration": old}))
    assert filed.calibration.time_window_weight == 0.0
    assert filed.digest() != DEFAULT.digest()
    assert filed.digest() == with_overrides(
        DEFAULT, {"calibration": {"time_window_weight": 0.0}}).digest()


@pytest.mark.parametrize(("calibration", "found"), [
    ({"time_window_fraction": 0.0, "time_window_min_days": 0.5}, False),  # 13.6: outside
    ({"time_window_fraction": 0.25}, True),
    ({"time_window_min_cosine": 0.9}, False),  # its cosine is under 0.9: no evidence
    ({"time_window_weight": 0.3}, False),  # too small a gain to clear the floor
])
def test_each_window_setting_moves_the_answer(calibration: dict[str, Any],
                                              found: bool) -> None:
    cfg = with_overrides(ON, {"calibration": calibration})
    res = ranked(history(12.5), Q, 1000, cfg)
    assert ("planted" in {n.note_id for n in res.notes}) == found


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("age", [14.0, 12.5, 16.0])
def test_the_gain_is_added_to_the_logit_the_model_gives(age: float, native: bool,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A note that is a candidate with and without the window (it shares a word): its logit
    differs by exactly its gain, ``window_gain`` of its ``window_weights`` (C and numpy paths
    for the model's part; the window's is the numpy reference)."""
    from hivemind_memory.projections.ranking import calibrated
    from hivemind_memory.projections.ranking.timewords import question_windows, spans_us

    if not native:
        monkeypatch.setattr(calibrated, "native", None)
    elif calibrated.native is None:
        pytest.skip("the C kernel is not built")
    notes = history(age, planted="user: my gardening today: 12 new tomato saplings planted.")
    on, off = ranked(notes, Q, 1000, ON), ranked(notes, Q, 1000, OFF)
    p_on = next(c.relevance for c in on.candidates if c.note_id == "planted")
    p_off = next(c.relevance for c in off.candidates if c.note_id == "planted")
    idx = build_index("t", {n.note_id: n for n in notes}, EMBEDDER)
    spans = spans_us(question_windows(Q, NOW, ON.calibration))
    inside, fit = idx.in_windows("", spans)
    gain = window_gain(fit, len(notes), ON.calibration)
    want = float(gain[list(inside).index(idx.cols.ids.index("planted"))])
    assert want > 0.5

    def logit(p: float) -> float:
        return float(np.log(p / (1.0 - p)))

    # the result rounds relevance to 6 decimals: the logits agree to that precision
    assert logit(p_on) - logit(p_off) == pytest.approx(want, abs=0.02)


def test_a_shared_word_makes_a_window_note_a_candidate_whatever_its_cosine() -> None:
    """With ``time_window_min_cosine`` out of reach, a note of the window that shares a word
    with the question still gains (its probability is the window's), one that shares none
    does not."""
    far = with_overrides(ON, {"calibration": {"time_window_min_cosine": 0.99}})
    far_off = with_overrides(far, {"calibration": {"time_window_weight": 0.0}})
    worded = history(14.0, planted="user: my gardening today: 12 new tomato saplings planted.")
    on, off = relevance(ranked(worded, Q, 1000, far)), relevance(ranked(worded, Q, 1000,
                                                                        far_off))
    assert on is not None and off is not None and on > 2 * off
    assert relevance(ranked(history(14.0), Q, 1000, far)) is None


def test_a_window_wider_than_its_cap_values_only_its_nearest_notes() -> None:
    """``time_window_max_notes``: "two weeks ago" holds ~40 notes of ``history``; the default
    cap (1,000) and no cap give the same bytes (three notes of the window are candidates), a
    cap of 1 keeps only the window's nearest note by cosine (the planted turn) at the same
    probability."""
    notes = history(14.0)
    full = ranked(notes, Q, 1000, ON)
    uncapped = ranked(notes, Q, 1000,
                      with_overrides(ON, {"calibration": {"time_window_max_notes": 0}}))
    assert msgspec.json.encode(full) == msgspec.json.encode(uncapped)
    got = {c.note_id for c in full.candidates}
    assert "planted" in got and len(got) == 3
    assert not ranked(notes, Q, 1000, OFF).candidates  # all three came by the window
    one = with_overrides(ON, {"calibration": {"time_window_max_notes": 1}})
    capped = ranked(notes, Q, 1000, one)
    assert [c.note_id for c in capped.candidates] == ["planted"]
    assert relevance(capped) == relevance(full)
    with pytest.raises(msgspec.ValidationError, match="time_window_max_notes"):
        config_from_json(msgspec.json.encode(
            {"calibration": {**msgspec.structs.asdict(DEFAULT.calibration),
                             "time_window_max_notes": -1}}))


def test_the_cap_keeps_shared_words_and_the_nearest_allowed_notes() -> None:
    """``NamespaceIndex._window_kept`` directly: slots 10-15 of a window, 12 a BM25 hit; by
    cosine 14 > 11 > 15 > 10 > 13 (13 under ``time_window_min_cosine``)."""
    from hivemind_memory.projections.ranking.index import NamespaceIndex

    slots = np.arange(10, 16)
    cos = {10: 0.2, 11: 0.6, 12: 0.0, 13: 0.01, 14: 0.9, 15: 0.3}

    def cosine_of(s: np.ndarray) -> np.ndarray:
        return np.array([cos[int(x)] for x in s])

    def kept(cap: int, allowed: np.ndarray | None = None,
             lex: tuple[int, ...] = (12,)) -> list[int]:
        cal = msgspec.structs.replace(ON.calibration, time_window_max_notes=cap)
        got = NamespaceIndex._window_kept(slots, np.array(lex, np.int64), cosine_of, cal,
                                          allowed)
        return [int(x) for x in slots[got]]

    assert kept(1) == [12, 14]  # the hit whatever its cosine, and the nearest
    assert kept(2) == [11, 12, 14]
    assert kept(5) == [10, 11, 12, 14, 15]  # 13's cosine makes it no candidate anyway
    allowed = np.ones(20, np.bool_)
    allowed[14] = False  # a filter: the nearest may not be a candidate, the next one counts
    assert kept(1, allowed) == [11, 12]
    assert kept(1, lex=()) == [14]
    assert NamespaceIndex._window_kept(slots, np.array([12]), None, ON.calibration).tolist() \
        == [False, False, True, False, False, False]  # without cosines: the hits only
