"""The ranking config: every constant that shapes a score, a pack or an order lives here.

Defaults follow ../shared/CONTRACT.md. Override from TOML (``--config FILE`` or
``HIVEMIND_CONFIG``); unknown keys and out-of-range values are rejected with an error that
names the key.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import msgspec

from hivemind_memory.events.errors import ConfigError

Order = Literal["edges", "score", "chronological"]
Analyzer = Literal["plain", "english"]
Relevance = Literal["calibrated", "bm25"]
_EMBEDDERS = ("wordllama", "wordllama-64", "wordllama-128", "wordllama-256", "none")
"""The embedder specs besides plugins (``projections.ranking.embedders``)."""
_PLUGIN = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


class TierDecay(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Recency of a decaying tier: ``floor + (1 - floor) * 0.5 ** (age_days / half_life_days)``."""

    half_life_days: float
    floor: float

    def __post_init__(self) -> None:
        if not (math.isfinite(self.half_life_days) and self.half_life_days > 0):
            raise ValueError(
                f"half_life_days must be a finite number > 0, got {self.half_life_days}")
        if not (math.isfinite(self.floor) and 0.0 <= self.floor <= 1.0):
            raise ValueError(f"floor must be within [0, 1], got {self.floor}")


class Calibration(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The calibrated relevance's model (``projections.ranking.calibrated``): the probability
    that a note is needed is ``1 / (1 + exp(-logit))`` with ``logit = intercept + sum of
    coefficient * feature``. The features, per note and query: ``bm25`` (its BM25 over the
    query's best among the notes the asker may see, in [0, 1]), ``cosine`` (of its vector and
    the query's), ``log_tokens`` (natural log of its tokens) and its square, the products of
    the first two with ``log_tokens``, ``context_bm25`` / ``context_cosine`` (the largest
    ``bm25`` / ``cosine`` among the ``context_notes`` notes written just before and just after
    it, within ``context_minutes``) and ``author_named`` (1 when the query names the note's
    author); plus the fixed prior term ``ln(reference_notes / n)``. Defaults fitted on
    LoCoMo's development half (``bench/fit_calibration.py``)."""

    intercept: float = 0.0
    bm25: float = 0.0
    bm25_x_log_tokens: float = 0.0
    cosine: float = 0.0
    cosine_x_log_tokens: float = 0.0
    log_tokens: float = 0.0
    log_tokens_sq: float = 0.0
    context_bm25: float = 0.0
    context_cosine: float = 0.0
    author_named: float = 0.0
    context_notes: int = 2
    """Neighbours on each side whose matches count as the note's context."""
    context_minutes: float = 60.0
    """A neighbour counts only if written within this many minutes of the note."""
    reference_notes: float = 550.0
    """The namespace size the intercept is for: with ``n`` notes visible to the asker the
    logit gains ``ln(reference_notes / n)`` (a query needs about as many notes in a small
    namespace as in a large one, so each is likelier to be one of them); 0 turns it off. The
    defaults' LoCoMo conversations have 369 to 680 turns."""
    max_tokens: int = 64
    """The length features see at most this many tokens: a fit knows little about longer
    notes, so a longer note counts as this long for its probability (its cost is its own).
    64 (since 2026-12-02; 128 before): the defaults' LoCoMo turns are 2 to 111 tokens, but
    only a tenth of them are longer than 66, so the fitted length terms (longer: likelier)
    are measured up to about 64 and extrapolated beyond; capped at 128 they made every long
    note (a 430-token assistant turn of LongMemEval) likelier than a 60-to-120-token turn
    holding the same words, and its passages crowded out the short turns that hold the
    answer (measured in docs/benchmarks.md; LoCoMo moved by at most 0.006)."""
    long_note_tokens: int = 192
    """Where the long-note term starts: see ``long_note_log_tokens``."""
    long_note_log_tokens: float = 0.0
    """The long-note term: a note longer than ``long_note_tokens`` tokens gains this times
    ``ln(tokens / long_note_tokens)`` in its logit (the length features stop at
    ``max_tokens``, and the fit's notes are all shorter than this). A long note that holds
    the query's words is less likely to be the one needed than a short one that does: on
    LongMemEval's dev set (whole turns as notes), notes of 64-128 tokens were evidence 1.4 %
    of the time, of 256-512 0.09 % and of over 512 0.04 %; its passages share the note's
    probability (``RankingConfig.passage_tokens``), so this lowers every passage of it. -0.5
    from 192 tokens (since 2026-12-02; 0 before): a 384-token note at 0.71 x the odds of a
    192-token one, a 1,536-token note at 0.35 x. Chosen on one half of LongMemEval's dev set
    by the md5 of ``question_id`` (knots 128 / 160 / 192 / 224 / 256 / 512, coefficients
    -0.25 / -0.5 / -1 / -2: 160 to 224 at -0.5 did best, 192 is their middle) and checked on
    the other (docs/benchmarks.md); LoCoMo has no turn this long (111 tokens at most), so its
    answers do not move. 0 turns it off, and is the struct's default: a calibration table
    filed before the term existed meant 0 (``LEGACY_TABLES``); ``FITTED`` sets -0.5."""
    floor: float = 0.001
    """The budget's ceiling: a note less likely to be needed than this (its calibrated
    relevance, a probability) is no candidate, however much budget is left (but the
    ``tail_notes`` below it); a question with nothing that likely gets an empty context and
    the result says so (``nothing_relevant``). 0.001: a note packed has at least a 1 in
    1,000 chance of being one the question needs (on LoCoMo's development half 0.004
    already cost 0.02 of evidence recall at 1,000 tokens, 0.02 cost 0.13). Raising it does
    not raise the tail's bar (``tail_floor`` is absolute): a floor strict for every note
    needs ``tail_notes = 0`` too (a query's own ``min_relevance`` bars tail notes as any)."""
    tail_notes: int = 0
    """The tail under the floor: besides the notes at ``floor`` or above, the ``tail_notes``
    most probable notes of at most ``tail_max_tokens`` tokens at ``tail_floor`` or above are
    candidates (every one tied with the last included): a short note just under the floor
    costs little of a budget and may be the answer beside a strong match. 0 turns it off, and
    is the struct's default: a calibration table filed before the key existed meant 0
    (``LEGACY_TABLES``); ``FITTED``, the default config's table, sets 8 (since 2026-12-03).
    Measured (docs/benchmarks.md): with 8, of the 11 evidence turns LongMemEval's dev set
    missed at 1,000 tokens (6 of them at 0.0003-0.001) it packs 3, 7 to 45 tokens long and
    0th, 1st and 6th of their question's tail ("She moved to Chicago." two minutes after the
    turn on Rachel's relocation, 0.0004; a turn naming the dog's breed without the word
    "breed", 0.0007), as a floor of 0.0003 for every note did: 0.843 / 0.929 / 0.939 -> 0.843
    / 0.943 / 0.959 (half 0 0.897 -> 0.926, half 1 0.963 -> 0.977 at 1,000 tokens; 16 gave
    the same), LoCoMo 0.681 / 0.779 / 0.851 -> 0.682 / 0.781 / 0.852; with the time windows
    (``time_window_weight``) 0.843 / 0.929 / 0.950 -> 0.843 / 0.943 / 0.969, LoCoMo 0.691 /
    0.792 / 0.864 -> 0.692 / 0.794 / 0.866. Its cost is the answers
    it makes: of ``bench scale-cpu``'s 100 selective queries at 10,000 notes, 24 of the 35
    with no candidate get 1-8, and 21 reach the near-identical and updated-facts rules
    (``updates``: two candidates or more) that did not: 1.074 x the instructions a query
    (callgrind) of the tail off, 1.027 x the old default's since those rules skip the work
    that cannot change a candidate, and a median selective query dearer still (it falls
    between the queries that reach the rules and those that do not). A floor of 0.0003 for
    every note instead: 2-3.5 x the CPU (long notes cut into passages)."""
    tail_floor: float = 0.0003
    """The least probability of a ``tail_notes`` note (a 1 in 3,333 chance)."""
    tail_max_tokens: int = 48
    """The longest note the tail takes, in tokens (the passage size: one passage)."""
    nearest: int = 3
    """Besides the notes with evidence of their own (a shared word, ``min_cosine``), the
    ``nearest`` notes by cosine are candidates when their cosine is at least
    ``nearest_min_cosine``: a paraphrase that shares no word and sits under ``min_cosine``
    still finds its note, as a vector store's nearest neighbours would. Their probability
    must clear ``floor`` like any other's, except in a small namespace
    (``nearest_max_notes``), where they are candidates whatever the floor and those found by
    meaning alone are ordered by it (``calibrated.by_meaning``). 0 turns it off. 3 (since
    2026-12-02; 0 before): the 12-paraphrase trials of ``test_updates`` find 10 of 12 each
    (2 and 1 of 12 with 0), LoCoMo's recall is unchanged."""
    nearest_min_cosine: float = 0.05
    """The least cosine a ``nearest`` note needs (unrelated texts sit near 0)."""
    nearest_max_notes: int = 50
    """In a namespace of at most this many notes visible to the asker, the ``nearest``
    notes are candidates whatever ``floor`` says: a small namespace answers a paraphrase
    with its nearest notes rather than nothing (a large one has enough notes for the
    probability to decide)."""
    time_window_weight: float = 0.0
    """Questions that name a time (``projections.ranking.timewords``: "two weeks ago", "yesterday",
    "last Saturday", "in March", "on October 13, 2023"...): a note written in the window the
    question names (``time_window_fraction``, ``time_window_min_days``) gains this times
    ``ln(n f / F)`` in its logit, never less than 0: ``n`` the notes the asker may see,
    ``f`` how well the note's time fits the window (1 on the days named, falling linearly to
    0 at the window's edges: "two weeks ago" is likeliest the day 14 days back), ``F`` the
    sum of ``f`` over the visible notes. If the answer was written in the window and nothing
    else is known, that is Bayes' odds ratio of a note there against the average note
    (``n / w`` for ``w`` notes on the named day), so 1 is the rule at its full weight, not a
    fitted value. A note of the window is a candidate when it shares a word with the query
    or its cosine is at least ``time_window_min_cosine``, and (with the gain) clears
    ``floor``; notes outside are unchanged, and a question that names no time costs one
    regular-expression search (a few microseconds; the same answer bytes), one that does
    what packing its added candidates costs (``bench scale-cpu``'s corpus at 10,000 notes:
    +1.5 to +3.5 ms, "yesterday" adding 70 candidates). The query's ``as_of`` (the worker's
    clock, read once, for a live query) is what the window is relative to, so an audit
    replay names the same window; ``explain`` shows it (``time_windows``). 1 in ``FITTED``
    (since 2026-12-03): on LongMemEval's dev set, half 0 (the half measured on) 0.897 ->
    0.926 at 1,000 tokens (0.926 -> 0.956 with ``tail_notes`` 8), temporal-reasoning 0.600
    -> 0.800; half 1 unchanged (its 5 questions that name a time were found already); LoCoMo
    0.681 / 0.779 / 0.851 -> 0.691 / 0.792 / 0.864 (84 of its 760 questions name a time, 76
    of them a month, a year or a date: "in June", "on October 13, 2023"). 0.5 found nothing
    more on half 0, 2 the same as 1 but cost half 1 0.008 at 200 tokens (docs/benchmarks.md,
    section "Questions that name a time", with the query CPU it costs). 0 turns it off: no
    window is looked for; it is the struct's default, since a calibration table filed before
    the key existed meant 0 (``LEGACY_TABLES``)."""
    time_window_fraction: float = 0.25
    """The window's tolerance: the named day(s) widened on each side by this share of how
    long before the question they lie ("two weeks ago" asked on May 5: April 21, give or
    take 3.5 days; "yesterday": give or take ``time_window_min_days``). People remember
    recent days exactly and older ones roughly; a quarter keeps "a week ago" (5 to 9 days
    back) apart from "two weeks ago" (10 to 18), while "four weeks ago" takes 21 to 35 days
    back, where "a month ago" is as likely meant. 0.5 found less on half 0 of LongMemEval's
    dev set (0.956 -> 0.926 at 1,000 tokens with ``tail_notes`` 8: each note of a wider
    window gains less)."""
    time_window_min_days: float = 1.0
    """The least tolerance, in days: a note written late the evening before or early the
    morning after the named day (another time zone than UTC) still counts."""
    time_window_min_cosine: float = 0.05
    """The least cosine that makes a note of the window a candidate without a shared word
    (its probability, with the gain, must still clear ``floor``): the question pointed at
    the window, so any note there related to it at all may be the one (a question that
    names a time often shares no word with the note it asks for: "what did I do two weeks
    ago" / "I planted tomato saplings today"); the same least cosine as ``nearest``'s."""
    time_window_max_notes: int = 1_000
    """A window of more than this many notes (the visible notes written in it) makes
    candidates only of those of its notes that share a word with the query and of its
    ``time_window_max_notes`` nearest to the query by cosine (every one tied with the last
    included); the others, which only a cosine of at least ``time_window_min_cosine`` would
    have made candidates, are not valued at all. Each note kept gets the probability it would
    get without the cap (its gain is the window's, ``F`` counts every note of it). Why: a wide
    window in a large namespace ("in 2025", "last year" asked at 100,000 notes: half of them)
    had every one of its notes valued, 8 x a query's CPU (43-48 ms against 5-6 ms), to pack a
    few; and its gain is small there (``ln(n f / F)``: ln 2 to ln 4). 1,000 is above every
    window of the benchmarks' namespaces (LongMemEval's ~500 notes, LoCoMo's 369-680), so
    their answers do not move. 0 turns the cap off."""
    min_cosine: float = 0.45
    """A note that shares no word with the query is a candidate only if its cosine is at
    least this. With the bundled embedder unrelated texts sit near 0, neighbours in a series
    ("alpha" / "beta", "monday" / "tuesday") near 0.4, paraphrases at 0.45-0.8 ("car" /
    "vehicle" 0.72, "puppy" / "dog" 0.57, "paris trip" / "vacation in france" 0.47)."""

    def __post_init__(self) -> None:
        for name in COEFFICIENTS:
            v = getattr(self, name)
            if not math.isfinite(v) or abs(v) > 1e6:
                raise ValueError(f"calibration.{name} must be a finite number within "
                                 f"+-1e6, got {v}")
        if not 0 <= self.context_notes <= 16:
            raise ValueError(f"calibration.context_notes must be within [0, 16], got "
                             f"{self.context_notes}")
        if not (math.isfinite(self.reference_notes) and self.reference_notes >= 0):
            raise ValueError(f"calibration.reference_notes must be a finite number >= 0, got "
                             f"{self.reference_notes}")
        if self.max_tokens < 1:
            raise ValueError(f"calibration.max_tokens must be >= 1, got {self.max_tokens}")
        if self.long_note_tokens < 1:
            raise ValueError(f"calibration.long_note_tokens must be >= 1, got "
                             f"{self.long_note_tokens}")
        if not (math.isfinite(self.long_note_log_tokens) and
                abs(self.long_note_log_tokens) <= 1e6):
            raise ValueError(f"calibration.long_note_log_tokens must be a finite number within "
                             f"+-1e6, got {self.long_note_log_tokens}")
        if not (math.isfinite(self.min_cosine) and -1.0 <= self.min_cosine <= 1.0):
            raise ValueError(f"calibration.min_cosine must be within [-1, 1], got "
                             f"{self.min_cosine}")
        if not (math.isfinite(self.floor) and 0.0 <= self.floor <= 1.0):
            raise ValueError(f"calibration.floor must be within [0, 1], got {self.floor}")
        if not 0 <= self.tail_notes <= 1000:
            raise ValueError(f"calibration.tail_notes must be within [0, 1000], got "
                             f"{self.tail_notes}")
        if self.tail_max_tokens < 1:
            raise ValueError(f"calibration.tail_max_tokens must be >= 1, got "
                             f"{self.tail_max_tokens}")
        if not (math.isfinite(self.tail_floor) and 0.0 < self.tail_floor <= 1.0):
            raise ValueError(f"calibration.tail_floor must be within (0, 1], got "
                             f"{self.tail_floor}")
        if self.nearest_max_notes < 0:
            raise ValueError(f"calibration.nearest_max_notes must be >= 0, got "
                             f"{self.nearest_max_notes}")
        if not 0 <= self.nearest <= 100:
            raise ValueError(f"calibration.nearest must be within [0, 100], got "
                             f"{self.nearest}")
        if not (math.isfinite(self.nearest_min_cosine) and
                -1.0 <= self.nearest_min_cosine <= 1.0):
            raise ValueError(f"calibration.nearest_min_cosine must be within [-1, 1], got "
                             f"{self.nearest_min_cosine}")
        if not (math.isfinite(self.time_window_weight) and 0.0 <= self.time_window_weight <= 100):
            raise ValueError(f"calibration.time_window_weight must be within [0, 100], got "
                             f"{self.time_window_weight}")
        if not (math.isfinite(self.time_window_fraction) and
                0.0 <= self.time_window_fraction <= 1.0):
            raise ValueError(f"calibration.time_window_fraction must be within [0, 1], got "
                             f"{self.time_window_fraction}")
        if not (math.isfinite(self.time_window_min_days) and
                0.0 <= self.time_window_min_days <= 366):
            raise ValueError(f"calibration.time_window_min_days must be within [0, 366], got "
                             f"{self.time_window_min_days}")
        if self.time_window_max_notes < 0:
            raise ValueError(f"calibration.time_window_max_notes must be >= 0, got "
                             f"{self.time_window_max_notes}")
        if not (math.isfinite(self.time_window_min_cosine) and
                -1.0 <= self.time_window_min_cosine <= 1.0):
            raise ValueError(f"calibration.time_window_min_cosine must be within [-1, 1], got "
                             f"{self.time_window_min_cosine}")
        if not (math.isfinite(self.context_minutes) and self.context_minutes >= 0):
            raise ValueError(f"calibration.context_minutes must be a finite number >= 0, got "
                             f"{self.context_minutes}")


COEFFICIENTS = ("intercept", "bm25", "bm25_x_log_tokens", "cosine", "cosine_x_log_tokens",
                "log_tokens", "log_tokens_sq", "context_bm25", "context_cosine", "author_named")
"""The model's coefficients, in the order features are added."""
FITTED = Calibration(intercept=-12.79, bm25=0.266, bm25_x_log_tokens=1.076, cosine=0.359,
                     cosine_x_log_tokens=0.7282, log_tokens=0.6695, log_tokens_sq=0.006989,
                     context_bm25=1.985, context_cosine=0.5946, author_named=2.034,
                     long_note_log_tokens=-0.5, tail_notes=8, time_window_weight=1.0)
"""The fitted defaults (``python -m bench fit``: LoCoMo's development half, ridge 1e-5 chosen
with each conversation held out in turn; see ``Calibration``)."""


class Updates(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Updated facts (``projections.ranking.updates``): two candidates of a query that are
    about the same subject (their notes' vectors' cosine at least ``same_subject_cosine``) and
    written at least ``min_gap_days`` apart are an older and a newer version of a fact. The
    newer wins unless the older is a better match by a clear margin (its relevance more than
    ``margin`` times the newer's): it takes the older's score when that is higher, and the
    older's score is multiplied by ``older_weight``. Longterm notes are never the older
    (earned permanence). ``margin = 0`` turns the rule off."""

    same_subject_cosine: float = 0.6
    """Two notes whose vectors' cosine is at least this are about the same subject."""
    min_gap_days: float = 1.0
    """Notes written closer in time than this are parts of one exchange, not an update."""
    margin: float = 2.0
    """The older wins only when its relevance exceeds ``margin`` times the newer's."""
    older_weight: float = 0.5
    """The older version's score is multiplied by this (1: only the newer is lifted)."""
    max_notes: int = 200
    """Only the ``max_notes`` highest-scored candidates are compared (bounds the work)."""
    query_words_share: float = 0.0
    """Two candidates are also about the same subject when the newer holds the query words
    the older holds (as BM25 matches words; every one, or ``restated_share`` of their
    weight) and the older's words carry at least this share of the query's IDF weight over
    the notes the asker may see: both answer the question on the same terms, so the older
    cannot be the better match on them and ``margin`` does not apply (their probabilities
    differ by length and neighbours, not by subject). A note longer than
    ``newer_max_tokens`` is never the newer by this signal: its words may lie far apart, so
    holding the older's words says nothing about restating its fact. 0 turns this signal
    off (the struct's default, so a config written before it keeps its meaning);
    ``RankingConfig``'s default is 0.7."""

    restated_share: float = 1.0
    """With ``query_words_share``: the newer need hold only query words carrying this share
    of the IDF weight of those the older holds (1: every one of them), and it takes that
    share of the older's score (a newer that restates half of the older's match on the
    question is lifted to half the older's score). A fact restated in other words keeps
    its subject's rarest words ("brings my total species count to 32" for "27 different
    species of birds seen in my local park"), not every word of the first telling. An
    older has one such partial version (the newer restating the most, then the newest);
    a newer holding every word is a version besides."""
    newer_max_tokens: int = 0
    """A note longer than this many tokens is never the newer by the query-words signal: its
    words may lie hundreds of tokens apart, so holding the older's says nothing about
    restating its fact (a 900-token reply on family travel holds every word of "my recent
    family trip to Hawaii"). 0: ``RankingConfig.passage_tokens`` (the limit before this
    setting existed)."""

    def __post_init__(self) -> None:
        for name in ("query_words_share", "restated_share"):
            v = getattr(self, name)
            if not (math.isfinite(v) and 0.0 <= v <= 1.0):
                raise ValueError(f"updates.{name} must be within [0, 1], got {v}")
        if self.restated_share <= 0:
            raise ValueError("updates.restated_share must be above 0 (1: the newer holds "
                             "every query word the older holds)")
        if self.newer_max_tokens < 0:
            raise ValueError("updates.newer_max_tokens must be >= 0 (0: passage_tokens), got "
                             f"{self.newer_max_tokens}")
        for name in ("same_subject_cosine", "min_gap_days", "margin", "older_weight"):
            v = getattr(self, name)
            if not math.isfinite(v):
                raise ValueError(f"updates.{name} must be a finite number, got {v}")
        if not -1.0 <= self.same_subject_cosine <= 1.0:
            raise ValueError("updates.same_subject_cosine must be within [-1, 1], got "
                             f"{self.same_subject_cosine}")
        if self.min_gap_days < 0 or self.margin < 0:
            raise ValueError("updates.min_gap_days and updates.margin must be >= 0")
        if not 0.0 <= self.older_weight <= 1.0:
            raise ValueError(f"updates.older_weight must be within [0, 1], got "
                             f"{self.older_weight}")
        if not 1 <= self.max_notes <= 10_000:
            raise ValueError(f"updates.max_notes must be within [1, 10000], got "
                             f"{self.max_notes}")


UPDATES_OFF = Updates(margin=0.0)
"""The rule off: what a config written before it meant."""
UPDATES_ON = Updates(same_subject_cosine=1.0, older_weight=0.9, query_words_share=0.7,
                     restated_share=0.5, newer_max_tokens=128)
"""The default: same subject by the query's words (``query_words_share`` 0.7), the newer
restating at least half of the older's match on them (``restated_share`` 0.5; a note of
at most 128 tokens, ``newer_max_tokens``: a user's turn of 84 tokens is one statement,
though served as two passages of 48) lifted to that share of the older's score (all of it
when it holds every word), and the older at 0.9 of its own (``older_weight``: the newer
wins a budget that fits one, and the older's evidence, still needed to say what changed,
stays when the budget fits both; 0.5 cost turn recall at 500 tokens on LongMemEval's dev
set), and the cosine signal off in practice (``same_subject_cosine`` 1: even two parallel
vectors compute to a cosine of 1 - 1e-16; near-identical notes are merged by their own
rule), since it cost recall there."""


MAX_TTL_DAYS = 3_650_000.0
"""Largest ``default_ttl_days`` (10,000 years: the expiry instant stays a 64-bit count of
microseconds)."""
class Candidates(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How calibrated relevance finds its candidates in a large namespace
    (``projections.ranking.dense``, ``calibrated.likely_among``): below ``scan_max_notes``
    visible notes every note is scored (exact); from there on only the notes sharing a word
    with the query (the postings) and the ``dense`` nearest by cosine (an approximate
    nearest-neighbour index, HNSW from ``usearch``), each with its neighbours in creation
    order for the context features, so a query's cost follows its candidates, not the
    namespace (at most ``lexical`` of the postings' notes, by BM25)."""

    scan_max_notes: int = 20_000
    """Namespaces with fewer visible notes than this are scanned in full (exact)."""
    dense: int = 128
    """Nearest notes by cosine the dense stage adds to the lexical ones (256 until 2026-12-02:
    at 100k notes, on ``bench scale-cpu``'s queries, 128 gave the scan's answer as often as
    256 did (50/50 selective, 42/50 common-word) at 0.80 x the selective query's CPU and
    0.92 x the common-word one's, one interleaved run; the HNSW search's cost grows with the
    count asked for)."""
    lexical: int = 256
    """Of the notes sharing a word with the query, only those of the ``lexical`` highest BM25
    (every one tied with the last included; at least the query's candidate count) are
    candidates; the others still lend their BM25 to their neighbours' context features, so
    a candidate's probability is the scan's to the bit. Bounds the work of a query whose
    words are common, and of every query of a large namespace: the candidates and their
    context windows (~4.5 notes a candidate) are what the query's cost follows (1,024 until
    2026-12-02: at 100k notes, on ``bench scale-cpu``'s queries, 256 gave the scan's answer
    as often as 1,024 did (50/50 selective, 47/50 common-word) at 0.78 x the selective
    query's CPU and 0.92 x the common-word one's, blocks alternated in one run)."""
    connectivity: int = 12
    """HNSW links per node (``usearch``'s ``connectivity``)."""
    expansion_add: int = 32
    """HNSW search width while a note is added."""
    expansion_search: int = 128
    """HNSW search width of a query (at least ``dense``)."""

    def __post_init__(self) -> None:
        for name in ("scan_max_notes", "dense", "lexical", "connectivity", "expansion_add",
                     "expansion_search"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


class RankingConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """All ranking constants. Frozen; build a new one to change anything."""

    longterm_uses: int = 5
    """A note with at least this many ``note.used`` events is ``longterm`` and never decays."""
    short: TierDecay = TierDecay(half_life_days=180.0, floor=0.35)
    """Decay of ordinary notes (``kind=note``)."""
    scratch: TierDecay = TierDecay(half_life_days=3.0, floor=0.0)
    """Decay of scratch notes (``kind=scratch``): fades fast, on purpose."""
    min_relevance: float = 0.0
    """A note is a candidate only if its relevance is > 0 and >= this."""
    per_note_overhead_tokens: int = 0
    """Added to each note's tokens to get its packing cost (separators, headers)."""
    order: Order = "edges"
    """Context order of the packed notes: ``edges``, ``score`` or ``chronological``."""
    exact_max_cells: int = 4_000_000
    """Exact packing while candidates x budget <= this; greedy + swap above."""
    bm25_k1: float = 1.2
    """BM25 term-frequency saturation."""
    bm25_b: float = 1.0
    """BM25 length normalisation (0 = none, 1 = full). 1 (since 2026-12-02; 0.75 before): a
    word in a long note counts for less, in proportion to the note's length, so a short note
    that states a fact outranks a long reply that mentions its words in passing. On
    LongMemEval's dev set (passages of 48 tokens, length features capped at 64), chosen on
    one half of its questions by the md5 of ``question_id`` and checked on the other: turn
    recall 0.760 / 0.799 / 0.868 -> 0.760 / 0.824 / 0.882 (half 0) and 0.791 / 0.900 / 0.955
    -> 0.807 / 0.914 / 0.963 (half 1) at 200 / 500 / 1000 tokens, the answer string in the
    context and the evidence turns packed whole no lower on either half; 0.9 and 0.95 gained
    less. LoCoMo 0.671 / 0.773 / 0.849 -> 0.670 / 0.776 / 0.847 (docs/benchmarks.md)."""
    relevance: Relevance = "calibrated"
    """``bm25``: lexical BM25 in (0, 1] (cosine where the note and the query carry caller
    embeddings), the relevance of the first releases; ``calibrated``: the probability that
    a note is needed (``projections.ranking.calibrated``)."""
    analyzer: Analyzer = "english"
    """How words match: ``english`` (Snowball English stems, English stop words dropped;
    ``projections.ranking.analyzer``) or ``plain`` (the tokens as they are)."""
    embedder: str = "wordllama"
    """Where the notes' and queries' vectors come from (``projections.ranking.embedders``):
    ``wordllama`` (bundled, offline; ``wordllama-256`` / ``-128`` / ``-64`` name how many of
    its components are kept, 128 by default), ``none``, or ``package.module:factory``. Set by the
    worker's config only, never per query."""
    max_candidates: int = 200
    """Calibrated relevance: the candidates are the notes of this many highest relevances
    (all tied at the last one included), and at least one per 10 tokens of budget."""
    calibration: Calibration = FITTED
    """Calibrated relevance's coefficients."""
    updates: Updates = UPDATES_ON
    """Updated facts: the newer version of a fact wins (``Updates``; calibrated relevance).
    On by default with the query-words signal (``UPDATES_ON``): on LongMemEval's dev set it
    raised knowledge-update newest-fact recall and turn recall (see docs/benchmarks.md);
    the cosine signal alone ("same subject" when the notes' vectors are close, margin 2,
    older halved) cost turn recall there (0.570 / 0.752 / 0.829 against 0.581 / 0.778 /
    0.850 at 200 / 500 / 1000 tokens) and is as good as off. ``margin = 0`` turns the
    rule off."""
    unknown_word_factor: float = 1.0
    """A query word that no note the asker may see contains (``Columns.unknown_words``:
    words as BM25 matches them, stop words aside) says the memory was never told what the
    question asks about: each one multiplies the probability of every candidate that is not
    close in meaning to the query (cosine under ``calibration.min_cosine``: it matches only
    the rest of the question) by this factor before ``calibration.floor`` decides, and the
    result lists the words (``unknown_words``); calibrated relevance. A note near the query
    in meaning keeps its probability (a paraphrase shares no word by definition). 0: those
    notes go, and a query left without candidates says ``nothing_relevant``. 1 (the default)
    turns the rule off: on LongMemEval's dev set 0 took the tokens packed for the ten
    questions whose answer is not in the history from 980 to about 640 at budget 1,000
    (target 500) but lost evidence of 3 of the other 95 questions (a person named in the
    question and not in the notes, a misspelt word)."""
    near_identical: float = 0.9
    """Two candidates whose texts' word sets overlap at least this much (Jaccard of their
    words, stop words kept: "not" counts) are one: only the higher scored (ties: the newer,
    then the note id) is packed, and it names the others (``stands_for``); calibrated
    relevance. 0 turns it off."""
    passage_tokens: int = 48
    """Long notes as passages (``projections.ranking.passages``): a candidate note of more
    tokens than this is a candidate as its passages of at most about this many tokens,
    each packed on its own and shown with its note's id, date and place (``passage``);
    calibrated relevance. A note's probability is shared among its passages by their own
    BM25 match, so a long note cut up is no likelier than whole. 48 (since 2026-12-02; 128
    before): about the length of the turns the calibration was fitted on (LoCoMo: median
    34 tokens, three quarters under 50), so the passage that holds a match is a unit the
    model knows, and the part of a 100-token note that matches costs 50 tokens instead of
    100. Chosen on one half of LongMemEval's dev set among 32 / 40 / 48 / 64 and checked on
    the other (docs/benchmarks.md): turn recall 0.609 / 0.797 / 0.861 -> 0.783 / 0.862 /
    0.924 at 200 / 500 / 1000 tokens, and the questions whose answer is a string in their
    evidence find it in the context more often (0.72 / 0.87 / 0.92 -> 0.92 / 0.92 / 0.95);
    32 cut answers apart (0.77 / 0.82 / 0.87). LoCoMo 0.623 / 0.749 / 0.817 -> 0.670 / 0.773
    / 0.848. 0 turns it off (what a config written before the key meant)."""
    passage_repeat: float = 0.1
    """A long note's passages after its best one count less: the passages of one note that are
    candidates, ordered by their own match (``passages.relevance_of``; ties: the earlier
    passage), have their scores multiplied by ``passage_repeat ** rank`` (the best, rank 0, by
    1; the next by ``passage_repeat``, ...), and such a passage shows its ``rank``, except
    the passages of the note that holds the query's best candidate (the lead: the likeliest
    place of the whole answer, a reply to "remind me what you said about ..."), which keep
    their shares. A note's probability is shared among its passages, so without this its
    second, third, ... passages are each worth a share of the note, and one long reply that
    mentions the query's words throughout fills a budget with its parts while the turns of
    other conversations that the question also needs stay out (a question about two things
    said in two sessions). Calibrated relevance, with ``passage_tokens`` on; 1 turns it off
    (what a config written before the key meant); 0 is refused (a passage worth 0 is never
    packed: use a small value). 0.1 (since 2026-12-02): on LongMemEval's dev set, chosen on
    one half of its questions by the md5 of ``question_id`` among 0.7 / 0.5 / 0.3 / 0.1,
    with and without the lead's exemption, and checked on the other (docs/benchmarks.md):
    turn recall 0.784 / 0.853 / 0.897 -> 0.799 / 0.868 / 0.897 (half 0) and 0.818 / 0.930 /
    0.963 -> 0.867 / 0.963 / 0.963 (half 1) at 200 / 500 / 1000 tokens; without the
    exemption it found more turns (0.854 / 0.939 / 0.939 in all) but cut the answer string
    out of the context of 6 of the 40 questions whose evidence holds it at 200 tokens
    (parts of the one reply that held it gave way)."""
    candidates: Candidates = Candidates()
    """Calibrated relevance: where the candidates of a large namespace come from."""
    duplicate_threshold: float = 0.5
    """A note being remembered reports the notes the writer may see whose word overlap
    with it (``projections.ranking.similarity``) is at least this, as near-duplicates it
    could revise or supersede instead; 1 reports only notes of the same words. Read at
    write time only: no ranking depends on it."""
    duplicate_lsh_bands: int = 64
    """The near-duplicate lookup (``projections.ranking.dupsketch``): how many MinHash bands
    the projector files each active note under (its cost: this many index entries a note)."""
    duplicate_lsh_min_hits: int = 3
    """How many of a write's bands a note must share to be compared at all."""
    duplicate_lsh_recall: float = 0.98
    """The rows per band are the most that still give a pair exactly at
    ``duplicate_threshold`` at least this chance of sharing ``duplicate_lsh_min_hits`` bands
    (more rows: fewer unrelated candidates, more misses at the threshold)."""
    duplicate_lsh_bucket_cap: int = 128
    """A write's band whose bucket holds more than this many notes may go uncounted: on a
    corpus of common words many unrelated notes share such a band's values, so it names
    little and costs the lookup the most to count. Up to as many bands as keep a pair at
    ``duplicate_threshold`` at least ``duplicate_lsh_recall`` likely to be compared are
    left out, the largest buckets first (``dupsketch.spec_of``: 6 of 64 at the defaults).
    On ``bench writes``' 100,000 notes, 128 cut the note keys a check counts from 6.1k to
    2.1k and the notes it names from 21 to 1.2, with the same recall on near-copies. 0
    counts every band. Read by the lookup only: changing it needs no replay."""
    default_ttl_days: float = 0.0
    """The namespace default TTL: a note without its own ``expires_at`` leaves every answer
    this many days after its creation (``at``); 0: such notes never expire."""

    def __post_init__(self) -> None:
        if self.longterm_uses < 1:
            raise ValueError(f"longterm_uses must be >= 1, got {self.longterm_uses}")
        if not (math.isfinite(self.min_relevance) and 0.0 <= self.min_relevance <= 1.0):
            raise ValueError(f"min_relevance must be within [0, 1], got {self.min_relevance}")
        if self.per_note_overhead_tokens < 0:
            raise ValueError(
                f"per_note_overhead_tokens must be >= 0, got {self.per_note_overhead_tokens}"
            )
        if self.exact_max_cells < 0:
            raise ValueError(f"exact_max_cells must be >= 0, got {self.exact_max_cells}")
        if not (math.isfinite(self.bm25_k1) and self.bm25_k1 >= 0):
            raise ValueError(f"bm25_k1 must be a finite number >= 0, got {self.bm25_k1}")
        if not (math.isfinite(self.bm25_b) and 0.0 <= self.bm25_b <= 1.0):
            raise ValueError(f"bm25_b must be within [0, 1], got {self.bm25_b}")
        if self.embedder not in _EMBEDDERS and not _PLUGIN.fullmatch(self.embedder):
            raise ValueError(f"embedder must be one of {', '.join(_EMBEDDERS)} or "
                             f"'package.module:factory', got {self.embedder!r}")
        if self.max_candidates < 1:
            raise ValueError(f"max_candidates must be >= 1, got {self.max_candidates}")
        if not (math.isfinite(self.unknown_word_factor) and
                0.0 <= self.unknown_word_factor <= 1.0):
            raise ValueError("unknown_word_factor must be within [0, 1], got "
                             f"{self.unknown_word_factor}")
        if not (math.isfinite(self.near_identical) and 0.0 <= self.near_identical <= 1.0):
            raise ValueError(f"near_identical must be within [0, 1], got {self.near_identical}")
        if self.passage_tokens != 0 and not 16 <= self.passage_tokens <= 1_000_000:
            raise ValueError(f"passage_tokens must be 0 (off) or within [16, 1000000], got "
                             f"{self.passage_tokens}")
        if not (math.isfinite(self.passage_repeat) and 0.0 < self.passage_repeat <= 1.0):
            raise ValueError("passage_repeat must be within (0, 1] (1: off), got "
                             f"{self.passage_repeat}")
        if not (math.isfinite(self.default_ttl_days) and
                0 <= self.default_ttl_days <= MAX_TTL_DAYS):
            raise ValueError(f"default_ttl_days must be within [0, {MAX_TTL_DAYS}], got "
                             f"{self.default_ttl_days}")
        if not (math.isfinite(self.duplicate_threshold) and
                0.0 < self.duplicate_threshold <= 1.0):
            raise ValueError("duplicate_threshold must be within (0, 1], got "
                             f"{self.duplicate_threshold}")
        if not 1 <= self.duplicate_lsh_bands <= 256:
            raise ValueError("duplicate_lsh_bands must be within 1..256, got "
                             f"{self.duplicate_lsh_bands}")
        if not 1 <= self.duplicate_lsh_min_hits <= self.duplicate_lsh_bands:
            raise ValueError("duplicate_lsh_min_hits must be within 1..duplicate_lsh_bands, got "
                             f"{self.duplicate_lsh_min_hits}")
        if self.duplicate_lsh_bucket_cap < 0:
            raise ValueError("duplicate_lsh_bucket_cap must be >= 0 (0: count every band), "
                             f"got {self.duplicate_lsh_bucket_cap}")
        if not (math.isfinite(self.duplicate_lsh_recall) and
                0.0 < self.duplicate_lsh_recall < 1.0):
            raise ValueError("duplicate_lsh_recall must be within (0, 1), got "
                             f"{self.duplicate_lsh_recall}")

    def digest(self) -> str:
        """A short stable fingerprint of every value (recorded with each served query). Keys
        added after the first release count only when they differ from their value before
        they existed (``LEGACY``), so configs written before them keep their fingerprint."""
        return _digest(legacy_form(msgspec.to_builtins(self)))


DEFAULT = RankingConfig()

LEGACY: dict[str, Any] = {"relevance": "bm25", "analyzer": "plain", "duplicate_threshold": 0.5,
                          "updates": msgspec.to_builtins(UPDATES_OFF), "near_identical": 0.0,
                          "duplicate_lsh_bands": 48, "duplicate_lsh_min_hits": 2,
                          "duplicate_lsh_recall": 0.98,
                          "candidates": {"scan_max_notes": 20_000, "dense": 128,
                                         "lexical": 1_024, "connectivity": 12,
                                         "expansion_add": 32, "expansion_search": 128},
                          "default_ttl_days": 0.0, "passage_tokens": 0, "passage_repeat": 1.0,
                          "unknown_word_factor": 1.0}
"""Keys added after the first release and the value a config written before them meant."""
LEGACY_TABLES: dict[str, dict[str, Any]] = {
    "updates": {"restated_share": 1.0, "newer_max_tokens": 0},
    "calibration": {"long_note_tokens": 192, "long_note_log_tokens": 0.0, "tail_notes": 0,
                    "tail_floor": 0.0003, "tail_max_tokens": 48, "time_window_weight": 0.0,
                    "time_window_fraction": 0.25, "time_window_min_days": 1.0,
                    "time_window_min_cosine": 0.05, "time_window_max_notes": 1_000},
}
"""Each table's keys added after it was first filed, with the value a table written before
them meant (the struct's defaults): at that value they are left out of the fingerprint and
of the filed form (``_tables_as_filed``), so a config filed before them keeps both."""
CANDIDATES_DEFAULTS: tuple[dict[str, Any], ...] = (
    {"scan_max_notes": 20_000, "dense": 256, "lexical": 1_024, "connectivity": 12,
     "expansion_add": 32, "expansion_search": 128},
    LEGACY["candidates"],
)
"""The defaults the ``candidates`` table had before today's, oldest first, each with every
key it has now (``dense`` 256 until 2026-12-02, then 128; ``lexical`` 1,024 until the
third session of that day, then 256). A writer left the table out of a config's fingerprint
when it held that writer's default (its ``LEGACY`` value was the default then), so a config
history entry holding one of these may carry that fingerprint (``filed_digests``). The
fingerprint of a config is now made against the last of them, fixed in ``LEGACY``: a later
move of a default changes the fingerprint of the configs that use it, never of those filed."""
WRITE_ONLY = ("duplicate_lsh_bands", "duplicate_lsh_min_hits", "duplicate_lsh_recall",
              "duplicate_lsh_bucket_cap")
"""Keys only the near-duplicate lookup reads: they change no answer, so no fingerprint."""
CALIBRATED_ONLY = ("embedder", "max_candidates", "calibration", "candidates", "updates",
                   "near_identical", "passage_tokens", "unknown_word_factor", "passage_repeat")
"""Keys added with calibrated relevance that nothing else reads."""


def legacy_form(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` (a config as builtins) as a config written before the newer keys held it:
    without the keys at their ``LEGACY`` value, and, under ``bm25`` relevance, without the
    keys only calibrated relevance reads (they change no result there), and never with the
    ``WRITE_ONLY`` keys."""
    drop = set(CALIBRATED_ONLY) if raw.get("relevance", "bm25") == "bm25" else set()
    drop |= set(WRITE_ONLY)
    return {k: v for k, v in _tables_as_filed(raw).items()
            if k not in drop and (k not in _LEGACY_FILED or v != _LEGACY_FILED[k])}


def _tables_as_filed(raw: dict[str, Any],
                     names: Iterable[str] = tuple(LEGACY_TABLES)) -> dict[str, Any]:
    """``raw`` with each table of ``LEGACY_TABLES`` (of ``names``) lacking the keys added to
    it later at their value before they existed (what a writer before them filed)."""
    out = raw
    for name in names:
        added = LEGACY_TABLES[name]
        table = raw.get(name)
        if isinstance(table, dict):
            out = {**out, name: {k: v for k, v in table.items()
                                 if k not in added or v != added[k]}}
    return out


_LEGACY_FILED = _tables_as_filed(LEGACY)
"""``LEGACY`` as ``legacy_form`` compares it (made once)."""


def filed_digests(cfg: RankingConfig, data: bytes) -> frozenset[str]:
    """The fingerprints a config history entry holding ``cfg``, filed as ``data``, may carry:
    ``cfg.digest()``, and, when its ``candidates`` table as filed is one of the
    ``CANDIDATES_DEFAULTS``, its fingerprint without that table (what a writer whose default
    it was computed)."""
    form = legacy_form(msgspec.to_builtins(cfg))
    out = {_digest(form)}
    try:
        raw = msgspec.json.decode(data)
    except msgspec.DecodeError:
        return frozenset(out)
    if isinstance(raw, dict) and raw.get("candidates") in CANDIDATES_DEFAULTS:
        out.add(_digest({k: v for k, v in form.items() if k != "candidates"}))
    return frozenset(out)


def _digest(raw: dict[str, Any]) -> str:
    return hashlib.sha256(msgspec.json.encode(raw)).hexdigest()[:16]


MOVED_DEFAULTS: dict[str, Any] = {"bm25_b": 0.75}
"""Keys of the first release whose default has moved since, with the default they had then
(``bm25_b``: 0.75 until 2026-12-02): an as-of query's id digests such a key at that value
while the request leaves it at today's default, so ids from before stay."""


def id_digest(overrides: Mapping[str, Any] | None) -> str:
    """The config part of an as-of query's id: the digest of the overrides applied to the
    defaults as they were before the ``LEGACY`` keys existed (and the ``MOVED_DEFAULTS`` at
    their first default), plus each ``LEGACY`` key the overrides set (so restating another
    key's default changes nothing, as before, and a request that sets a newer key never
    shares an id with one that does not), and each moved key set to its first default (no
    longer the default, so no longer the id of a request that leaves it). Raises
    ``msgspec.ValidationError`` for bad overrides."""
    raw = _tables_as_filed(msgspec.to_builtins(with_overrides(DEFAULT, overrides or {})))
    base = {**raw, **LEGACY}
    now = msgspec.to_builtins(DEFAULT)
    moved = []
    for k, first in MOVED_DEFAULTS.items():
        if raw[k] == now[k]:
            base[k] = first
        elif raw[k] == first:
            moved.append(k)
    named = sorted([k for k in (overrides or {}) if k in LEGACY or k in CALIBRATED_ONLY]
                   + moved)
    extra = ";".join(f"{k}={msgspec.json.encode(raw[k]).decode()}" for k in named)
    return _digest(legacy_form(base)) + (f"+{extra}" if extra else "")


def config_from_json(data: bytes) -> RankingConfig:
    """A config filed as JSON (the audit's config history): keys it lacks mean their
    ``LEGACY`` value (it was written before they existed), the others the defaults."""
    raw = msgspec.json.decode(data)
    if not isinstance(raw, dict):
        raise msgspec.ValidationError("a config must be a JSON object")
    return msgspec.convert({**LEGACY, **raw}, RankingConfig)


def filed_form(cfg: RankingConfig, data: bytes) -> bool:
    """Whether ``data`` is ``cfg`` exactly as some version filed it: its canonical JSON, or
    that JSON without the ``LEGACY`` keys ``data`` lacks (an older writer's)."""
    if msgspec.json.encode(cfg) == data:
        return True
    raw = msgspec.json.decode(data)
    if not isinstance(raw, dict):
        return False
    full = msgspec.to_builtins(cfg)
    absent = set(full) - set(legacy_form(full))  # what an older writer left out
    if not all(k in absent for k in full if k not in raw):
        return False
    old = {k: v for k, v in full.items() if k in raw}
    # a writer may have predated the keys added to some tables and not to others
    return any(data == msgspec.json.encode(_tables_as_filed(old, names))
               for n in range(len(LEGACY_TABLES) + 1)
               for names in itertools.combinations(LEGACY_TABLES, n))


def with_overrides(base: RankingConfig, overrides: Mapping[str, Any]) -> RankingConfig:
    """``base`` with some keys replaced; a tier table may set only some of its keys
    (``[short] half_life_days = 90`` keeps the short floor). Raises ``msgspec.ValidationError``
    naming the key for unknown keys and bad values."""
    merged = msgspec.to_builtins(base)
    for k, v in overrides.items():
        if isinstance(v, dict) and isinstance(merged.get(k), dict):
            merged[k] = {**merged[k], **v}
        else:
            merged[k] = v
    return msgspec.convert(merged, RankingConfig)


def config_from_toml(text: str, source: str = "<config>") -> RankingConfig:
    """Parse a TOML document over the defaults; any error names the source and the key."""
    try:
        raw: dict[str, Any] = msgspec.toml.decode(text)  # a TOML document is always a table
        return with_overrides(DEFAULT, raw)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise ConfigError(f"{source}: invalid ranking config: {exc}") from exc


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)  # a TOML basic string (JSON's escapes are TOML's)
    raise TypeError(f"no TOML for {v!r}")


def to_toml(cfg: RankingConfig) -> str:
    """``cfg`` as a TOML document ``config_from_toml`` reads back to ``cfg`` (every key)."""
    raw = msgspec.to_builtins(cfg)
    top = [f"{k} = {_toml_value(v)}\n" for k, v in raw.items() if not isinstance(v, dict)]
    tables = [f"\n[{k}]\n" + "".join(f"{kk} = {_toml_value(vv)}\n" for kk, vv in v.items())
              for k, v in raw.items() if isinstance(v, dict)]
    return "".join(top) + "".join(tables)


def load_config(path: str | Path | None) -> RankingConfig:
    """The config from a TOML file, or the defaults when ``path`` is None."""
    if path is None:
        return DEFAULT
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read ranking config: {exc}") from exc
    return config_from_toml(text, str(p))
