"""``python -m bench abstention``: its flags on hand-made candidates (each varies the signal it
reads), the figures of a rule, and a smoke run on the shared benchmark files (read where
they lie, never copied)."""

from __future__ import annotations

import numpy as np
import pytest

from bench import abstention, locomo
from bench import longmemeval as lme
from bench.abstention import (
    FLOORS,
    Case,
    at_most,
    coverage,
    depth,
    follow_best,
    measure,
    measure_floors,
    split_pair,
    strong_low,
    unknown,
)


def case(held: list[list[int]], idf: list[float], df: list[int], *, key: str = "q",
         abst: bool = False, half: int | None = 0, evidence: tuple[str, ...] = ("e",),
         packed: dict[int, tuple[frozenset[str], int]] | None = None) -> Case:
    return Case(key, abst, half, evidence, np.array(held, np.bool_).reshape(-1, len(idf)),
                np.array(idf, np.float64), np.array(df, np.int64), packed or {})


def test_coverage_is_the_best_single_candidates_share_of_the_query_weight() -> None:
    # words of IDF 1, 1, 2: the first candidate holds the two common ones (2/4), the
    # second the rare one (2/4), the third one common and the rare (3/4)
    c = case([[1, 1, 0], [0, 0, 1], [1, 0, 1]], [1.0, 1.0, 2.0], [5, 5, 1])
    assert coverage(c) == pytest.approx(0.75)
    assert coverage(c, 2.0) == pytest.approx(5 / 6)  # weights 1, 1, 4
    assert coverage(case([[1, 1, 0]], [1.0, 1.0, 2.0], [5, 5, 1])) == pytest.approx(0.5)
    assert coverage(case([], [1.0], [0])) == 0.0  # no candidate


def test_unknown_is_a_query_word_no_note_holds() -> None:
    assert unknown(case([[1, 0]], [1.0, 7.0], [3, 0]))
    assert not unknown(case([[1, 0]], [1.0, 7.0], [3, 1]))


def test_split_pair_is_two_adjacent_rare_words_never_held_together() -> None:
    rare = abstention.SPLIT_PAIR_MIN_IDF
    apart = case([[1, 0], [0, 1]], [rare, rare], [2, 2])  # "table" and "tennis" apart
    assert split_pair(apart)
    assert not split_pair(case([[1, 1]], [rare, rare], [2, 2]))  # together once
    assert not split_pair(case([[1, 0], [0, 1]], [rare - 0.1, rare], [2, 2]))  # one common
    assert not split_pair(case([[1, 0], [0, 0]], [rare, rare], [2, 0]))  # one unknown
    # not adjacent: the first and third words apart, each next to a word held with it
    assert not split_pair(case([[1, 1, 0], [0, 1, 1]], [rare] * 3, [2, 2, 2]))


def test_a_flagged_question_is_answered_at_the_cap() -> None:
    small = {b: (frozenset({"e"}) if b >= 250 else frozenset(), b - 10)
             for b in (150, 200, 250, 500, 1000)}
    flagged = case([[1, 0]], [1.0, 7.0], [3, 0], packed=small)  # an unknown word
    kept = case([[1, 1]], [1.0, 7.0], [3, 1], key="k", half=1, packed=small)
    abst = case([[1, 0]], [1.0, 7.0], [3, 0], key="a", abst=True, evidence=(), packed=small)
    lo = case([[1, 1]], [1.0, 1.0], [3, 3], key="l", half=None, packed=small)
    none = measure(None, 1000, [flagged, kept, abst], [lo])
    assert none.flagged == (0, 0, 0)
    assert none.recall["LongMemEval"] == (0.0, 1.0, 1.0)
    assert none.abstention_tokens == (190.0, 490.0, 990.0)
    got = measure(unknown, 150, [flagged, kept, abst], [lo])
    assert got.flagged == (1, 1, 0)
    assert got.recall["half 0"] == (0.0, 0.0, 0.0)  # the flagged one, at 150 tokens
    assert got.recall["half 1"] == (0.0, 1.0, 1.0)  # unflagged: as before
    assert got.recall["LongMemEval"] == (0.0, 0.5, 0.5)
    assert got.recall["LoCoMo"] == none.recall["LoCoMo"] == (0.0, 1.0, 1.0)
    assert got.abstention_tokens == (140.0, 140.0, 140.0)
    at250 = measure(unknown, 250, [flagged, kept, abst], [lo])
    assert at250.recall["half 0"] == (0.0, 1.0, 1.0)
    assert at250.abstention_tokens == (190.0, 240.0, 240.0)  # at most the budget


