"""Long notes as passages (issue 35, ``projections.ranking.passages``): the split, the
passages' relevance, and a 4,581-token runbook whose answer sits in the middle served at
budget 500, through the query path, with exact packing, determinism, the note's id and date,
and configs filed before the key (off)."""

from __future__ import annotations

import itertools
import math
import random
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hivemind_memory.api_stub.protocol.messages import QueryRequest
from hivemind_memory.events.schema import token_estimate
from hivemind_memory.projections.ranking.config import (
    DEFAULT,
    RankingConfig,
    config_from_json,
    with_overrides,
)
from hivemind_memory.projections.ranking.embedders import embedder_for
from hivemind_memory.projections.ranking.index import build_index
from hivemind_memory.projections.ranking.packing import Item, pack
from hivemind_memory.projections.ranking.passages import (
    _split_ascii,
    _split_words,
    own_bm25,
    passage_relevance,
    split,
)
from hivemind_memory.projections.state import NoteState
from hivemind_memory.worker.engine import run_rank, to_result

NOW = datetime(2026, 6, 1, tzinfo=UTC)
EMBEDDER = embedder_for("wordllama")
ON = with_overrides(DEFAULT, {"passage_tokens": 128})
"""Passages on, of 128 tokens (the default is 48: ``RankingConfig.passage_tokens``)."""
FILLER = ["cluster", "node", "restart", "service", "check", "logs", "verify", "config",
          "replica", "backup", "deploy", "rollback", "metrics", "alert", "disk", "memory",
          "cpu", "network", "latency", "queue", "worker", "shard", "index", "cache"]
ANSWER = ("To rotate the TLS certificate of the payments gateway, run certbot renew "
          "--cert-name payments and reload haproxy.")
QUESTION = "how do I rotate the payments TLS certificate?"


def runbook(tokens: int = 4581, seed: int = 7) -> str:
    """A runbook of exactly ``tokens`` estimated tokens with ``ANSWER`` in its middle."""
    rnd = random.Random(seed)
    paras = [f"Step {i}: " + " ".join(rnd.choice(FILLER) for _ in range(55)) + "."
             for i in range(80)]
    head = "\n\n".join(paras[:40]) + "\n\n" + ANSWER + "\n\n"
    tail = "\n\n".join(paras[40:])
    text = (head + tail)[:tokens * 4 - 1] + "."  # trimmed to the exact size
    assert token_estimate(text) == tokens
    return text


def note(nid: str, text: str, days: float, tokens: int | None = None) -> NoteState:
    return NoteState(note_id=nid, agent="ann", scope="shared", kind="note", text=text,
                     tokens=token_estimate(text) if tokens is None else tokens,
                     created_at=NOW - timedelta(days=days))


def ranked(notes: list[NoteState], text: str, budget: int, cfg: RankingConfig = ON,
           **kw: Any) -> Any:
    idx = build_index("t", {n.note_id: n for n in notes}, EMBEDDER)
    req = QueryRequest(ns="t", text=text, budget=budget, explain=True, **kw)
    return run_rank(idx, req, cfg, NOW, embedder=EMBEDDER), req


def test_split_covers_the_text_in_equal_parts_at_whitespace() -> None:
    text = runbook()
    parts = split(text, 4581, 128)
    assert len(parts) == math.ceil(4581 / 128) == 36
    assert next(a for a, _, _ in parts) == 0 and parts[-1][1] == len(text)
    assert all(z == a2 for (_, z, _), (a2, _, _) in itertools.pairwise(parts))
    for a, z, t in parts:
        assert a == 0 or text[a - 1].isspace()  # no word is cut
        assert t >= token_estimate(text[a:z])  # a rendered context still fits
        assert 100 <= t <= 140  # about equal parts of about the size
    assert split("short note", 3, 128) == [(0, 10, 3)]


def test_a_passage_keeps_the_notes_own_token_count_in_proportion() -> None:
    """A note whose caller gave 1,000 tokens for 400 bytes: the passages share the 1,000."""
    text = " ".join(["word"] * 80)  # 399 bytes
    parts = split(text, 1000, 250)
    assert len(parts) == 4
    assert sum(t for _, _, t in parts) >= 1000
    assert all(240 <= t <= 260 for _, _, t in parts)


