"""The columnar note table of one namespace: interned terms, postings, one numpy array per
field, and BM25 over them in numpy. Pure (no Redis, no clock).

Rows (*slots*) are appended as notes arrive and never renumbered while the table lives: a
note that is forgotten keeps its slot, flagged dead, until a ``reset``. The table holds every
field of a note (``note_state`` gives it back as a ``NoteState``): the scalar ones as arrays,
the texts as UTF-8 chunks (``projections.ranking.texts``), the embeddings as one float64 array per
slot that has one; so a worker keeps no Python object per note besides its id.

Postings are a CSR base (one run of ``(slot, tf)`` per term id) plus a delta of postings
appended since the last compaction; a query reads both and masks out dead and invisible slots.
``compact`` merges the delta into the base (dropping dead postings) once it is large.

BM25 is ``tests.support.reference.scores_over``'s arithmetic, element for element: the same
corpus statistics (the notes the asking agent may see: shared ones plus its own private ones,
counted incrementally), the same IDF, each note's sum over the query's distinct terms in
query order, each term ``w * (tf / ((tf + base) + slope * dl))``, divided by the same
``max_score``. numpy's element-wise ``+ - * /`` on float64 are IEEE operations like Python's,
so the relevance is bit-identical (a differential test checks it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from hivemind_memory.projections.ranking.analyzer import analyze, english_term
from hivemind_memory.projections.ranking.bm25_rules import idf, tokenize
from hivemind_memory.projections.ranking.config import RankingConfig
from hivemind_memory.projections.ranking.terms import StemIndex, TermTable
from hivemind_memory.projections.ranking.texts import SlotMemo, TextColumn
from hivemind_memory.projections.state import NoteState


class NativeSums(Protocol):
    """What ``Columns.bm25`` calls of the C sums (checked against ``_bm25.pyi``)."""

    def accumulate(self, every: npt.NDArray[np.int64], parts: npt.NDArray[np.float64], n: int,
                   max_score: float, keep_zero: bool, slots: npt.NDArray[np.int64],
                   values: npt.NDArray[np.float64]) -> int: ...


_built: NativeSums | None
try:
    from hivemind_memory.projections.ranking import _bm25 as _built
except ImportError:  # pragma: no cover - an install without a C compiler
    _built = None

native: NativeSums | None = _built
"""BM25's per-note sums in C (``projections/ranking/_bm25.c``), when it was built; otherwise
(or set to None) the numpy code of ``Columns.bm25`` (the reference: the tests run both and
require the same bits)."""

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
"""Times are stored as integer microseconds since this instant."""
_US = timedelta(microseconds=1)
NO_TIME = np.iinfo(np.int64).min
"""``last_used_us`` of a note never used."""
SLOT_ARRAYS: dict[str, type[np.generic]] = {
    "doc_len": np.int64, "tokens": np.int64, "created_us": np.int64, "uses": np.int64,
    "last_used_us": np.int64, "scratch": np.bool_, "private": np.bool_, "owner": np.int64,
    "live": np.bool_,
}
"""The per-slot arrays and their dtypes."""
COMPACT_MIN_DELTA = 4_096
"""Delta postings below this are never compacted (cheap to read as they are)."""
COMPACT_FRACTION = 0.125
"""Compact once the delta holds more postings than this fraction of the base."""
_FLUSH = 1 << 16
"""``bulk`` moves its postings from lists to arrays this many at a time."""


class Bags(NamedTuple):
    """The words of every slot of a freshly built table, slot after slot: ``per_slot[s]``
    entries of (term id, count); a slot's entries in its words' first-seen order."""

    per_slot: IntArray
    term: npt.NDArray[np.int32]
    counts: npt.NDArray[np.int32]


class _Intern(dict[str, int]):
    """Term -> id, a new term getting the next id on first lookup."""

    def __missing__(self, term: str) -> int:
        t = self[term] = len(self)
        return t


def micros(t: datetime) -> int:
    """``t`` as integer microseconds since the epoch (exact for any aware datetime)."""
    return (t - EPOCH) // _US


def from_micros(us: int) -> datetime:
    """Inverse of ``micros`` (an aware UTC datetime)."""
    return EPOCH + timedelta(0, 0, us)


_EPOCH = from_micros(0)
"""A placeholder in ``Columns.created``'s list (never returned)."""


