"""The ranking pipeline over a ``NamespaceIndex``'s columns: the rule of the per-note
reference ``tests.support.reference.rank``, vectorised. Pure: ``now`` and the config are arguments.

Tier, age, recency and score are computed with numpy over the candidates' slots, with the
same IEEE operations in the same order as ``rank`` (``age_days``, ``recency``), except the
power ``0.5 ** (age / half_life)``: numpy's vectorised ``power`` may differ from the C
library's ``pow`` in the last bit (it does on AVX-512 machines), so it goes through
``math.pow`` one candidate at a time. Packing runs on arrays (``pack_positions``); only the
packed notes (and, with ``explain``, every candidate) become result structs. A differential
test checks that the result equals ``rank`` over the same notes and relevance.
"""

from __future__ import annotations

import math
import sys
import weakref
from collections import OrderedDict
from datetime import datetime
from itertools import repeat, starmap
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from hivemind_memory.projections.ranking.bm25_rules import tokenize
from hivemind_memory.projections.ranking.columns import (
    BoolArray,
    Columns,
    FloatArray,
    IntArray,
    TermCache,
    micros,
)
from hivemind_memory.projections.ranking.config import RankingConfig, TierDecay
from hivemind_memory.projections.ranking.embedders import Embedder
from hivemind_memory.projections.ranking.filters import Condition, matches
from hivemind_memory.projections.ranking.index import NamespaceIndex
from hivemind_memory.projections.ranking.ordering import by_score, order
from hivemind_memory.projections.ranking.packing import pack_positions
from hivemind_memory.projections.ranking.passages import (
    Counted,
    counted,
    places,
    relevances,
    split,
)
from hivemind_memory.projections.ranking.rank_result import (
    DECIMALS,
    PRINTS_AS_ZERO,
    NoteSignals,
    Passage,
    RankResult,
    ScoredNote,
)
from hivemind_memory.projections.ranking.recency import SECONDS_PER_DAY
from hivemind_memory.projections.ranking.render import header_tokens, place_label
from hivemind_memory.projections.ranking.updates import QueryWords, adjust
from hivemind_memory.projections.ranking.vectors import QueryVector, query_vector
from hivemind_memory.projections.ranking.why import Why, left_out, rounded
from hivemind_memory.projections.state import Tier

_TIERS: tuple[Tier, Tier, Tier] = ("short", "scratch", "longterm")


KEPT_BYTES = 96 << 20
"""``KeptTexts``' entries hold at most this many bytes (``entry_bytes``): past it, entries go
table by table, each table's oldest first. A dense batch over a 10k-note namespace of ``bench
query``'s generator asks for ~250k passage words (its ~3k long notes) and the words of ~4k
candidates: a bound of 48 MiB, as ``entry_bytes`` counted the word sets before they were
ids and the passages when they were dictionaries of tuples (~16 KB a 150-word note, now ~2
KB), dropped entries that were derived again batch after batch (+20 % of ``bench
profile``'s CPU a query; docs/benchmarks.md). A worker bounds it lower under a small memory
budget and counts ``held`` in the budget (``worker.memory.kept_bytes``)."""
VOCAB_ENTRY_BYTES = 64
"""What ``KeptTexts.held`` counts for a word's place in a table's vocabulary besides the word
itself (a dict entry, its share of the dict's free slots, the id): CPython's dicts take
~24-50 bytes an entry, the id 28 past 256."""


ARRAY_HEADER_BYTES = 112
"""``sys.getsizeof`` of a numpy array beyond its data (the header of one that owns it)."""
Words = npt.NDArray[np.int32]
"""A note's distinct words as ids (``KeptTexts.words``), ascending."""
Entry = Words | Counted
"""A kept entry: a note's word set (``Words``) or its passages (``Parts``), one array each."""


def entry_bytes(got: Entry) -> int:
    """The bytes an entry of ``KeptTexts`` holds, as ``footprint.index_bytes`` counts them:
    an array's data and header (every entry is one array owning its data)."""
    return int(got.nbytes) + ARRAY_HEADER_BYTES