_ASCII_WORDS = st.lists(
    st.tuples(st.text(st.sampled_from("ab.Z9-"), min_size=1, max_size=12),
              st.text(st.sampled_from(" \t\n\r\x0b\x0c\x1c\x1f"), min_size=1, max_size=3)),
    max_size=60)


@settings(max_examples=400, deadline=None)
@given(lead=st.text(st.sampled_from(" \n\x1d"), max_size=3), words=_ASCII_WORDS,
       tokens=st.integers(1, 600), size=st.integers(1, 90))
def test_the_ascii_split_cuts_where_walking_every_word_cuts(
        lead: str, words: list[tuple[str, str]], tokens: int, size: int) -> None:
    """``split`` takes a search per passage on an ASCII text instead of walking every word
    (most of a dense query's CPU with passages on): the same cuts and token shares as the
    word walk, whitespace of every kind (ASCII's separators \x1c-\x1f are whitespace to
    both) and a leading run included."""
    text = lead + "".join(w + gap for w, gap in words)
    n = math.ceil(tokens / size)
    if n <= 1 or not text:
        return
    assert _split_ascii(text, tokens, n) == _split_words(text, tokens, n)


def test_a_passages_own_bm25_is_on_the_notes_scale() -> None:
    """``own_bm25`` of a note's whole text is the value ``Columns.bm25`` gives the note (the
    corpus's IDFs and length normalisation), so a passage is scored as a note of its own
    length: the passage holding the query's words above those without, a rare word above a
    common one."""
    notes = [note("a", "rotate the payments certificate before it expires", 1),
             note("b", "the certificate of the web server", 1),
             note("c", "queue worker restarts and disk alerts", 1),
             note("d", "payments are settled nightly, certificate checks weekly", 1)]
    idx = build_index("t", {n.note_id: n for n in notes}, EMBEDDER)
    cols = idx.cols
    slots, lex = cols.bm25(QUESTION, ON, "")
    weights = cols.bm25_weights(QUESTION, ON, "")
    own = own_bm25([n.text for n in notes], weights, "english")
    got = dict(zip(slots.tolist(), lex.tolist(), strict=True))
    for i, n in enumerate(notes):
        assert own[i] == pytest.approx(got.get(cols.slot[n.note_id], 0.0), rel=1e-12)
    assert own[0] > own[3] > own[1] > 0.0 == own[2]
    parts = own_bm25(["disk alerts and logs", "rotate the payments certificate",
                      "certificate"], weights, "english").tolist()
    assert parts[1] > parts[2] > 0.0 == parts[0]


def test_a_notes_probability_is_shared_among_its_passages_by_their_own_match() -> None:
    """The passages of a note are together exactly as likely as the note, each in
    proportion to its own BM25: the best match carries most, one without a query word is
    out; a note matched by meaning alone (no passage has a word) gives each an equal share."""
    got = passage_relevance(0.6, np.array([0.5, 0.0, 1.0, 0.5])).tolist()
    assert got == pytest.approx([0.15, 0.0, 0.3, 0.15], rel=1e-12)
    assert sum(got) == pytest.approx(0.6, rel=1e-12)
    assert passage_relevance(0.3, np.zeros(3)).tolist() == pytest.approx([0.1] * 3)


def test_the_runbook_is_served_at_budget_500_by_the_passage_with_the_answer() -> None:
    text = runbook()
    notes = [note("runbook", text, 3), note("coffee", "The coffee machine is descaled on "
                                                       "Mondays.", 1)]
    res, _req = ranked(notes, QUESTION, 500)
    assert [n.note_id for n in res.notes] == ["runbook"]
    got = res.notes[0]
    assert got.passage is not None and ANSWER in got.text
    assert got.text == text[got.passage.start:got.passage.end]
    assert got.passage.count == 36 and 0 < got.passage.index < 35  # the middle
    assert got.created_at == NOW - timedelta(days=3)  # the note's date
    assert got.tokens <= 140 and res.used <= 500 and res.method == "exact"
    # rendered: the header names the note, its date and the place, and counts in the cost
    res2, req2 = ranked(notes, QUESTION, 500, context=True)
    out = to_result("q", req2, NOW, res2)
    assert out.context is not None
    assert out.context.startswith(
        f"[runbook | 2026-05-29 | passage {got.passage.index + 1}/36]\n")
    assert math.ceil(len(out.context.encode()) / 4) <= res2.used <= 500
    # without passages the runbook does not fit, and nothing is served
    off, _ = ranked(notes, QUESTION, 500, with_overrides(DEFAULT, {"passage_tokens": 0}))
    assert off.notes == [] and off.used == 0