TERM_POSTINGS_KEPT = 4_000_000
"""``Columns.kept_terms`` holds at most about this many postings (16 bytes each: 64 MB; a
10k-note namespace has ~0.7M postings in all, a 100k-note one ~7M)."""


class Columns:
    """One row per note slot; see the module docstring."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.slot: dict[str, int] = {}
        self.terms = TermTable()
        """Term -> id, without a Python object per term (``projections.ranking.terms``)."""
        self.agents: dict[str, int] = {"": 0}
        cap = 16
        self.doc_len = np.zeros(cap, np.int64)
        self.tokens = np.zeros(cap, np.int64)
        self.created_us = np.zeros(cap, np.int64)
        self.uses = np.zeros(cap, np.int64)
        self.scratch = np.zeros(cap, np.bool_)
        self.private = np.zeros(cap, np.bool_)
        self.owner = np.zeros(cap, np.int64)
        self.live = np.zeros(cap, np.bool_)
        self.last_used_us = np.zeros(cap, np.int64)
        self.distinct = np.zeros(cap, np.int32)
        """Distinct words of each live slot's text (``tokenize``; its postings): the size of
        its word set, which the near-identical rule compares before reading any text."""
        self.texts = TextColumn()
        self.vec: dict[int, FloatArray] = {}
        """Embedding of each slot that has one."""
        self.meta: dict[int, dict[str, str | int | float | bool]] = {}
        """Metadata of each slot that has some."""
        self.expires: dict[int, int] = {}
        """``expires_at`` (microseconds) of each slot whose note has one."""
        self._agent_names: list[str] = []
        # CSR base: postings of term t are base_slot[base_ptr[t]:base_ptr[t + 1]]
        self.base_ptr = np.zeros(1, np.int64)
        self.base_slot = np.zeros(0, np.int32)
        self.base_tf: npt.NDArray[np.integer[Any]] = np.zeros(0, np.int32)
        """Term frequencies (int32, or narrower as loaded from a snapshot)."""
        self.delta: dict[int, tuple[list[int], list[int]]] = {}
        self.delta_size = 0
        self._killed = 0
        """Slots that died since the last compaction (their postings are still in the base)."""
        # BM25 corpus statistics of live notes: shared, and private per owner id
        self.shared_n = 0
        self.shared_len = 0
        self.private_n: dict[int, int] = {}
        self.private_len: dict[int, int] = {}
        self._vis: dict[str, BoolArray] = {}
        self._english_total: dict[str, int] = {}
        """Per agent: the english analyzer's total length of the notes it may see (cleared
        with ``_vis``)."""
        self._terms_kept: TermCache = {}
        """``bm25``'s cache kept from batch to batch (``kept_terms``; cleared by a write)."""
        self._kept_postings = 0
        """The postings ``_terms_kept`` holds."""
        self._stems = StemIndex()
        """Each term's english stem, and each stem's terms (arrays, ``terms.StemIndex``)."""
        self._english_len: tuple[int, IntArray] | None = None
        self._created: SlotMemo[datetime] = SlotMemo(_EPOCH)
        """``from_micros(created_us[s])`` of the slots ``created`` read."""
        self.bags: Bags | None = None
        """Each slot's words and counts, kept by ``bulk(keep_bags=True)`` for the embedder."""
        self.layout = 0
        """Bumped whenever a slot is added or dies, or a slot's creation time changes (caches
        of slot sets and of their creation order compare it)."""
        self.version = 0
        """Bumped by every ``put`` (caches of per-note values compare it)."""

    def __len__(self) -> int:
        return len(self.ids)

    # ------------------------------------------------------------------ writing

    def _grow(self, need: int) -> None:
        cap = len(self.doc_len)
        if need <= cap:
            return
        new = max(need, 2 * cap)
        for name in (*SLOT_ARRAYS, "distinct"):
            old = getattr(self, name)
            arr = np.zeros(new, old.dtype)
            arr[:cap] = old
            setattr(self, name, arr)

    def _count(self, s: int, sign: int) -> None:
        """Add (or take away) slot ``s`` to the corpus statistics of its audience."""
        dl = int(self.doc_len[s])
        if self.private[s]:
            o = int(self.owner[s])
            self.private_n[o] = self.private_n.get(o, 0) + sign
            self.private_len[o] = self.private_len.get(o, 0) + sign * dl
        else:
            self.shared_n += sign
            self.shared_len += sign * dl

    def _index_text(self, s: int, text: str) -> None:
        counts = Counter(tokenize(text))
        terms = self.terms
        delta = self.delta
        for term, tf in counts.items():
            t = terms.get(term)
            if t is None:
                t = terms[term] = len(terms)
            run = delta.get(t)
            if run is None:
                delta[t] = ([s], [tf])
            else:
                run[0].append(s)
                run[1].append(tf)
        self.delta_size += len(counts)
        self.doc_len[s] = sum(counts.values())
        self.distinct[s] = len(counts)

    def put(self, note: NoteState) -> None:
        """Add or update one note. A live note keeps its slot and postings while its text,
        scope and owner stay; a slot that died (forgotten) never comes back: a note live again
        (or one whose text, scope or owner changed) gets a new slot, so a slot has one text
        and one set of postings."""
        self._vis.clear()
        self._english_total.clear()
        self._terms_kept = {}
        self._kept_postings = 0
        self.version += 1
        s = self.slot.get(note.note_id)
        private = note.scope == "private"
        owner = self.agents.setdefault(note.agent, len(self.agents))
        alive = note.active
        if s is not None and (bool(self.private[s]) != private or int(self.owner[s]) != owner
                              or (alive and not self.live[s])
                              or self.texts.get(s) != note.text):
            if self.live[s]:
                self._count(s, -1)
                self.live[s] = False
                self._killed += 1
            self.vec.pop(s, None)
            self.meta.pop(s, None)
            self.expires.pop(s, None)
            s = None
        if s is None:
            self.layout += 1
            s = len(self.ids)
            self._grow(s + 1)
            self.ids.append(note.note_id)
            self.slot[note.note_id] = s
            self.private[s] = private
            self.owner[s] = owner
            self.texts.append(note.text)
            if alive:
                self._index_text(s, note.text)
        self.tokens[s] = note.tokens
        created = micros(note.created_at)
        if created != self.created_us[s]:  # a new slot, or a kept one whose time changed
            self.created_us[s] = created
            self._created.forget(s)  # ``created`` converts it again
            self.layout += 1  # the creation order may have changed
        self.uses[s] = note.uses
        self.last_used_us[s] = NO_TIME if note.last_used_at is None else micros(
            note.last_used_at)
        self.scratch[s] = note.kind == "scratch"
        if note.embedding is None:
            self.vec.pop(s, None)
        else:
            self.vec[s] = np.array(note.embedding, np.float64)
        self._put_extra(s, note)
        if alive != bool(self.live[s]):
            self._count(s, 1 if alive else -1)
            self.live[s] = alive
            self._killed += not alive
            self.layout += 1

    def _put_extra(self, s: int, note: NoteState) -> None:
        """The metadata and expiry of slot ``s`` (kept only where the note has them)."""
        if note.metadata:
            self.meta[s] = note.metadata
        else:
            self.meta.pop(s, None)
        if note.expires_at is not None:
            self.expires[s] = micros(note.expires_at)
        else:
            self.expires.pop(s, None)

    @classmethod
    def bulk(cls, notes: Iterable[NoteState], keep_bags: bool = False) -> Columns:
        """A table of ``notes`` (in the given order) built in one pass: per-field lists turned
        into arrays at the end and the postings sorted into CSR at once (what ``put`` note by
        note then ``compact`` would give, much faster). ``keep_bags``: also keep each note's
        words and counts in slot order (``bags``, until ``drop_bags``), for the embedder."""
        self = cls()
        ids, agents, terms, texts, vec = self.ids, self.agents, _Intern(), self.texts, self.vec
        owner: list[int] = []
        private: list[bool] = []
        scratch: list[bool] = []
        tokens: list[int] = []
        created: list[int] = []
        uses: list[int] = []
        last_used: list[int] = []
        live: list[bool] = []
        doc_len: list[int] = []
        # postings in note order: term ids and tfs, moved from lists to arrays every
        # _FLUSH entries (a list holds an 8-byte pointer an entry), and each note's count
        p_term: list[int] = []
        p_tf: list[int] = []
        a_term: list[npt.NDArray[np.int32]] = []
        a_tf: list[npt.NDArray[np.int32]] = []
        per_note: list[int] = []
        for s, note in enumerate(notes):
            ids.append(note.note_id)
            owner.append(agents.setdefault(note.agent, len(agents)))
            private.append(note.scope == "private")
            scratch.append(note.kind == "scratch")
            tokens.append(note.tokens)
            created.append(micros(note.created_at))
            uses.append(note.uses)
            last_used.append(NO_TIME if note.last_used_at is None else micros(note.last_used_at))
            live.append(note.active)
            texts.append(note.text)
            if note.embedding is not None:
                vec[s] = np.array(note.embedding, np.float64)
            if note.metadata or note.expires_at is not None:
                self._put_extra(s, note)
            if not note.active:
                doc_len.append(0)
                per_note.append(0)
                continue
            counts = Counter(tokenize(note.text))
            p_term.extend(map(terms.__getitem__, counts))
            p_tf.extend(counts.values())
            per_note.append(len(counts))
            doc_len.append(sum(counts.values()))
            if len(p_term) >= _FLUSH:
                a_term.append(np.array(p_term, np.int32))
                a_tf.append(np.array(p_tf, np.int32))
                p_term.clear()
                p_tf.clear()
        self.slot = {k: i for i, k in enumerate(ids)}
        if len(self.slot) != len(ids):
            raise ValueError("duplicate note ids in a bulk load")
        self.terms = TermTable(terms)  # ids in first-seen order, as interned
        n = len(ids)
        self._grow(n)
        for name, values in (("doc_len", doc_len), ("tokens", tokens), ("created_us", created),
                             ("uses", uses), ("last_used_us", last_used), ("scratch", scratch),
                             ("private", private), ("owner", owner), ("live", live)):
            getattr(self, name)[:n] = values
        texts.seal()
        # one temporary of the postings' size at a time (a full load's peak memory)
        a_term.append(np.array(p_term, np.int32))
        term_arr = np.concatenate(a_term)
        a_term.clear()
        order = np.argsort(term_arr, kind="stable")
        ptr = np.zeros(len(self.terms) + 1, np.int64)
        np.cumsum(np.bincount(term_arr, minlength=len(self.terms)), out=ptr[1:])
        self.base_ptr = ptr
        a_tf.append(np.array(p_tf, np.int32))
        tf = np.concatenate(a_tf)
        a_tf.clear()
        self.base_tf = tf[order]
        if keep_bags:
            self.bags = Bags(np.array(per_note, np.int64), term_arr, tf)
        del term_arr, tf
        self.base_slot = np.repeat(np.arange(n, dtype=np.int32), per_note)[order]
        self._recount()
        return self

    def _recount(self) -> None:
        """Corpus statistics from the arrays (after a bulk load or a snapshot)."""
        n = len(self.ids)
        live, priv, dl, own = self.live[:n], self.private[:n], self.doc_len[:n], self.owner[:n]
        shared = live & ~priv
        self.shared_n = int(shared.sum())
        self.shared_len = int(dl[shared].sum())
        mine = live & priv
        counts = np.bincount(own[mine], minlength=len(self.agents))
        lens = np.bincount(own[mine], weights=dl[mine], minlength=len(self.agents))
        self.private_n = {o: int(counts[o]) for o in np.flatnonzero(counts).tolist()}
        self.private_len = {o: int(lens[o]) for o in np.flatnonzero(counts).tolist()}
        # every live slot's postings are in the base here (a bulk load, a snapshot)
        distinct = np.zeros(len(self.doc_len), np.int32)
        distinct[:n] = np.bincount(self.base_slot, minlength=n)[:n]
        self.distinct = distinct
        self._vis.clear()
        self._english_total.clear()

    def compact(self, force: bool = False) -> bool:
        """Merge the delta postings into the CSR base, dropping postings of dead slots; only
        when the delta is large (or ``force``, unless there is nothing to merge or drop).
        Returns whether it ran."""
        if not self.delta_size and not self._killed:
            return False
        if not force and (self.delta_size < COMPACT_MIN_DELTA
                          or self.delta_size < COMPACT_FRACTION * len(self.base_slot)):
            return False
        n_terms = len(self.terms)
        base_terms = np.repeat(np.arange(len(self.base_ptr) - 1, dtype=np.int64),
                               np.diff(self.base_ptr))
        d_terms: list[int] = []
        d_slots: list[int] = []
        d_tfs: list[int] = []
        for t, (run_slots, run_tfs) in self.delta.items():
            d_terms.extend([t] * len(run_slots))
            d_slots.extend(run_slots)
            d_tfs.extend(run_tfs)
        terms = np.concatenate((base_terms, np.array(d_terms, np.int64)))
        slots = np.concatenate((self.base_slot, np.array(d_slots, np.int32)))
        tfs = np.concatenate((self.base_tf, np.array(d_tfs, np.int32)))
        keep = self.live[slots]
        terms, slots, tfs = terms[keep], slots[keep], tfs[keep]
        order = np.argsort(terms, kind="stable")
        self.base_slot = slots[order]
        self.base_tf = tfs[order]
        ptr = np.zeros(n_terms + 1, np.int64)
        np.cumsum(np.bincount(terms, minlength=n_terms), out=ptr[1:])
        self.base_ptr = ptr
        self.delta = {}
        self.delta_size = 0
        self._killed = 0
        return True

    # ------------------------------------------------------------------ reading

    def agent_name(self, o: int) -> str:
        """The agent of owner id ``o``."""
        names = self._agent_names
        if len(names) != len(self.agents):
            names[:] = list(self.agents)  # ids are given in insertion order
        return names[o]

    def note_state(self, s: int) -> NoteState:
        """The note whose current slot is ``s``, as it was put."""
        lu = int(self.last_used_us[s])
        v = self.vec.get(s)
        return NoteState(
            note_id=self.ids[s], agent=self.agent_name(int(self.owner[s])),
            scope="private" if self.private[s] else "shared",
            kind="scratch" if self.scratch[s] else "note", text=self.texts.get(s),
            tokens=int(self.tokens[s]), created_at=from_micros(int(self.created_us[s])),
            uses=int(self.uses[s]), last_used_at=None if lu == NO_TIME else from_micros(lu),
            forgotten=not self.live[s], embedding=None if v is None else v.tolist(),
            metadata=self.meta.get(s),
            expires_at=from_micros(self.expires[s]) if s in self.expires else None)

    def kept_terms(self) -> TermCache:
        """A ``bm25`` cache that lives as long as the table is unchanged: the words a worker's
        later batches share with earlier ones are not looked up again. Started afresh by a
        write, and by the next batch once it holds more than ``TERM_POSTINGS_KEPT`` postings
        (``bm25`` adds no word to it past that)."""
        if self._kept_postings > TERM_POSTINGS_KEPT:
            self._terms_kept = {}
            self._kept_postings = 0
        return self._terms_kept

    def visible(self, agent: str) -> BoolArray:
        """Slots ``agent`` may retrieve: live, and shared or its own (cached until a write)."""
        vis = self._vis.get(agent)
        if vis is None:
            n = len(self.ids)
            o = self.agents.get(agent, -1) if agent else -1
            vis = self.live[:n] & (~self.private[:n] | (self.owner[:n] == o))
            self._vis[agent] = vis
        return vis

    def created(self, at: IntArray, slots: list[int]) -> list[datetime]:
        """The creation time of slots ``at`` (``slots``: the same as a list), each converted
        once and kept (``SlotMemo``: one ``datetime`` per slot read at most)."""
        if not slots:
            return []
        kept = self._created
        miss = kept.missing(at, len(self))
        if len(miss):
            kept.put(miss.tolist(), map(from_micros, self.created_us[miss].tolist()))
        return kept.get(slots)

    def postings(self, term: str) -> tuple[IntArray, FloatArray]:
        """Slots and term frequencies of ``term`` (dead slots included)."""
        t = self.terms.get(term)
        if t is None:
            return np.zeros(0, np.int64), np.zeros(0, np.float64)
        return self.postings_of(t)

    def postings_of(self, t: int) -> tuple[IntArray, FloatArray]:
        """Slots and term frequencies of term id ``t`` (dead slots included)."""
        if t + 1 < len(self.base_ptr):
            a, z = int(self.base_ptr[t]), int(self.base_ptr[t + 1])
            bs, bt = self.base_slot[a:z], self.base_tf[a:z]
        else:
            bs, bt = np.zeros(0, np.int32), np.zeros(0, np.int32)
        run = self.delta.get(t)
        if run is not None:
            bs = np.concatenate((bs, np.array(run[0], np.int32)))
            bt = np.concatenate((bt, np.array(run[1], np.int32)))
        return bs.astype(np.int64), bt.astype(np.float64)  # int -> float64 is exact

    def _english(self) -> tuple[StemIndex, IntArray]:
        """Stem -> ids of the plain terms with that stem, and each slot's length in english
        terms (its tokens less its stop words); cached until the table changes."""
        known = len(self._stems)
        if known < len(self.terms):
            self._stems.add(map(english_term, self.terms.iter_from(known)))
        # a slot's length and postings never change once written (a changed note gets a new
        # slot), so the lengths are those of the last computation while no slot was added
        key = len(self.ids)
        if self._english_len is None or self._english_len[0] != key:
            n = len(self.ids)
            stop = self._stems.stop_terms().tolist()
            got = [self.postings_of(t) for t in stop]
            slots = np.concatenate([g[0] for g in got] or [np.zeros(0, np.int64)])
            tfs = np.concatenate([g[1] for g in got] or [np.zeros(0, np.float64)])
            minus = np.bincount(slots, weights=tfs, minlength=n).astype(np.int64)
            self._english_len = (key, self.doc_len[:n] - minus)
        return self._stems, self._english_len[1]

    def term_table(self, analyzer: str) -> TermTable:
        """The terms of ``analyzer`` with their ids (ids never change while the table lives):
        ``plain``, the notes' words; ``english``, their stems."""
        return self.terms if analyzer == "plain" else self._english()[0].stems

    def bm25(self, query: str, cfg: RankingConfig, agent: str,
             cache: TermCache | None = None) -> tuple[IntArray, FloatArray]:
        """BM25 relevance in (0, 1] of the slots ``agent`` may see that share a term with
        ``query``: (slots, relevance), slots ascending (``tests.support.reference.scores_over``).

        Under the ``english`` analyzer a term is a stem: its postings are the merged postings
        of the plain terms with that stem (tf summed), a note's length counts its non-stop
        tokens, and the statistics are those of the visible corpus as analysed.

        ``cache`` (optional, valid only while the table does not change: one batch of
        queries) keeps each term's visible slots and ``tf / ((tf + base) + slope * dl)`` for
        the next query with that term, analyzer, audience and ``k1``/``b``; a query then
        multiplies by its own weights, so the result is the same to the bit."""
        o = self.agents.get(agent, -1) if agent else -1
        n_docs = self.shared_n + self.private_n.get(o, 0)
        stem_terms: StemIndex | None = None
        if cfg.analyzer == "plain":
            total_len = self.shared_len + self.private_len.get(o, 0)
            dl = self.doc_len
            words = list(dict.fromkeys(tokenize(query)))
        else:
            stem_terms, dl = self._english()
            known = self._english_total.get(agent)
            if known is None:  # the same sum until a write
                known = self._english_total[agent] = int(dl[self.visible(agent)].sum())
            total_len = known
            words = list(dict.fromkeys(analyze(tokenize(query), cfg.analyzer)))
        empty = (np.zeros(0, np.int64), np.zeros(0, np.float64))
        if total_len == 0:
            return empty
        k1, b = cfg.bm25_k1, cfg.bm25_b
        base = k1 * (1.0 - b)
        slope = k1 * b * n_docs / total_len
        runs: list[tuple[IntArray, FloatArray, float]] = []
        for word in words:
            key = _term_key(cfg, word, o)
            got = None if cache is None else cache.get(key)
            if got is None:
                slots, tfs = self._visible_postings(word, agent, stem_terms)
                part = tfs / (tfs + base + slope * dl[slots])
                got = (slots, part, float(part.min()) if len(part) else 1.0)
                if cache is self._terms_kept:  # kept while under its bound, also mid-batch
                    if self._kept_postings <= TERM_POSTINGS_KEPT:
                        cache[key] = got
                        self._kept_postings += len(slots)
                elif cache is not None:
                    cache[key] = got
            runs.append(got)
        weights = [idf(n_docs, len(slots)) for slots, _, _ in runs]
        max_score = 0.0
        for w in weights:
            max_score += w
        n = len(self.ids)
        hits = [slots for slots, _, _ in runs]
        if not any(len(h) for h in hits):
            return empty
        # one accumulation over every word's postings, in word order per slot: the same
        # additions in the same order as adding word after word (a word's slots are distinct)
        parts = [w * part for w, (_, part, _) in zip(weights, runs, strict=True)]
        every = np.concatenate(hits)
        # a sum of positive terms is > 0; min(w * part) is w * min(part) (w > 0, rounding is
        # monotonic), so the minimum kept with the part says whether one underflowed to 0
        whole = all(w * low > 0.0 for w, (_, _, low) in zip(weights, runs, strict=True))
        sums = native
        if sums is not None:  # the same additions in the same order, in C
            got_slots = np.empty(len(every), np.int64)
            got_values = np.empty(len(every), np.float64)
            k = sums.accumulate(every, np.concatenate(parts), n, max_score, not whole,
                                got_slots, got_values)
            return got_slots[:k], got_values[:k]
        acc = np.bincount(every, weights=np.concatenate(parts), minlength=n)
        # a part underflowed to 0 (absurd k1): the postings are counted instead
        out = (acc > 0.0 if whole else np.bincount(every, minlength=n)).nonzero()[0]
        return out, acc[out] / max_score

    def query_postings(self, query: str, cfg: RankingConfig, agent: str,
                       cache: TermCache | None = None) -> list[tuple[str, IntArray, float]]:
        """The words of ``query`` as ``bm25`` matches them (terms of ``cfg.analyzer``, stop
        words dropped under ``english``), in query order, once each, with the slots of the
        notes ``agent`` may see that hold each (ascending) and its IDF over those notes."""
        o = self.agents.get(agent, -1) if agent else -1
        n_docs = self.shared_n + self.private_n.get(o, 0)
        stem_terms = None if cfg.analyzer == "plain" else self._english()[0]
        words = (tokenize(query) if cfg.analyzer == "plain"
                 else analyze(tokenize(query), cfg.analyzer))
        out: list[tuple[str, IntArray, float]] = []
        for word in dict.fromkeys(words):
            slots = self._slots_holding(word, agent, o, stem_terms, cfg, cache)
            out.append((word, slots, idf(n_docs, len(slots))))
        return out

    def unknown_words(self, query: str, cfg: RankingConfig, agent: str,
                      cache: TermCache | None = None,
                      posts: list[tuple[str, IntArray, float]] | None = None) -> list[str]:
        """The words of ``query`` (``query_postings``) that no note ``agent`` may see
        contains, in query order: what the memory has never been told about (another
        agent's private notes do not count, so the answer reveals nothing of them). A word of
        an agent's name is known: the memory knows who wrote what, though a note seldom
        names its author. ``posts``: ``query_postings``' answer, when known."""
        if posts is None:
            posts = self.query_postings(query, cfg, agent, cache)
        missing = [w for w, slots, _ in posts if not len(slots)]
        if not missing:
            return []
        authors = {w for name in self.agents for w in analyze(tokenize(name), cfg.analyzer)}
        return [w for w in missing if w not in authors]

    def bm25_weights(self, query: str, cfg: RankingConfig, agent: str,
                     cache: TermCache | None = None) -> QueryWeights:
        """What ``bm25`` weighs a text's match with ``query`` by, for ``agent``'s visible
        corpus: the query's distinct terms, each one's IDF, ``base`` and ``slope`` (a term of
        tf ``t`` in a text of length ``dl`` adds ``idf * t / (t + base + slope * dl)``) and the
        sum of the IDFs ``bm25`` divides by. A text that is no note (a passage of one,
        ``projections.ranking.passages``) is scored on the notes' scale with it. ``cache``:
        ``bm25``'s, whose entries hold each word's visible slots (their count is the IDF's)."""
        o = self.agents.get(agent, -1) if agent else -1
        n_docs = self.shared_n + self.private_n.get(o, 0)
        stem_terms: StemIndex | None = None
        if cfg.analyzer == "plain":
            total_len = self.shared_len + self.private_len.get(o, 0)
        else:
            stem_terms, dl = self._english()
            total_len = self._english_total.get(agent, -1)
            if total_len < 0:
                total_len = self._english_total[agent] = int(dl[self.visible(agent)].sum())
        words = list(dict.fromkeys(analyze(tokenize(query), cfg.analyzer)))
        k1, b = cfg.bm25_k1, cfg.bm25_b
        if total_len == 0 or not words:
            return QueryWeights((), (), k1 * (1.0 - b), 0.0, 0.0)
        weights = tuple(idf(n_docs, len(self._slots_holding(w, agent, o, stem_terms, cfg, cache)))
                        for w in words)
        total = 0.0
        for w in weights:
            total += w
        return QueryWeights(tuple(words), weights, k1 * (1.0 - b), k1 * b * n_docs / total_len,
                            total)

    def _slots_holding(self, word: str, agent: str, o: int, stem_terms: StemIndex | None,
                       cfg: RankingConfig, cache: TermCache | None) -> IntArray:
        """The slots ``agent`` (agent number ``o``) may see that hold ``word``, ascending:
        from ``bm25``'s ``cache`` when it holds the word's run, else read."""
        got = None if cache is None else cache.get(_term_key(cfg, word, o))
        return got[0] if got is not None else self._visible_postings(word, agent, stem_terms)[0]

    def _visible_postings(self, word: str, agent: str,
                          stem_terms: StemIndex | None
                          ) -> tuple[IntArray, FloatArray]:
        """The postings of a query word that ``agent`` may see: of the plain term, or with
        ``stem_terms`` (english: stem -> plain term ids) merged over the plain terms of the
        stem (tf summed)."""
        vis = self.visible(agent)
        if stem_terms is None:
            slots, tfs = self.postings(word)
            keep = vis[slots]
            return slots[keep], tfs[keep]
        got = [self.postings_of(t) for t in stem_terms.get(word, [])]
        slots = np.concatenate([g[0] for g in got] or [np.zeros(0, np.int64)])
        tfs = np.concatenate([g[1] for g in got] or [np.zeros(0, np.float64)])
        keep = vis[slots]
        slots, tfs = slots[keep], tfs[keep]
        if len(got) > 1:  # a note holding several forms of the stem: one tf
            merged, inv = np.unique(slots, return_inverse=True)
            tfs = np.bincount(inv, weights=tfs, minlength=len(merged)).astype(np.float64)
            slots = merged.astype(np.int64)
        return slots, tfs