class _Table:
    """``KeptTexts``' entries of one table, oldest first (an ``OrderedDict``: dropping the
    oldest is O(1), where popping a plain dict's first key again and again rescans the
    slots emptied before), the bytes they hold, and the ids of the words its entries hold
    that the index's term tables do not (``vocab``: none, unless a note not in the postings is
    asked for)."""

    __slots__ = ("entries", "sizes", "vocab")

    def __init__(self) -> None:
        self.entries: OrderedDict[tuple[int, int, str], tuple[Entry, int]] = OrderedDict()
        """key -> (entry, its ``entry_bytes``)."""
        self.sizes = [0, 0]
        """The entries' bytes and the vocabulary's: all the finalizer of the table's columns
        holds (``KeptTexts.table``), so a ``KeptTexts`` dropped before them (a batch's own)
        does not leave its entries alive as long as the columns live."""
        self.vocab: _Ids = _Ids()

    @property
    def bytes(self) -> int:
        """The entries' bytes."""
        return self.sizes[0]

    @bytes.setter
    def bytes(self, n: int) -> None:
        self.sizes[0] = n


class _Ids(dict[str, int]):
    """Word (prefixed with its analyzer and a NUL) -> id for the words a table's term tables
    do not hold: -1, -2, ... in order of first sight; ``bytes``: what the words and their
    places hold (``VOCAB_ENTRY_BYTES`` a place)."""

    bytes = 0

    def __missing__(self, word: str) -> int:
        got = self[word] = -1 - len(self)
        self.bytes += sys.getsizeof(word) + VOCAB_ENTRY_BYTES
        return got


def word_ids(cols: Columns, analyzer: str, words: list[str], vocab: _Ids) -> list[int]:
    """The id of each of ``words`` (terms of ``analyzer``): its id in ``cols``' term table
    of that analyzer (``Columns.term_table``: ids that never change, held by the index
    anyway), else one of ``vocab`` (negative; given on first sight)."""
    got = cols.term_table(analyzer).lookup(words)
    if -1 in got:
        for k, (w, t) in enumerate(zip(words, got, strict=True)):
            if t == -1:
                got[k] = vocab[f"{analyzer}\0{w}"]
    return got


def query_ids(cols: Columns, analyzer: str, words: tuple[str, ...],
              vocab: dict[str, int]) -> list[int | None]:
    """``word_ids`` of a query's ``words`` without giving any an id (None: no note of
    ``vocab``'s table has it)."""
    got: list[int | None] = []
    for w, t in zip(words, cols.term_table(analyzer).lookup(list(words)), strict=True):
        got.append(t if t >= 0 else vocab.get(f"{analyzer}\0{w}"))
    return got


def _dropped_pair(gone: list[tuple[int, int]], sizes: list[int]) -> None:
    """A kept table's columns were collected: its bytes (``_Table.sizes``) leave
    ``KeptTexts.held``."""
    gone.append((sizes[0], sizes[1]))