def test_passages_pack_exactly_and_the_answer_is_the_same_bytes() -> None:
    """Several passages of one note and short notes compete in one exact knapsack: the
    packed set is the one a brute-force packer over the same items chooses, and two runs
    give the same bytes."""
    text = (runbook(1200, seed=3).replace("Step 2:", "Step 2: rotate payments keys")
            .replace("Step 9:", "Step 9: certificate expiry"))
    notes = [note("runbook", text, 3), note("p1", "payments certificate expiry dates", 2),
             note("p2", "rotate keys every month for payments", 5)]
    res, req = ranked(notes, QUESTION + " expiry keys", 200)
    again, _ = ranked(notes, QUESTION + " expiry keys", 200)
    assert msgspec.json.encode(to_result("q", req, NOW, res)) == msgspec.json.encode(
        to_result("q", req, NOW, again))
    cands = res.candidates
    assert sum(c.passage is not None for c in cands) == 2  # the passages without a word: none
    items = [Item(f"{c.note_id}#{c.passage.index if c.passage else -1}", c.cost, c.score)
             for c in cands]
    best = pack(items, 200, 10**9)
    chosen = {f"{c.note_id}#{c.passage.index if c.passage else -1}" for c in cands
              if c.chosen}
    assert abs(sum(c.score for c in cands if c.chosen) - best.total_value) < 1e-4
    assert sum(c.cost for c in cands if c.chosen) == res.used <= 200
    assert len(chosen) == len(res.notes) == 3  # one passage did not fit beside the others
    assert sum(c.passage is not None for c in cands if c.chosen) == 1


def test_a_config_filed_before_the_key_reads_passages_as_off_and_the_default_is_on() -> None:
    old = msgspec.json.encode({k: v for k, v in msgspec.to_builtins(DEFAULT).items()
                               if k != "passage_tokens"})
    assert config_from_json(old).passage_tokens == 0
    assert DEFAULT.passage_tokens == 48 and ON.passage_tokens == 128
    bm25 = with_overrides(DEFAULT, {"relevance": "bm25"})
    assert bm25.digest() == with_overrides(bm25, {"passage_tokens": 0}).digest()


@pytest.mark.parametrize("bad", [-1, 1, 15])
def test_a_bad_passage_size_is_refused_by_name(bad: int) -> None:
    with pytest.raises(msgspec.ValidationError, match="passage_tokens"):
        with_overrides(DEFAULT, {"passage_tokens": bad})


def test_through_the_query_path_a_notes_passages_are_together_as_likely_as_the_note() -> None:
    """A 1,200-token note with the query's words in two of its passages: through
    ``run_rank`` its passages' relevance sums to the note's whole relevance (passages off),
    the passage with more of the match carries more, and a short note keeps its own."""
    text = (runbook(1200, seed=3).replace("Step 2:", "Step 2: rotate payments certificate")
            .replace("Step 9:", "Step 9: certificate"))
    notes = [note("runbook", text, 3), note("p1", "payments certificate expiry dates", 2)]
    on, _ = ranked(notes, QUESTION, 1000)
    off, _ = ranked(notes, QUESTION, 1000, with_overrides(DEFAULT, {"passage_tokens": 0}))
    whole = {c.note_id: c.relevance for c in off.candidates}
    parts = [c for c in on.candidates if c.note_id == "runbook"]
    assert len(parts) == 2 and all(c.passage is not None for c in parts)
    assert sum(c.relevance for c in parts) == pytest.approx(whole["runbook"], rel=1e-4)
    first = min(parts, key=lambda c: c.passage.index if c.passage else 0)
    assert first.relevance > max(c.relevance for c in parts if c is not first)
    assert next(c.relevance for c in on.candidates if c.note_id == "p1") == whole["p1"]