class QueryWeights(NamedTuple):
    """``Columns.bm25_weights``: a query's terms and what ``Columns.bm25`` weighs them by."""

    words: tuple[str, ...]
    idf: tuple[float, ...]
    base: float
    slope: float
    total: float
    """The sum of ``idf``: ``bm25``'s values are a note's sum over it (0: no term)."""


TermCache = dict[tuple[str, str, int, float, float], tuple[IntArray, FloatArray, float]]
"""``Columns.bm25``'s per-batch cache: (analyzer, word, audience, k1, b) -> (visible slots,
``tf / ((tf + base) + slope * dl)``, its minimum (1.0 when empty))."""


def _term_key(cfg: RankingConfig, word: str, o: int) -> tuple[str, str, int, float, float]:
    """``TermCache``'s key of ``word`` for audience ``o`` under ``cfg``."""
    return (cfg.analyzer, word, o, cfg.bm25_k1, cfg.bm25_b)


class NotesView(Mapping[str, NoteState]):
    """Note id -> ``NoteState`` over a ``Columns`` (each built when it is read)."""

    def __init__(self, cols: Columns) -> None:
        self.cols = cols

    def __getitem__(self, key: str) -> NoteState:
        return self.cols.note_state(self.cols.slot[key])

    def __iter__(self) -> Iterator[str]:
        return iter(self.cols.slot)

    def __len__(self) -> int:
        return len(self.cols.slot)

    def __contains__(self, key: object) -> bool:
        return key in self.cols.slot