class KeptTexts:
    """What two rules derive from a note's text, kept from batch to batch by a worker
    (``QueryEngine``): its distinct words (the near-identical rule), as ascending ids (4 bytes
    a word: a pair's shared words are then counted for many pairs at once,
    ``updates._shared``), and its passages with their analysed words (``_parts``, the
    passages rule: one int32 array, ``passages.Counted``). A word's id is the one the
    index's own term table of its analyzer gives it (``word_ids``): nothing is kept per word,
    so what is kept is about the size of the notes' postings (a 400-note namespace of
    ``bench shards``: ~0.9 MiB against ~1.6 MiB of index), and splits with the namespaces
    when workers do. A slot's text never changes while its table lives (a
    note whose text changes gets a new slot), so an entry never goes stale; tables are held
    weakly, so an index the worker drops takes its entries and vocabulary (and their bytes
    in ``held``) with it. Not an index's memory (``footprint`` does not walk it): its
    entries are bounded on their own by ``limit`` bytes (``KEPT_BYTES``, ``entry_bytes``),
    dropped table by table (in the order the tables were first kept), each table's oldest
    first; a table's vocabulary holds only the words of notes its term tables lack (none of
    a candidate's). A worker counts ``held``, entries and vocabularies, in its memory
    budget.
    Nothing in it changes an answer: a value missing is derived again, the same."""

    def __init__(self, limit: int = KEPT_BYTES) -> None:
        self.limit = limit
        self._entries = 0
        """The entries' bytes (``entry_bytes``) in live tables."""
        self._vocab = 0
        """The vocabularies' bytes in live tables."""
        self._gone: list[tuple[int, int]] = []
        """(entries', vocabulary's) bytes of tables collected since (appended by their
        finalizers, which may run in any thread: ``_settled`` takes them off)."""
        self._tables: weakref.WeakKeyDictionary[Columns, _Table] = weakref.WeakKeyDictionary()
        """Per table: (slot, 0, "") -> its word ids; (slot, passage size, analyzer) -> its
        passages; oldest first."""

    def _settled(self) -> None:
        while self._gone:
            entries, vocab = self._gone.pop()
            self._entries -= entries
            self._vocab -= vocab

    @property
    def held(self) -> int:
        """Bytes held in live tables: their entries and vocabularies."""
        self._settled()
        return self._entries + self._vocab

    @property
    def entries_held(self) -> int:
        """Bytes of the entries of live tables (what ``limit`` bounds)."""
        self._settled()
        return self._entries

    def table(self, cols: Columns) -> _Table:
        """The entries of ``cols`` (a batch looks it up once: ``BatchMemo``)."""
        got = self._tables.get(cols)
        if got is None:
            got = self._tables[cols] = _Table()
            weakref.finalize(cols, _dropped_pair, self._gone, got.sizes)
        return got

    def _put(self, table: _Table, key: tuple[int, int, str], got: Entry) -> None:
        n = entry_bytes(got)
        if n > self.limit:
            return  # never kept: derived again when asked
        if self.entries_held + n > self.limit:
            for t in self._tables.values():
                entries = t.entries
                while entries and self._entries + n > self.limit:
                    k = entries.popitem(last=False)[1][1]
                    t.bytes -= k
                    self._entries -= k
        table.entries[key] = (got, n)
        table.bytes += n
        self._entries += n

    def keys(self, cols: Columns) -> list[tuple[int, int, str]]:
        """What is held for ``cols``, oldest first: ``(slot, 0, "")`` a word set,
        ``(slot, size, analyzer)`` passages."""
        got = self._tables.get(cols)
        return [] if got is None else list(got.entries)

    def words(self, cols: Columns, slot: int, table: _Table | None = None) -> Words:
        """The distinct words of the note in ``slot`` of ``cols`` (``tokenize``) as ascending
        ids (``spelled`` gives the words back)."""
        t = self.table(cols) if table is None else table
        got = t.entries.get((slot, 0, ""))
        if got is not None:
            return got[0]
        vocab = t.vocab
        before = vocab.bytes
        w = np.array(sorted(word_ids(cols, "plain", list(set(tokenize(cols.texts.get(slot)))),
                                     vocab)), np.int32)
        self._vocab += vocab.bytes - before
        t.sizes[1] = vocab.bytes
        self._put(t, (slot, 0, ""), w)
        return w

    def spelled(self, cols: Columns, ids: Words) -> frozenset[str]:
        """The words of ``ids`` (of ``words(cols, ...)``)."""
        vocab = self.table(cols).vocab
        back = {i: w.split("\0", 1)[1] for w, i in vocab.items()}
        return frozenset(back[i] if i < 0 else cols.terms.term(i) for i in ids.tolist())

    def passages(self, cols: Columns, slot: int, size: int, analyzer: str,
                 table: _Table | None = None) -> Parts:
        """``_parts`` of the note in ``slot`` of ``cols``, its words given ids of the
        table's vocabulary (``vocab``)."""
        t = self.table(cols) if table is None else table
        key = (slot, size, analyzer)
        got = t.entries.get(key)
        if got is not None:
            return got[0]
        vocab = t.vocab
        before = vocab.bytes
        p = _parts(cols, slot, size, analyzer, vocab)
        self._vocab += vocab.bytes - before
        t.sizes[1] = vocab.bytes
        self._put(t, key, p)
        return p