def test_a_batch_memo_cuts_each_long_note_once_and_answers_as_without_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Queries of one batch share one memo of the long candidates' passages (cut and
    counted once per note): every answer equals the one ranked without a memo, passages
    packed alone included, and each long note is cut once for the whole batch."""
    from hivemind_memory.projections.ranking import ranker
    from hivemind_memory.projections.ranking.ranker import BatchMemo

    notes = [note("rb", runbook(), 30), note("rb2", runbook(900, seed=3), 5),
             note("s", "rotate the payments certificate before it expires", 2),
             note("t", "haproxy reload drops no connection", 9)]
    idx = build_index("t", {n.note_id: n for n in notes}, EMBEDDER)
    memo = BatchMemo()
    cut: list[int] = []

    def counted(text: str, tokens: int, size: int) -> list[tuple[int, int, int]]:
        cut.append(tokens)
        return split(text, tokens, size)

    monkeypatch.setattr(ranker, "split", counted)
    packed_passages = 0
    for q in [QUESTION, "haproxy reload", "certbot renew payments", "restart the shard",
              "rollback a deploy"]:
        req = QueryRequest(ns="t", text=q, budget=300, explain=True)
        got = run_rank(idx, req, ON, NOW, memo, embedder=EMBEDDER)
        assert got == run_rank(idx, req, ON, NOW, embedder=EMBEDDER)
        packed_passages += sum(n.passage is not None for n in got.notes)
    assert packed_passages >= 3
    with_memo = sum(size > 0 for _, size, _ in memo.kept.keys(idx.cols))
    assert with_memo == 2  # the two long notes, each cut once for the batch
    assert len(cut) - with_memo == 5 * 2  # the memo-less rankings cut them for every query


def test_by_default_a_turn_over_48_tokens_is_served_by_the_part_that_matches() -> None:
    """The default passage size (48 tokens, about the turns the calibration knows): a
    120-token note whose question-words sit in its first third is served at budget 60 by that
    third (the whole note does not fit), and beats a 45-token note that holds fewer of the
    query's words; a note of at most 48 tokens stays whole, and with 128-token passages the
    long note is whole and does not fit at all."""
    first = "Our payments gateway TLS certificate was rotated with certbot last night."
    filler = " ".join(["the", "team", "met", "for", "lunch", "and", "talked", "about",
                       "weekend", "plans"] * 6)
    text = first + " " + filler
    long_note = note("long", text, 2)
    assert 96 < long_note.tokens <= 144  # three passages of the default size
    weak = note("weak", "certificate " + " ".join(["lunch"] * 28), 2)
    short = note("short", "payments rotated", 2)
    assert 40 <= weak.tokens <= 48 and short.tokens <= 48
    res, _ = ranked([long_note, weak, short], QUESTION, 60, DEFAULT)
    got = {n.note_id: n for n in res.notes}
    assert "long" in got and got["long"].passage is not None
    assert got["long"].passage.index == 0 and got["long"].passage.count == 3
    assert got["long"].text.startswith(first) and got["long"].tokens <= 60
    assert "weak" not in got
    assert all(c.passage is None for c in res.candidates if c.note_id != "long")
    whole, _ = ranked([long_note, weak, short], QUESTION, 60, ON)
    assert "long" not in {n.note_id for n in whole.notes}


def test_kept_texts_serve_batch_after_batch_the_same_answers_within_their_bound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker's ``KeptTexts`` outlives its batches: a later batch over the same table cuts
    no long note again and reads no word set again, and every answer is the one ranked
    without it. Past its bound the entries kept longest go first (held never above the
    bound), and a table the worker drops takes its entries with it."""
    import gc

    from hivemind_memory.projections.ranking import ranker
    from hivemind_memory.projections.ranking.ranker import BatchMemo, KeptTexts, entry_bytes

    copy = runbook(900, seed=3)
    notes = [note("rb", runbook(), 30), note("rb2", copy, 5), note("rb3", copy + " again", 40),
             note("s", "rotate the payments certificate before it expires", 2),
             note("s2", "rotate the payments certificate before it expires!", 60),
             note("t", "haproxy reload drops no connection", 9)]
    idx = build_index("t", {n.note_id: n for n in notes}, EMBEDDER)
    cut: list[int] = []

    def counted(text: str, tokens: int, size: int) -> list[tuple[int, int, int]]:
        cut.append(tokens)
        return split(text, tokens, size)

    monkeypatch.setattr(ranker, "split", counted)
    kept = KeptTexts()
    merged: set[str] = set()
    queries = [QUESTION, "haproxy reload", "certbot renew payments", "rollback a deploy"]
    for batch in range(2):
        memo = BatchMemo(kept)
        for q in queries:
            req = QueryRequest(ns="t", text=q, budget=300, explain=True)
            got = run_rank(idx, req, ON, NOW, memo, embedder=EMBEDDER)
            assert got == run_rank(idx, req, ON, NOW, embedder=EMBEDDER)
            merged.update(i for n in got.candidates for i in n.stands_for)
        if batch == 0:
            first, held = len(cut), kept.keys(idx.cols)
    assert merged == {"rb3", "s2"}  # word sets were compared: one word more or less
    assert kept.keys(idx.cols) == held  # the second batch derived nothing again
    assert {size for _, size, _ in held} == {0, 128} and kept.held > 0
    cut_kept = sum(size > 0 for _, size, _ in held)
    assert cut_kept >= 2
    assert len(cut) - first == first - cut_kept  # only the rankings without it cut again
    small = KeptTexts(limit=kept.entries_held - 1)  # a byte short of holding it all
    memo = BatchMemo(small)
    for q in queries:
        run_rank(idx, QueryRequest(ns="t", text=q, budget=300), ON, NOW, memo,
                 embedder=EMBEDDER)
        assert small.entries_held <= small.limit
    assert 0 < len(small.keys(idx.cols)) < len(held)
    assert set(small.keys(idx.cols)) < set(held)
    cols = idx.cols
    s, s2, t = (cols.slot[i] for i in ("s", "s2", "t"))
    size = {k: entry_bytes(kept.words(cols, k)) for k in (s, s2, t)}
    assert size[t] <= size[s]  # so the newest fits where the oldest was
    tiny = KeptTexts(limit=size[s] + size[s2])
    assert [tiny.spelled(cols, tiny.words(cols, k)) for k in (s, s2, t)] == [
        kept.spelled(cols, kept.words(cols, k)) for k in (s, s2, t)]
    assert tiny.keys(cols) == [(s2, 0, ""), (t, 0, "")]  # the oldest went for the newest
    assert tiny.entries_held == size[s2] + size[t] <= tiny.limit
    assert tiny.held == tiny.entries_held  # the words' ids are the index's: no vocabulary
    assert kept.held > 0
    del memo, cols  # a batch's memo holds its tables until the batch ends
    idx.cols = type(idx.cols)()  # the table replaced: the old one's entries go with it
    gc.collect()
    assert not list(kept._tables.keys())
    assert kept.held == 0  # and its bytes: held counts live tables only