def test_depth_counts_the_evidence_only_the_larger_budget_packs() -> None:
    # "e1" packed at 500 and 1000; "e2" only at 1000; "e3" never; a passage shows its note's
    # id, so a turn counts once whatever number of its passages
    deep = case([[1]], [1.0], [1], evidence=("e1", "e2", "e3"),
                packed={500: (frozenset({"e1", "x"}), 480), 1000: (frozenset({"e1", "e2"}), 990)})
    flat = case([[1]], [1.0], [1], key="f", evidence=("e1",),
                packed={500: (frozenset({"e1"}), 400), 1000: (frozenset({"e1", "y"}), 900)})
    lost = case([[1]], [1.0], [1], key="l", evidence=("e1",),  # the larger pack drops it
                packed={500: (frozenset({"e1"}), 400), 1000: (frozenset({"z"}), 900)})
    assert depth([deep]) == (1, 1, 1)
    assert depth([deep, flat, lost]) == (1, 2, 1)
    assert depth([flat]) == (0, 1, 0)
    assert depth([deep], 1000, 500) == (0, 1, 0)  # the other way round: nothing only at 500


def floored(key: str, best: float, *, abst: bool = False, half: int | None = 0,
            found_from: float = 0.0) -> Case:
    """A question whose best candidate has probability ``best`` and that packs its evidence
    "e" (in nine tenths of the budget) at the floors at most ``found_from`` (none when 0),
    10 tokens at the others; an abstention question packs nine tenths of the budget at the
    floors up to 0.001."""
    c = case([[1]], [1.0], [1], key=key, abst=abst, half=half,
             evidence=() if abst else ("e",))
    c.rel = np.array([best, best / 10])
    for f in FLOORS:
        for b in abstention.BUDGETS:
            hit = f <= found_from
            c.by_floor[(f, b)] = (frozenset({"e"}) if hit else frozenset(),
                                  b // 10 * 9 if hit or (abst and f <= 0.001) else 10)
    return c


def test_question_level_floors_follow_the_best_candidate() -> None:
    assert at_most(0.004) == 0.001 and at_most(0.0001) == FLOORS[0] and at_most(1.0) == 0.02
    strong, weak = floored("s", 0.2), floored("w", 0.03)
    rule = strong_low(0.1, 0.01)
    assert (rule(strong), rule(weak)) == (0.0003, 0.01)  # the best's probability decides
    assert strong_low(0.01, 0.01)(weak) == 0.0003
    assert follow_best(0.1)(strong) == 0.02
    assert follow_best(0.1)(weak) == 0.001  # 0.003: the highest floor at most it
    assert follow_best(0.02)(weak) == 0.0003  # 0.0006, at least the lowest
    # the evidence of a weak answerable question is found at floors up to 0.001 only; the
    # abstention question packs 900 tokens at floors up to 0.001 and 10 above
    ans = floored("a", 0.03, found_from=0.001)
    abst = floored("x", 0.03, abst=True, half=1)
    lo = floored("l", 0.5, half=None, found_from=0.0003)
    low = measure_floors(strong_low(0.1, 0.001), [ans, abst], [lo])
    assert low.recall["LongMemEval"] == (1.0, 1.0, 1.0)
    assert low.abstention_tokens == (180.0, 450.0, 900.0)
    assert low.flagged == (1, 1, 0)  # answered above the lowest floor
    assert low.recall["LoCoMo"] == (1.0, 1.0, 1.0)  # strong: at the lowest floor
    strict = measure_floors(strong_low(0.1, 0.005), [ans, abst], [lo])
    assert strict.recall["LongMemEval"] == (0.0, 0.0, 0.0)  # the strict floor drops it
    assert strict.abstention_tokens == (10.0, 10.0, 10.0)
    assert strict.recall["LoCoMo"] == (1.0, 1.0, 1.0)


@pytest.mark.slow
@pytest.mark.skipif(not (lme.DEFAULT_DATA / lme.FILE).exists()
                    or not locomo.DEFAULT_DATA.exists(), reason="the benchmark files are absent")
def test_abstention_prints_every_rule(capsys: pytest.CaptureFixture[str]) -> None:
    assert abstention.main(["--limit", "2", "--floors"]) == 0
    out = capsys.readouterr().out
    assert "2 answerable and 0 abstention LongMemEval questions, 10 LoCoMo questions" in out
    first, floors = out.split("question-level floors")
    rows = [ln for ln in first.splitlines() if ln.startswith("| ") and "---" not in ln][1:]
    assert len(rows) == 1 + len(abstention.RULES) * len(abstention.CAPS)
    assert rows[0].startswith("| none (the default) | - | 0 / 0 / 0 |")
    recall = float(rows[0].split("|")[4].split("/")[2])
    assert 0.0 < recall <= 1.0
    none = rows[0]
    rows = [ln for ln in floors.splitlines() if ln.startswith("| ") and "---" not in ln][1:]
    assert len(rows) == len(abstention.floor_rules())
    # the default floor's row is the default's figures (the same questions, the same path)
    default = next(r for r in rows if r.startswith(
        f"| floor {abstention.DEFAULT.calibration.floor} for every question |"))
    assert default.split("|")[3] == none.split("|")[4]