class BatchMemo:
    """What the queries of a batch share, filled as they need it: recency per slot of tables
    at one instant (the queries share ``now`` and, mostly, their candidates, so each
    ``math.pow`` runs once per note and batch instead of once per query) and each query
    word's BM25 part (``Columns.bm25``'s cache, the table's own: ``Columns.kept_terms``,
    kept from batch to batch while the table does not change); the texts and creation
    times of the notes they return are kept by the table itself (``TextColumn.many``,
    ``Columns.created``).
    Valid only while the tables do not change (a query job refreshes its indexes before
    ranking any query); entries are keyed by the table object (held, so its id is never
    reused), and recency also by ``now`` and the decay settings."""

    def __init__(self, kept: KeptTexts | None = None) -> None:
        self._by: dict[tuple[int, int, TierDecay, TierDecay, int],
                       tuple[Columns, FloatArray]] = {}
        self._tables: dict[int, tuple[Columns, TermCache]] = {}
        self._cos: dict[tuple[int, str], tuple[Columns, FloatArray]] = {}
        self._vec: dict[tuple[int, str], tuple[Columns, QueryVector]] = {}
        self.kept = KeptTexts() if kept is None else kept
        """The notes' words and passages (a worker's, kept from batch to batch; a batch's
        own when none is given)."""
        self._kept: dict[int, tuple[Columns, _Table]] = {}
        """``kept``'s entries per table, looked up once a batch (not through the weak
        dictionary at every read)."""

    def prime_vectors(self, idx: NamespaceIndex, texts: list[str],
                      embedder: Embedder) -> None:
        """Embed the query ``texts`` (one embedder call) for an index whose queries take the
        dense candidate stage (``NamespaceIndex.dense_ready``): no cosine per note."""
        cols = idx.cols
        todo = [t for t in dict.fromkeys(texts) if (id(cols), t) not in self._vec]
        if not todo:
            return
        for t, v in zip(todo, embedder.embed(todo), strict=True):
            self._vec[(id(cols), t)] = (cols, query_vector(v))

    def vector(self, idx: NamespaceIndex, text: str) -> QueryVector | None:
        """The vector primed for ``text`` on ``idx`` (None: not primed)."""
        got = self._vec.get((id(idx.cols), text))
        return None if got is None else got[1]

    def prime_cosines(self, idx: NamespaceIndex, texts: list[str],
                      embedder: Embedder) -> None:
        """Embed the query ``texts`` (one embedder call) and compute their cosines with every
        note of ``idx`` (one matrix product), replacing the cosines primed before (a wave of
        queries at a time: they take a float per note and query)."""
        cols = idx.cols
        self._cos = {k: v for k, v in self._cos.items() if k[0] != id(cols)}
        todo = list(dict.fromkeys(texts))
        if not todo or idx.derived is None:
            return
        got = idx.query_cosines(embedder.embed(todo))
        assert got is not None
        rows = got.T  # a query per row, contiguous (``DerivedVectors.cosines``)
        for j, t in enumerate(todo):
            self._cos[(id(cols), t)] = (cols, rows[j])

    def cosines(self, idx: NamespaceIndex, text: str) -> FloatArray | None:
        """The cosines primed for ``text`` on ``idx`` (None: not primed)."""
        got = self._cos.get((id(idx.cols), text))
        return None if got is None else got[1]

    def array(self, cols: Columns, now_us: int, cfg: RankingConfig) -> FloatArray:
        """The recency memo of ``cols`` at ``now_us`` under ``cfg``: NaN where not computed
        yet."""
        key = (id(cols), now_us, cfg.short, cfg.scratch, cfg.longterm_uses)
        got = self._by.get(key)
        if got is None or len(got[1]) != len(cols):
            got = self._by[key] = (cols, np.full(len(cols), np.nan))
        return got[1]

    def _table(self, cols: Columns) -> tuple[Columns, TermCache]:
        got = self._tables.get(id(cols))
        if got is None:
            got = self._tables[id(cols)] = (cols, cols.kept_terms())
        return got

    def terms(self, cols: Columns) -> TermCache:
        """The BM25 parts of the query words seen so far on ``cols``."""
        return self._table(cols)[1]

    def words(self, cols: Columns, slot: int) -> Words:
        """The words of the note in ``slot`` of ``cols`` (``tokenize``) as ids, read and split once
        (``KeptTexts``): the near-identical rule compares the same candidates' words for
        query after query (a dense batch of 300 queries at 10k notes split 7,679 texts,
        3,477 of them distinct)."""
        return self.kept.words(cols, slot, self._kept_table(cols))

    def _kept_table(self, cols: Columns) -> _Table:
        got = self._kept.get(id(cols))
        if got is None:
            got = self._kept[id(cols)] = (cols, self.kept.table(cols))
        return got[1]

    def passages(self, cols: Columns, slot: int, size: int, analyzer: str) -> Parts:
        """``_parts`` of the note in ``slot`` of ``cols``, cut and counted once
        (``KeptTexts``): a dense batch asks for the same long candidates' passages query
        after query."""
        return self.kept.passages(cols, slot, size, analyzer, self._kept_table(cols))

    def vocab(self, cols: Columns) -> _Ids:
        """The ids ``kept``'s entries of ``cols`` give the words ``cols`` does not hold."""
        return self._kept_table(cols).vocab


Parts = Counted
"""A note's passages (``passages.split``: start, end, tokens) and their analysed words
(``passages.counted``), one array; ``WHOLE`` for a note of one passage (within the passage
size, or one word)."""
WHOLE: Parts = np.zeros(1, np.int32)
"""``_parts`` of a note served whole (no passage: ``[0]``), one array for all of them."""
WHOLE.flags.writeable = False