def test_a_dropped_kept_texts_frees_its_entries_while_the_table_lives() -> None:
    """A ``KeptTexts`` dropped before the table it kept entries of (a batch's own: each
    ``BatchMemo()`` without a worker's, as ``bench scale-cpu`` makes one a query) takes its
    entries with it: the finalizer on the table's columns holds only their byte counts. A
    worker's ``KeptTexts`` still learns the bytes of a table that goes."""
    import gc
    import weakref

    from hivemind_memory.projections.ranking.ranker import KeptTexts

    notes = [note("a", "rotate the payments certificate before it expires", 2),
             note("b", "haproxy reload drops no connection", 3)]
    idx = build_index("t", {n.note_id: n for n in notes}, EMBEDDER)
    cols = idx.cols
    kept = KeptTexts()
    words = kept.words(cols, cols.slot["a"])
    entry = weakref.ref(words)
    del words, kept
    gc.collect()
    assert entry() is None  # gone with its KeptTexts, though the table lives
    worker = KeptTexts()
    worker.words(cols, cols.slot["b"])
    assert worker.held == worker.entries_held > 0
    del cols
    idx.cols = type(idx.cols)()
    gc.collect()
    assert worker.held == 0


def test_kept_texts_count_at_least_the_bytes_their_entries_hold() -> None:
    """``KeptTexts.held`` (what a worker's budget counts of it) is never below what its
    entries hold walked together (each object once; the words' ids are the index's, so the
    table keeps no vocabulary), over
    texts of shared words, of words of their own, and long ones cut into passages; an entry
    larger than the whole bound is not kept."""
    from hivemind_memory.projections.ranking.footprint import index_bytes
    from hivemind_memory.projections.ranking.ranker import BatchMemo, KeptTexts, entry_bytes

    common = ["deploy", "rollback", "certificate", "payments", "redis", "stream", "worker"]
    shared = [" ".join(common[(i + j) % 7] for j in range(5 + i % 20)) for i in range(40)]
    own = [" ".join(f"{common[j % 7]} host{i}x{j}" for j in range(5 + i)) for i in range(40)]
    notes = [note(f"c{i}", t, i + 1, tokens=len(t) // 4) for i, t in enumerate(shared)]
    notes += [note(f"o{i}", t, i + 1, tokens=len(t) // 4) for i, t in enumerate(own)]
    notes += [note("rb", runbook(), 3, tokens=len(runbook()) // 4)]
    idx = build_index("t", {n.note_id: n for n in notes}, EMBEDDER)
    kept = KeptTexts()
    memo = BatchMemo(kept)
    for q in ("deploy rollback", "payments certificate worker", "redis stream", QUESTION):
        run_rank(idx, QueryRequest(ns="t", text=q, budget=400), ON, NOW, memo,
                 embedder=EMBEDDER)
    keys = kept.keys(idx.cols)
    assert {size > 0 for _, size, _ in keys} == {True, False}  # word sets and passages
    table = kept._tables[idx.cols]
    entries = [e for e, _ in table.entries.values()]
    lists = sys.getsizeof(entries)  # the test's own list of them, not held by the worker
    assert not table.vocab  # every word's id is one of the index's own term tables
    walked = index_bytes(entries) - lists
    assert walked <= kept.entries_held
    assert walked <= kept.held <= 2 * walked
    cols = idx.cols
    big = KeptTexts(limit=entry_bytes(kept.words(cols, cols.slot["rb"])) - 1)
    assert big.spelled(cols, big.words(cols, cols.slot["rb"])) == \
        kept.spelled(cols, kept.words(cols, cols.slot["rb"]))
    assert big.entries_held == 0 and big.keys(cols) == []


def test_a_passages_whole_note_is_decoded_for_it_but_not_kept_in_the_index() -> None:
    """The index keeps the texts it served whole (``TextColumn.many``), not the whole text of
    a long note it served a passage of (a 100-note namespace grew past its 256 KiB once
    queried when every passage kept its note's text)."""
    text = runbook()
    notes = [note("runbook", text, 3),
             note("certs", "The payments certificate list lives in the vault.", 1)]
    idx = build_index("t", {n.note_id: n for n in notes}, EMBEDDER)
    req = QueryRequest(ns="t", text=QUESTION + " vault certificate list", budget=500)
    res = run_rank(idx, req, ON, NOW, embedder=EMBEDDER)
    served = {n.note_id: n for n in res.notes}
    assert set(served) == {"runbook", "certs"}
    assert served["runbook"].passage is not None and ANSWER in served["runbook"].text
    assert served["certs"].passage is None
    kept = idx.cols.texts.kept()
    slot = {nid: i for i, nid in enumerate(idx.cols.ids)}
    assert kept == {slot["certs"]: notes[1].text}  # the short note's text, not the runbook's
    again = run_rank(idx, req, ON, NOW, embedder=EMBEDDER)
    assert again == res  # the same answer when the passage's note is decoded again


WORDS = ["alpha", "beta", "gamma", "delta", "eps", "zeta"]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.sampled_from([*WORDS, "the", "and"]), max_size=12), min_size=1,
                max_size=14),
       st.lists(st.sampled_from([*WORDS, "absent"]), max_size=5, unique=True),
       st.lists(st.one_of(st.just(0.0), st.floats(1e-6, 9.0)), min_size=5, max_size=5),
       st.floats(0.01, 3.0), st.floats(0.0, 0.2), st.floats(0.0, 1.0),
       st.sampled_from(["english", "plain"]))
def test_passage_relevance_read_by_word_is_the_bits_of_the_bags_read_by_passage(
        passages: list[list[str]], words: list[str], idf: list[float], base: float,
        slope: float, note: float, analyzer: str) -> None:
    """``relevance_of`` over ``counted`` (each query word's runs found once, the shares
    added by hand below ``SUMMED_IN_ORDER`` passages) gives the bits of ``passage_relevance``
    over ``bags_bm25`` of ``bag_of`` (a dictionary read per passage and word, numpy's sum), on
    notes of 1-14 passages (across numpy's in-order block), passages without a query word or
    with only stop words, queries with no word, a zero IDF and words no passage holds. An
    IDF is 0 or at least ~0.5 / the notes' count (Lucene's): one of ~1e-310 beside 9 made
    the passages' total subnormal and ``passage_relevance``'s ``note / total`` infinite
    (0 x inf), which no corpus gives."""
    from hivemind_memory.projections.ranking.analyzer import analyze
    from hivemind_memory.projections.ranking.columns import QueryWeights
    from hivemind_memory.projections.ranking.passages import (
        bag_of,
        bags_bm25,
        counted,
        places,
        relevance_of,
    )

    texts = [" ".join(p) for p in passages]
    w = tuple(analyze(list(words), analyzer))
    weights = QueryWeights(w, tuple(idf[:len(w)]), base, slope, float(sum(idf[:len(w)])))
    want = passage_relevance(note, bags_bm25([bag_of(t, analyzer) for t in texts], weights))
    text = " ".join(texts)  # the passages' places in it, each passage's words its own
    parts, at = [], 0
    for t in texts:
        parts.append((at, at + len(t), 1 + len(t) // 4))
        at += len(t) + 1
    vocab: dict[str, int] = {}
    by_word = counted(text, parts, analyzer,
                      lambda ws: [vocab.setdefault(x, len(vocab)) for x in ws])
    assert places(by_word) == parts
    got = relevance_of(note, by_word, weights, [vocab.get(x) for x in weights.words])
    assert np.array(got, np.float64).tobytes() == want.tobytes()


def _counted_passages(texts: list[str], analyzer: str,
                      vocab: dict[str, int]) -> tuple[Any, list[tuple[int, int, int]]]:
    """``counted`` of passages ``texts`` joined by a space, ids given by ``vocab``."""
    from hivemind_memory.projections.ranking.passages import counted

    parts, at = [], 0
    for t in texts:
        parts.append((at, at + len(t), 1 + len(t) // 4))
        at += len(t) + 1
    return counted(" ".join(texts), parts, analyzer,
                   lambda ws: [vocab.setdefault(x, len(vocab)) for x in ws]), parts


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.lists(st.lists(st.sampled_from([*WORDS, "the", "and"]), max_size=9),
                                   min_size=2, max_size=12),
                          st.floats(0.0, 1.0)), min_size=1, max_size=6),
       st.lists(st.sampled_from([*WORDS, "absent"]), max_size=5, unique=True),
       st.lists(st.one_of(st.just(0.0), st.floats(1e-6, 9.0)), min_size=5, max_size=5),
       st.floats(0.01, 3.0), st.floats(0.0, 0.2), st.sampled_from(["english", "plain"]))
def test_passages_of_many_notes_read_at_once_are_the_bits_of_each_read_alone(
        notes: list[tuple[list[list[str]], float]], words: list[str], idf: list[float],
        base: float, slope: float, analyzer: str) -> None:
    """``relevances`` reads the query's words once over every long candidate of a query (one
    array of all their runs): each note's passages get the bits ``passage_relevance`` over
    ``bags_bm25`` gives that note alone, whatever the other notes hold (2-12 passages each,
    across numpy's in-order block, words some notes lack, ids given in any order)."""
    from hivemind_memory.projections.ranking.analyzer import analyze
    from hivemind_memory.projections.ranking.columns import QueryWeights
    from hivemind_memory.projections.ranking.passages import (
        bag_of,
        bags_bm25,
        relevances,
    )

    w = tuple(analyze(list(words), analyzer))
    weights = QueryWeights(w, tuple(idf[:len(w)]), base, slope, float(sum(idf[:len(w)])))
    vocab: dict[str, int] = {"zzz-unused": 0}
    cut = [_counted_passages([" ".join(p) for p in ps], analyzer, vocab)[0] for ps, _ in notes]
    got = relevances([r for _, r in notes], cut, weights, [vocab.get(x) for x in w])
    for (ps, r), mine in zip(notes, got, strict=True):
        want = passage_relevance(r, bags_bm25([bag_of(" ".join(p), analyzer) for p in ps],
                                              weights))
        assert np.array(mine, np.float64).tobytes() == want.tobytes()


def test_kept_passages_and_word_sets_hold_less_than_the_index_they_serve() -> None:
    """What a worker keeps of a namespace's notes for the rules (word sets, passages by word)
    is smaller than the namespace's index itself, so that two workers that split the
    namespaces also split it: 120 notes of 10-300 words from a Zipf vocabulary (``bench
    shards``' corpus), every one a candidate cut into 48-token passages; kept as Python
    dicts of tuples and a vocabulary of their own, they held 3.8 x the index (now 0.4 x).
    The words' ids are the index's own (no vocabulary kept), and the answers are those
    ranked without anything kept."""
    from hivemind_memory.projections.ranking.footprint import index_bytes
    from hivemind_memory.projections.ranking.ranker import BatchMemo, KeptTexts

    rnd = random.Random(7)
    vocab = [f"w{i}" for i in range(20_000)]
    weights = [1 / (i + 1) for i in range(len(vocab))]
    notes = [note(f"n{i}", " ".join(rnd.choices(vocab, weights, k=rnd.randint(10, 300))), 30)
             for i in range(120)]
    idx = build_index("t", {n.note_id: n for n in notes}, EMBEDDER)
    kept = KeptTexts()
    memo = BatchMemo(kept)
    for j in range(6):
        req = QueryRequest(ns="t", text=f"w{j} w{7 * j + 1}", budget=300)
        assert run_rank(idx, req, DEFAULT, NOW, memo, embedder=EMBEDDER) == \
            run_rank(idx, req, DEFAULT, NOW, embedder=EMBEDDER)
    keys = kept.keys(idx.cols)
    cut = sum(size > 0 for _, size, _ in keys)
    assert cut >= 100  # the long notes' passages were kept
    table = kept._tables[idx.cols]
    assert not table.vocab
    assert kept.held < index_bytes(idx)


def test_a_word_no_term_table_holds_gets_an_id_of_its_own() -> None:
    """A word set or passage holding a word the index's term tables do not (only a note that
    is no candidate can) gives it a negative id of the table's own, the same every time, and
    spelled back; a query word the notes lack has no id."""
    from hivemind_memory.projections.ranking.ranker import KeptTexts, query_ids, word_ids

    idx = build_index("t", {"a": note("a", "rotate the payments certificate", 2)}, EMBEDDER)
    cols = idx.cols
    kept = KeptTexts()
    vocab = kept.table(cols).vocab
    got = word_ids(cols, "plain", ["rotate", "zebra", "payments", "zebra", "yak"], vocab)
    assert got[0] == cols.terms.get("rotate") and got[2] == cols.terms.get("payments")
    assert got[1] == got[3] == -1 and got[4] == -2
    assert word_ids(cols, "english", ["zebra"], vocab) == [-3]  # a stem is another word
    assert kept.spelled(cols, np.array(sorted(got), np.int32)) == {
        "rotate", "zebra", "payments", "yak"}
    assert query_ids(cols, "plain", ("rotate", "zebra", "moose"), vocab) == [
        cols.terms.get("rotate"), -1, None]