def _parts(cols: Columns, slot: int, size: int, analyzer: str, vocab: _Ids) -> Parts:
    """The passages of the note in ``slot`` of ``cols`` and their analysed words, as
    ``word_ids`` (``vocab``: the ids of words ``cols`` does not hold)."""
    text = cols.texts.get(slot)
    t = int(cols.tokens[slot])
    parts = split(text, t, size) if t > size else []
    if len(parts) <= 1:
        return WHOLE
    return counted(text, parts, analyzer, lambda w: word_ids(cols, analyzer, w, vocab))


def _tier_age(cols: Columns, s: IntArray, now_us: int,
              cfg: RankingConfig) -> tuple[IntArray, FloatArray]:
    """Tier code (0 short, 1 scratch, 2 longterm: ``tier_of``) and age in days (``age_days``:
    ``(now - created_at).total_seconds() / SECONDS_PER_DAY``, clamped at 0) of slots ``s``."""
    tier = np.where(cols.uses[s] >= cfg.longterm_uses, 2, np.where(cols.scratch[s], 1, 0))
    age = np.maximum(((now_us - cols.created_us[s]) / 1e6) / SECONDS_PER_DAY, 0.0)
    return tier, age


def _recency(tier: IntArray, age: FloatArray, cfg: RankingConfig) -> FloatArray:
    """``recency`` of each (tier code, age): ``math.pow`` per note (see the module docstring),
    the rest in numpy."""
    rec = np.ones(len(tier), np.float64)
    for code, decay in ((0, cfg.short), (1, cfg.scratch)):
        at = (tier == code).nonzero()[0]
        if len(at):
            x = (np.maximum(age[at], 0.0) / decay.half_life_days).tolist()
            p = np.fromiter(map(math.pow, repeat(0.5), x), np.float64, len(x))
            rec[at] = decay.floor + (1.0 - decay.floor) * p
    return rec


def allowed_slots(cols: Columns, conditions: tuple[Condition, ...], now_us: int,
                  cfg: RankingConfig) -> BoolArray | None:
    """A flag per slot of ``cols``: the note matches ``conditions`` and has not expired at
    ``now_us`` (its ``expires_at``, else its creation plus ``cfg.default_ttl_days`` when
    that is above 0, is later than now). None: every slot (no condition, no expiry)."""
    ttl = cfg.default_ttl_days
    if not conditions and not cols.expires and ttl <= 0:
        return None
    n = len(cols)
    if ttl > 0:
        ttl_us = round(ttl * SECONDS_PER_DAY * 1e6)
        ok: BoolArray = cols.created_us[:n] > now_us - ttl_us
    else:
        ok = np.ones(n, np.bool_)
    for s, until in cols.expires.items():
        if s < n:
            ok[s] = until > now_us
    if conditions:
        if not matches(None, conditions):  # only notes with metadata can match
            hit = np.zeros(n, np.bool_)
            for s, meta in cols.meta.items():
                if s < n and matches(meta, conditions):
                    hit[s] = True
        else:
            hit = np.ones(n, np.bool_)
            for s, meta in cols.meta.items():
                if s < n and not matches(meta, conditions):
                    hit[s] = False
        ok &= hit
    return ok


def rank_index(idx: NamespaceIndex, slots: IntArray, relevance: FloatArray, *, agent: str,
               now: datetime, budget: int, cfg: RankingConfig,
               explain: bool = True, memo: BatchMemo | None = None,
               why_limit: int = 0, rendered: bool = False,
               id_prefix: str = "", allowed: BoolArray | None = None,
               query: str = "") -> RankResult:
    """``rank`` of the notes at ``slots`` of ``idx`` with ``relevance`` (parallel arrays, e.g.
    from ``NamespaceIndex.relevance_slots``). ``memo`` (optional) shares recency between
    the queries of a batch over unchanged indexes. ``why_limit`` > 0: the result's ``why``
    records that many of the strongest notes left out (``projections.ranking.why``).
    ``rendered``: the notes will be rendered as a context (``render``), so each note's header
    counts in its cost. ``id_prefix``: only notes whose id starts with it are candidates (the
    others are not left out: they are outside the question). ``allowed`` (a flag per slot;
    None: all): the query's filter and the expiry (``allowed_slots``), likewise. ``query``:
    the query's text, which a long note's passages are matched with
    (``projections.ranking.passages``; without it a long note's passages keep its
    relevance)."""
    cols = idx.cols
    visible = cols.visible(agent)[slots]
    if allowed is not None:
        visible &= allowed[slots]
    if id_prefix:
        ids_of = cols.ids
        visible &= np.fromiter((ids_of[i].startswith(id_prefix) for i in slots.tolist()),
                               np.bool_, len(slots))
    keep = (relevance > PRINTS_AS_ZERO) & (relevance >= cfg.min_relevance) & visible
    s = slots[keep]
    rel = relevance[keep]
    now_us = micros(now)
    if memo is None:
        rec = _recency(*_tier_age(cols, s, now_us, cfg), cfg)
    else:  # tier and age only where the memo has no recency yet
        known = memo.array(cols, now_us, cfg)
        rec = known[s]
        miss = np.isnan(rec).nonzero()[0]
        if len(miss):
            rec[miss] = _recency(*_tier_age(cols, s[miss], now_us, cfg), cfg)
            known[s[miss]] = rec[miss]
    score = rel * rec
    ids = cols.ids
    stands: dict[int, list[str]] = {}
    newer: dict[int, list[str]] = {}
    merged = 0
    if cfg.relevance == "calibrated" and len(s) >= 2 and (cfg.near_identical > 0
                                                          or cfg.updates.margin > 0):
        s, rel, rec, score, stands, newer, merged = _adjusted(idx, s, rel, rec, score, cfg,
                                                              memo, query, agent)
    tokens = cols.tokens[s]
    cut: _Cut | None = None
    if (cfg.relevance == "calibrated" and cfg.passage_tokens > 0
            and bool((tokens > cfg.passage_tokens).any())):
        cut = _passages(cols, s, rel, rec, score, query, agent, cfg, memo)
        s, rel, rec, score, tokens = cut.slots, cut.rel, cut.rec, cut.score, cut.tokens
    costs = tokens + cfg.per_note_overhead_tokens
    if rendered:
        costs = costs + header_tokens([ids[i] for i in s.tolist()], None if cut is None
                                      else cut.labels())
    keys = (lambda j: [ids[i] for i in s[j].tolist()]) if cut is None else cut.keys(ids)
    packed = pack_positions(keys, costs, score, budget, cfg.exact_max_cells)
    why: Why | None = None
    if why_limit > 0:
        below = (relevance > PRINTS_AS_ZERO) & (relevance < cfg.min_relevance) & visible

        def signals_of(b: IntArray) -> tuple[FloatArray, IntArray]:
            rec_b = _recency(*_tier_age(cols, b, now_us, cfg), cfg)
            return rec_b, cols.tokens[b] + cfg.per_note_overhead_tokens

        why = left_out(ids, s, rel, rec, score, costs, packed.at, budget, slots[below],
                       relevance[below], signals_of, why_limit)
        if merged:
            why = msgspec.structs.replace(why, counts={**why.counts, "near_identical": merged})
    if explain:
        at = np.arange(len(s))
        flags = np.zeros(len(s), np.bool_)
        flags[packed.at] = True
        chosen = flags.tolist()
    else:  # only the packed notes become structs
        at = packed.at
    sa = s[at]
    shown = sa.tolist()
    tier, age = _tier_age(cols, sa, now_us, cfg)
    if cut is None:
        texts = cols.texts.many(shown, sa)
    else:  # a passage's whole note is decoded, not kept: only the texts shown whole are
        whole = [cut.place[j] is None for j in at.tolist()]
        kept = iter(cols.texts.many([t for t, w in zip(shown, whole, strict=True) if w]))
        texts = cut.texts([next(kept) if w else cols.texts.get(t)
                           for t, w in zip(shown, whole, strict=True)], at)
    created = cols.created(sa, shown)
    # the contract's fields in order (``NoteSignals``); with ``explain``, ``chosen`` after them
    m = len(at)
    four = rounded(np.concatenate((score[at], rel[at], rec[at], age)))  # one pass, then split
    fields: tuple[list[Any], ...] = (
        [ids[i] for i in shown], texts, tokens[at].tolist(), costs[at].tolist(),
              four[:m], four[m:2 * m], four[2 * m:3 * m],
              [_TIERS[t] for t in tier.tolist()], cols.uses[sa].tolist(), four[3 * m:],
              created, list(map(cols.meta.get, shown)))
    if stands or newer or cut is not None:
        pos = at.tolist() if cut is None else cut.origin[at].tolist()
        fields = (*fields, [stands.get(p, []) for p in pos], [newer.get(p, []) for p in pos])
    if cut is not None:
        fields = (*fields, [cut.place[j] for j in at.tolist()])
    if explain:
        every = [ScoredNote(*f, chosen=c) for *f, c in zip(*fields, chosen, strict=True)]
        picked = [c.signals() for c in every if c.chosen]
        candidates = by_score(every)
    else:  # a packed note as the result lists it
        picked = list(starmap(NoteSignals, zip(*fields, strict=True)))
        candidates = []
    return RankResult(
        used=packed.total_cost,
        method=packed.method,
        upper_bound=round(packed.upper_bound, DECIMALS),
        notes=order(picked, cfg.order),
        candidates=candidates,
        why=why,
        nothing_relevant=cfg.relevance == "calibrated" and not len(s),
        unknown_words=(cols.unknown_words(query, cfg, agent,
                                          None if memo is None else memo.terms(cols))
                       if cfg.relevance == "calibrated" and cfg.unknown_word_factor < 1.0
                       and query else []),
    )


class _Cut:
    """The candidates with each long note replaced by its passages
    (``projections.ranking.passages``), parallel arrays: a passage's note slot, relevance,
    recency, score and tokens, its place (None: a whole note), its position among the candidates
    before the cut (``origin``) and where its text lies in its note's."""

    def __init__(self, slots: IntArray, rel: FloatArray, rec: FloatArray, score: FloatArray,
                 tokens: IntArray, place: list[Passage | None], origin: IntArray) -> None:
        self.slots, self.rel, self.rec, self.score, self.tokens = slots, rel, rec, score, tokens
        self.place, self.origin = place, origin

    def labels(self) -> list[str]:
        """What each item's rendered header adds beyond its note id (``render.place``)."""
        return ["" if p is None else place_label(p) for p in self.place]

    def keys(self, ids: list[str]) -> Any:
        """The packer's tie-break keys: a passage's is its note id and its index."""
        slots, place = self.slots, self.place

        def of(j: IntArray) -> list[str]:
            return [ids[i] if p is None else f"{ids[i]}#{p.index:06d}"
                    for i, p in zip(slots[j].tolist(), (place[k] for k in j.tolist()),
                                    strict=True)]
        return of

    def texts(self, whole: list[str], at: IntArray) -> list[str]:
        """The shown items' texts: a passage's part of its note's ``whole`` text."""
        out = []
        for t, j in zip(whole, at.tolist(), strict=True):
            p = self.place[j]
            out.append(t if p is None else t[p.start:p.end])
        return out


def _passages(cols: Columns, s: IntArray, rel: FloatArray, rec: FloatArray,
              score: FloatArray, query: str, agent: str, cfg: RankingConfig,
              memo: BatchMemo | None = None) -> _Cut:
    """The candidates ``s`` with every note longer than ``cfg.passage_tokens`` replaced by
    its passages that match (``passages.split``, ``passages.relevance_of``: the bits of
    ``passages.bags_bm25`` and ``passages.passage_relevance``), in candidate order; a
    passage after its note's best one (``repeat_ranks``) has its score multiplied by
    ``cfg.passage_repeat ** rank`` unless its note holds the best-scored item (the first of
    them in candidate order), and names its rank (``Passage.rank``)."""
    size = cfg.passage_tokens
    repeat = cfg.passage_repeat
    tok = cols.tokens[s]
    weights = cols.bm25_weights(query, cfg, agent, None if memo is None else memo.terms(cols))
    slots: list[int] = []
    rels: list[float] = []
    recs: list[float] = []
    scores: list[float] = []
    toks: list[int] = []
    place: list[Passage | None] = []
    origin: list[int] = []
    later: list[tuple[int, int]] = []
    """(place among the items, rank) of each passage after its note's best one."""
    rows = list(zip(s.tolist(), rel.tolist(), rec.tolist(), score.tolist(), tok.tolist(),
                    strict=True))
    # every long candidate's passages first: cutting one may give a word an id, so the
    # query's words are looked up after
    vocab = _Ids() if memo is None else memo.vocab(cols)
    cut: list[Parts] = [WHOLE if t <= size else
                        _parts(cols, slot, size, cfg.analyzer, vocab) if memo is None else
                        memo.passages(cols, slot, size, cfg.analyzer)
                        for slot, _, _, _, t in rows]
    long = [k for k, words in enumerate(cut) if words is not WHOLE]
    probs = dict(zip(long, relevances([rows[k][1] for k in long], [cut[k] for k in long],
                                      weights, query_ids(cols, cfg.analyzer, weights.words,
                                                         vocab)), strict=True))
    for p, ((slot, r, c, sc, t), words) in enumerate(zip(rows, cut, strict=True)):
        if words is WHOLE:
            slots.append(slot)
            rels.append(r)
            recs.append(c)
            scores.append(sc)
            toks.append(t)
            place.append(None)
            origin.append(p)
            continue
        prob = probs[p]
        parts = places(words)
        rank = repeat_ranks(prob) if repeat < 1.0 else None
        for k, ((a, z, pt), pr) in enumerate(zip(parts, prob, strict=True)):
            if pr <= PRINTS_AS_ZERO:
                continue
            slots.append(slot)
            rels.append(pr)
            recs.append(c)
            scores.append(sc * (pr / r))  # the note's score (any rule's) shared alike
            toks.append(pt)
            place.append(Passage(k, len(parts), a, z))
            origin.append(p)
            if rank is not None and rank[k]:
                later.append((len(place) - 1, rank[k]))
    if later:  # after a note's best passage: ``passage_repeat`` ** its rank, but the lead's
        lead = slots[max(range(len(scores)), key=scores.__getitem__)]  # first of the best
        for j, k in later:
            if slots[j] != lead:
                scores[j] *= math.pow(repeat, k)
                was = place[j]
                assert was is not None
                place[j] = msgspec.structs.replace(was, rank=k)
    return _Cut(np.array(slots, np.int64), np.array(rels, np.float64),
                np.array(recs, np.float64), np.array(scores, np.float64),
                np.array(toks, np.int64), place,
                np.array(origin, np.int64))


def repeat_ranks(prob: list[float]) -> list[int]:
    """Each passage's rank among its note's passages that are candidates (``prob`` above
    ``PRINTS_AS_ZERO``), by their match, highest first (ties: the earlier passage), from 0;
    0 for the others too (they are never candidates)."""
    out = [0] * len(prob)
    live = sorted((k for k, pr in enumerate(prob) if pr > PRINTS_AS_ZERO),
                  key=lambda k: (-prob[k], k))
    for r, k in enumerate(live):
        out[k] = r
    return out


def _adjusted(idx: NamespaceIndex, s: IntArray, rel: FloatArray, rec: FloatArray,
              score: FloatArray, cfg: RankingConfig, memo: BatchMemo | None = None,
              query: str = "", agent: str = ""
              ) -> tuple[IntArray, FloatArray, FloatArray, FloatArray, dict[int, list[str]],
                         dict[int, list[str]], int]:
    """The candidates after the near-identical and updated-facts rules
    (``projections.ranking.updates``): their slots, relevance, recency and score, the ids each
    kept position stands for and the older versions each updates (by position after the
    drop), and how many near-identical notes were dropped. ``query``: its text, for the
    query-words signal (``updates.query_words_share``; none without it)."""
    cols = idx.cols
    ids = cols.ids
    d = idx.derived
    vec = norm = None
    if d is not None:
        d.ensure(len(cols))
        vec, norm = d.rows(s), d.norm[s]
    words = None
    if query and cfg.updates.margin > 0 and cfg.updates.query_words_share > 0:
        posts = cols.query_postings(query, cfg, agent, None if memo is None else memo.terms(cols))
        held = np.zeros((len(s), len(posts)), np.bool_)
        for w, (_, slots, _) in enumerate(posts):
            if len(slots):  # ascending: where each candidate would sit says if it is there
                held[:, w] = slots.take(np.searchsorted(slots, s), mode="clip") == s
        longest = cfg.updates.newer_max_tokens or cfg.passage_tokens
        spread = cols.tokens[s] > longest if longest > 0 else None
        words = QueryWords(held, np.array([x[2] for x in posts], np.float64), spread)
    sl = s.tolist()
    adj = adjust([ids[i] for i in sl], score, rel, cols.created_us[s],
                 cols.uses[s] >= cfg.longterm_uses, vec, norm,
                 lambda p: cols.texts.get(sl[p]), cfg, cols.distinct[s],
                 None if memo is None else lambda p: memo.words(cols, sl[p]), words)
    keep = adj.keep
    if not adj.stands_for:  # no note dropped (the usual case): positions unchanged
        newer = {p: sorted(ids[sl[q]] for q in qs) for p, qs in adj.updates.items()}
        return s, rel, rec, adj.score, {}, newer, 0
    new_pos = np.cumsum(keep) - 1
    stands = {int(new_pos[p]): [ids[sl[q]] for q in qs] for p, qs in adj.stands_for.items()}
    newer = {int(new_pos[p]): sorted(ids[sl[q]] for q in qs) for p, qs in adj.updates.items()}
    merged = int((~keep).sum())
    return s[keep], rel[keep], rec[keep], adj.score[keep], stands, newer, merged
