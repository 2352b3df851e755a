"""The worker's in-memory index of one namespace: note rows and lexical statistics. Pure: it
is filled by ``projections.store.index_loader`` (full load, then incremental refresh from the
changes stream) or from an in-memory fold (``--as-of``).

Every field of every note lives in the columns (``projections.ranking.columns``): arrays, texts in
UTF-8 chunks, embeddings as arrays; ``notes`` is a read-only view that builds a ``NoteState``
only for the note read. So 100k notes cost no Python object each besides their ids."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from hivemind_memory.events.positions import ZERO, Position
from hivemind_memory.projections.ranking.calibrated import (
    Layout,
    Signals,
    candidates,
    creation_order,
    features,
    layout_of,
    likely,
    likely_among,
    log_tokens,
    named_owners,
    signals,
    window_gain,
    window_likely,
    window_weights,
)
from hivemind_memory.projections.ranking.columns import (
    BoolArray,
    Columns,
    FloatArray,
    IntArray,
    NotesView,
    TermCache,
)
from hivemind_memory.projections.ranking.config import Calibration, RankingConfig
from hivemind_memory.projections.ranking.dense import DenseIndex
from hivemind_memory.projections.ranking.embedders import Embedder
from hivemind_memory.projections.ranking.timewords import Span
from hivemind_memory.projections.ranking.vectors import DerivedVectors, QueryVector
from hivemind_memory.projections.state import NoteState

DENSE_OVERFETCH_PERCENT = 125
"""The dense stage asks its HNSW index for this share of the nearest notes it keeps (the
asker's invisible notes, dead and filtered ones are dropped from them; asked again for
twice as many when too few remain)."""
EMBED_BATCH = 4_096
"""Texts handed to the embedder per call."""
LAYOUTS_KEPT = 4
"""Askers whose visible notes in creation order, their positions and their
``calibrated.Layout`` an index keeps whatever its size (least recently used dropped first:
~4 MiB each at 100k notes)."""
LAYOUTS_KEPT_MAX = 16
"""Askers kept at most, past ``LAYOUTS_KEPT`` only while the kept entries of one cache hold
at most ``LAYOUT_NOTES_KEPT`` notes: a 10k-note namespace asked by 9 audiences kept 4 and
rebuilt the others' layouts query after query (~8 % of a selective query's instructions)."""
LAYOUT_NOTES_KEPT = 200_000
"""Notes (summed over the kept askers) past which a cache of ``LAYOUTS_KEPT_MAX`` keeps only
``LAYOUTS_KEPT`` askers: layouts ~36 bytes a note, orders and positions 8 (~10 MiB in all)."""


def _keep(cache: dict[Any, Any], key: Any, value: Any, notes: Callable[[Any], int]) -> None:
    """Put ``value`` last in ``cache`` (the most recently used) and drop the least recently
    used past ``LAYOUTS_KEPT_MAX`` entries, or past ``LAYOUTS_KEPT`` while they hold more
    than ``LAYOUT_NOTES_KEPT`` notes (``notes`` of an entry)."""
    cache.pop(key, None)
    cache[key] = value
    held = sum(notes(v) for v in cache.values())
    while len(cache) > LAYOUTS_KEPT_MAX or (len(cache) > LAYOUTS_KEPT and
                                            held > LAYOUT_NOTES_KEPT):
        held -= notes(cache.pop(next(iter(cache))))


class _Positions:
    def __init__(self, order: AskerOrder) -> None:
        self.order = order

    def __getitem__(self, slots: IntArray) -> IntArray:
        return self.order.at(slots)

    def __len__(self) -> int:
        return len(self.order.rank)


class AskerOrder:
    """``visible_order(agent)`` and each slot's position in it, read only where asked:
    the shared notes' creation order and positions (one set for every asker) merged with the
    asker's own private notes (a short array), instead of two arrays of the namespace's size
    per asker. ``order[p]`` (``p``: positions, an int array), ``len(order)`` and ``at(slots)``
    (-1 where the asker may not see the slot) give what the arrays give."""

    def __init__(self, shared: IntArray, before: IntArray, rank: IntArray, own: IntArray,
                 visible: BoolArray) -> None:
        self.shared = shared
        """The live shared slots in creation order."""
        self.before = before
        """Per creation rank ``r`` (of every live slot): the shared slots ranked below ``r``."""
        self.rank = rank
        """Each slot's creation rank among the live slots (-1: dead)."""
        self.own = own
        """The asker's own private live slots, in creation order."""
        self.own_rank = rank[own]
        self.own_at = before[self.own_rank] + np.arange(len(own), dtype=np.int64)
        """Their positions in the asker's order (ascending)."""
        self.visible = visible

    def __len__(self) -> int:
        return len(self.shared) + len(self.own)

    def __getitem__(self, p: IntArray) -> IntArray:
        p = np.asarray(p, np.int64)
        if not len(self.own):
            got: IntArray = self.shared[p]
            return got
        k = np.searchsorted(self.own_at, p, side="right")  # own notes at or before p
        mine = k > 0
        mine[mine] = self.own_at[k[mine] - 1] == p[mine]
        out = np.empty(len(p), np.int64)
        out[mine] = self.own[k[mine] - 1]
        rest = ~mine
        out[rest] = self.shared[p[rest] - k[rest]]
        return out

    @property
    def positions(self) -> _Positions:
        """``positions[slots]``: ``at(slots)``."""
        return _Positions(self)

    def at(self, slots: IntArray) -> IntArray:
        """The position of each of ``slots`` in the asker's order; -1: not visible."""
        r = self.rank[slots]
        got = self.before[r] + np.searchsorted(self.own_rank, r)
        out: IntArray = np.where(self.visible[slots], got, -1)
        return out


@dataclass
class NamespaceIndex:
    """The notes of one namespace as a columnar table (``projections.ranking.columns``)."""

    ns: str
    cols: Columns = field(default_factory=Columns)
    """Interned terms, postings and one array per field; BM25 per visible corpus."""
    checkpoint: Position = ZERO
    changes_seen: Position | None = None
    """Id of the last changes entry folded in (None: never loaded)."""
    full_loads: int = 0
    snapshot_loads: int = 0
    incremental_notes: int = 0
    _vectors: dict[int, tuple[IntArray, Any, Any]] = field(default_factory=dict)
    """Per embedding dimension: slots, their embeddings as one matrix, and their norms."""
    _dirty_dims: set[int] = field(default_factory=set)
    derived: DerivedVectors | None = None
    """The embedder's vectors of the notes (derived data: never in the log; see
    ``embed_missing``)."""
    embedded: int = 0
    """Notes embedded by ``embed_missing`` so far (a metric)."""
    _order: IntArray = field(default_factory=lambda: np.zeros(0, np.int64))
    _order_key: tuple[int, int] = (0, -1)
    _order_vis: dict[str, IntArray] = field(default_factory=dict)
    _layouts: dict[tuple[str, Calibration], Layout] = field(default_factory=dict)
    _layout_version: tuple[int, int] = (0, -1)
    dense: DenseIndex | None = None
    """The dense candidate stage over ``derived`` (``projections.ranking.dense``), once
    built (``attach_dense``); valid only for the table it was built from."""
    _dense_of: weakref.ref[Columns] | None = None
    _shared_order: tuple[Any, IntArray, IntArray, IntArray] | None = None
    """What every ``AskerOrder`` shares (``(id(cols), cols.layout)``, the shared slots in
    creation order, the shared slots below each rank, each slot's rank)."""
    _own: dict[str, AskerOrder] = field(default_factory=dict)
    """Per asker: its ``AskerOrder`` (its own private notes only: a short array)."""

    def attach_dense(self, dense: DenseIndex, cols: Columns) -> bool:
        """Use ``dense`` (built from the slots of ``cols``) from now on; False (dropped)
        when the table was replaced since (a full or snapshot load)."""
        if cols is not self.cols:
            return False
        self.dense, self._dense_of = dense, weakref.ref(cols)
        return True

    def dense_ready(self, cfg: RankingConfig) -> bool:
        """Whether a calibrated query under ``cfg`` takes its candidates from the postings
        and the dense stage (a namespace of at least ``candidates.scan_max_notes`` notes whose
        dense index is built for its table and embedder) rather than scoring every note."""
        d, got = self.dense, self.derived
        return (d is not None and got is not None and cfg.relevance == "calibrated"
                and self._dense_of is not None and self._dense_of() is self.cols
                and d.digest == got.digest and d.serves(cfg.candidates)
                and self.indexed() >= cfg.candidates.scan_max_notes)

    def _dense_sync(self) -> DenseIndex:
        """The dense index with the slots added since it was built."""
        d, got, cols = self.dense, self.derived, self.cols
        assert d is not None and got is not None
        n = len(cols)
        if d.covered < n:
            has = got.done(n)[d.covered:] & (got.norm[d.covered:n] > 0) & \
                cols.live[d.covered:n]
            d.add(d.covered, got.mat[d.covered:n].astype(np.int8), has)
        return d

    def _dense_near(self, query: QueryVector, want: int, visible: BoolArray,
                    allowed: BoolArray | None) -> IntArray:
        """The dense stage's ``want`` nearest notes that the asker may see (``visible``) and
        that are ``allowed``, nearest first: asked for ``DENSE_OVERFETCH`` times ``want``,
        then, while too few of those may be proposed and the index holds more, for twice
        as many (the search's cost grows with how many it is asked for)."""
        dense = self._dense_sync()
        k = want + (want * (DENSE_OVERFETCH_PERCENT - 100) + 99) // 100
        while True:
            near = dense.search(query.near, k)
            ok = visible[near]
            if allowed is not None:  # the dense stage proposes matching notes only
                ok &= allowed[near]
            if int(ok.sum()) >= want or len(near) < k or k >= dense.size:
                return near[ok][:want]
            k *= 2

    @property
    def notes(self) -> NotesView:
        """Note id -> ``NoteState`` (read-only; each built from the columns when read)."""
        return NotesView(self.cols)

    def put(self, note: NoteState) -> None:
        """Add or replace one note (a forgotten note leaves the lexical index)."""
        s = self.cols.slot.get(note.note_id)
        old = None if s is None else self.cols.vec.get(s)
        if old is not None:
            self._dirty_dims.add(len(old))
        if note.embedding is not None:
            self._dirty_dims.add(len(note.embedding))
        self.cols.put(note)

    def reset(self, notes: Iterable[NoteState], checkpoint: Position,
              changes_seen: Position, *, ordered: bool = False) -> None:
        """Replace everything with ``notes`` (a full load), put in note id order (``ordered``:
        they come in that order already, and are then consumed one at a time)."""
        self.cols = Columns.bulk(notes if ordered else sorted(notes, key=lambda n: n.note_id),
                                 keep_bags=True)
        self.derived = None
        self._vectors = {}
        self._dirty_dims = {len(v) for v in self.cols.vec.values()}
        self.checkpoint = checkpoint
        self.changes_seen = changes_seen
        self.full_loads += 1

    def update(self, notes: Iterable[NoteState], checkpoint: Position,
               changes_seen: Position) -> None:
        """Apply the new states of some notes (an incremental refresh)."""
        n = 0
        for note in notes:
            self.put(note)
            n += 1
        self.cols.compact()
        self.incremental_notes += n
        self.checkpoint = max(self.checkpoint, checkpoint)
        self.changes_seen = changes_seen

    def embed_missing(self, embedder: Embedder | None) -> int:
        """Compute the embedder's vector of every live note that has none yet (all of them
        when the embedder changed), in batches; returns how many were computed. Called by
        whoever fills the index (the worker's loader after a load or refresh, ``build_index``)
        with the embedder it was handed; ``None`` keeps the vectors there are."""
        cols = self.cols
        bags, cols.bags = cols.bags, None
        if embedder is None:
            return 0
        d = self.derived
        if d is None or d.digest != embedder.digest() or d.dim != embedder.dim:
            d = self.derived = DerivedVectors(embedder.digest(), embedder.dim)
        n = len(cols)
        todo = (cols.live[:n] & ~d.done(n)).nonzero()[0]
        if not len(todo):
            return 0
        bag_embed = getattr(embedder, "embed_bags", None)
        if bags is not None and bag_embed is not None and len(bags.per_slot) == n:
            # a fresh bulk build: every note's words are at hand (no text decoded again)
            d.set(np.arange(n), bag_embed(list(cols.terms), bags.per_slot,
                                          bags.term, bags.counts))
        else:
            for a in range(0, len(todo), EMBED_BATCH):
                part = todo[a:a + EMBED_BATCH]
                d.set(part, embedder.embed([cols.texts.get(s) for s in part.tolist()]))
        self.embedded += len(todo)
        return len(todo)

    def indexed(self) -> int:
        """How many live notes the lexical index holds."""
        return self.cols.shared_n + sum(self.cols.private_n.values())

    def _matrix(self, dim: int) -> tuple[IntArray, Any, Any]:
        if dim in self._dirty_dims or dim not in self._vectors:
            cols = self.cols
            ids, live, vec = cols.ids, cols.live, cols.vec
            # live notes with an embedding of this dimension, in note id order
            got = sorted((ids[s], s) for s, v in vec.items() if live[s] and len(v) == dim)
            m = np.array([vec[s] for _, s in got], dtype=np.float64).reshape(len(got), dim)
            slots = np.array([s for _, s in got], dtype=np.int64)
            self._vectors[dim] = (slots, m, np.sqrt(np.einsum("ij,ij->i", m, m)))
            self._dirty_dims.discard(dim)
        return self._vectors[dim]

    def visible_order(self, agent: str) -> IntArray:
        """The slots ``agent`` may see, in creation order (ties by note id); cached until a
        slot is added or dies or a slot's creation time changes (``Columns.layout``)."""
        cols = self.cols
        if self._order_key != (id(cols), cols.layout):
            self._order = creation_order(cols)
            self._order_key = (id(cols), cols.layout)
            self._order_vis.clear()
        got = self._order_vis.get(agent)
        if got is None:
            got = self._order[cols.visible(agent)[self._order]]
        _keep(self._order_vis, agent, got, len)
        return got

    def asker_order(self, agent: str) -> AskerOrder:
        """``visible_order(agent)`` as an ``AskerOrder``: what the candidate stage reads of
        it, with no array of the namespace's size per asker (a namespace asked by many
        audiences rebuilt those query after query once their caches were full)."""
        cols = self.cols
        key = (id(cols), cols.layout)
        shared = self._shared_order
        if shared is None or shared[0] != key:
            order = self.visible_order("")  # also brings self._order up to date
            everyone = self._order
            rank = np.full(len(cols), -1, np.int64)
            rank[everyone] = np.arange(len(everyone), dtype=np.int64)
            before = np.zeros(len(everyone) + 1, np.int64)
            np.cumsum(cols.visible("")[everyone], out=before[1:])
            shared = self._shared_order = (key, order, before, rank)
            self._own.clear()
        got = self._own.get(agent)
        if got is None:
            vis = cols.visible(agent)
            everyone = self._order
            own = everyone[(vis & ~cols.visible(""))[everyone]] if agent else everyone[:0]
            got = AskerOrder(shared[1], shared[2], shared[3], own, vis)
        _keep(self._own, agent, got, lambda o: len(o.own))
        return got

    def query_cosines(self, vectors: npt.NDArray[np.floating[Any]]) -> FloatArray | None:
        """The cosine of every slot with each of the query ``vectors`` (rows, from the
        index's embedder): an array of (slots, queries), one matrix product; None when the
        index has no derived vectors."""
        if self.derived is None:
            return None
        return self.derived.cosines(vectors, len(self.cols))

    def _caller_cosines(self, embedding: Sequence[float]) -> tuple[IntArray, FloatArray]:
        """Live notes carrying a caller embedding of the query's length, and their cosine
        with it (in [-1, 1]; 0 when either vector is zero)."""
        slots, m, norms = self._matrix(len(embedding))
        q = np.asarray(embedding, dtype=np.float64)
        qn = float(np.sqrt(np.dot(q, q)))
        if not len(slots):
            return slots, np.zeros(0)
        dots = np.einsum("ij,j->i", m, q)
        denom = norms * qn
        cos = np.divide(dots, denom, out=np.zeros_like(dots), where=denom > 0)
        return slots, np.clip(cos, -1.0, 1.0)

    def _layout(self, agent: str, cal: Calibration) -> tuple[IntArray, Layout]:
        """``visible_order(agent)`` and its ``calibrated.Layout`` under ``cal`` (cached until
        a note changes)."""
        seq = self.visible_order(agent)
        key = (agent, cal)
        if self._layout_version != (id(self.cols), self.cols.version):
            self._layouts.clear()
            self._layout_version = (id(self.cols), self.cols.version)
        got = self._layouts.get(key)
        if got is None:
            got = layout_of(self.cols, seq, cal)
        _keep(self._layouts, key, got, lambda lay: len(lay.base))
        return seq, got

    def _inputs(self, text: str, embedding: Sequence[float] | None, cfg: RankingConfig,
                agent: str, cache: TermCache | None, cosine: FloatArray | None
                ) -> tuple[IntArray, Layout, IntArray, FloatArray, FloatArray | None, list[int]]:
        """What the calibrated model reads of a query: the notes ``agent`` may see (slots, in
        creation order) and their ``calibrated.Layout``, the BM25 hits (slots, values), the
        cosine per slot (caller embeddings in place of the derived ones where the note carries
        one of the query embedding's length) and the owners the query names."""
        seq, lay = self._layout(agent, cfg.calibration)
        cols = self.cols
        lex_slots, lex = cols.bm25(text, cfg, agent, cache)
        if embedding is not None:
            cslots, ccos = self._caller_cosines(embedding)
            if len(cslots):
                cosine = np.zeros(len(cols)) if cosine is None else cosine.copy()
                cosine[cslots] = ccos
        return seq, lay, lex_slots, lex, cosine, named_owners(cols, text)

    def signals(self, text: str, embedding: Sequence[float] | None, cfg: RankingConfig,
                agent: str = "", cache: TermCache | None = None,
                cosine: FloatArray | None = None) -> tuple[IntArray, Layout, Signals]:
        """The notes ``agent`` may see (slots, in creation order), their query-independent
        part of the calibrated model and the query's signals over them. ``cosine``: see
        ``calibrated_slots``."""
        seq, lay, lex_slots, lex, cos, named = self._inputs(text, embedding, cfg, agent, cache,
                                                            cosine)
        return seq, lay, signals(self.cols, seq, lex_slots, lex, cos, named, lay)

    def feature_columns(self, text: str, embedding: Sequence[float] | None,
                        cfg: RankingConfig, agent: str = "", cache: TermCache | None = None,
                        cosine: FloatArray | None = None) -> tuple[IntArray, list[FloatArray]]:
        """The notes ``agent`` may see (slots, in creation order) and the calibrated model's
        features of each (``calibrated.FEATURES`` columns): what ``calibrated_slots`` scores
        and what a fit learns from."""
        seq, _, sig = self.signals(text, embedding, cfg, agent, cache, cosine)
        return seq, features(sig, log_tokens(self.cols, seq, cfg.calibration))

    def calibrated_slots(self, text: str, embedding: Sequence[float] | None,
                         cfg: RankingConfig, agent: str = "", cache: TermCache | None = None,
                         cosine: FloatArray | None = None, limit: int | None = None,
                         query: QueryVector | None = None,
                         allowed: BoolArray | None = None,
                         windows: Sequence[Span] = ()
                         ) -> tuple[IntArray, FloatArray]:
        """``relevance = "calibrated"`` (``projections.ranking.calibrated``): the probability
        that each visible note is needed, for the ``limit`` most probable (default
        ``cfg.max_candidates``). ``cosine``: the query's cosine with every slot's derived
        vector (``query_cosines``; None: no semantic part but caller embeddings, which take
        precedence where the note carries one of the query embedding's length). ``query``:
        the query's vector where ``dense_ready``: the candidates are then the BM25 hits and
        the dense stage's nearest notes (``calibrated.likely_among``), not every note.
        ``windows``: the time windows the question names (``[start, end)`` in microseconds,
        ``timewords.windows``): with ``calibration.time_window_weight`` above 0 the notes
        written in them gain in their logit (``calibrated.window_likely``)."""
        top = cfg.max_candidates if limit is None else limit
        cal = cfg.calibration
        if query is not None and embedding is None and self.dense_ready(cfg):
            order = self.asker_order(agent)
            cols = self.cols
            lex_slots, lex = cols.bm25(text, cfg, agent, cache)
            near = self._dense_near(query, cfg.candidates.dense, cols.visible(agent), allowed)
            derived = self.derived
            assert derived is not None
            named = named_owners(cols, text)
            at, p = likely_among(cols, order, order.positions, lex_slots, lex, near,
                                 lambda s: derived.rows_cosines(query, s), named, cal, top,
                                 allowed, cfg.candidates.lexical)
            slots = order[at]
            if windows and cal.time_window_weight > 0:
                slots, p = self._windowed(slots, p, order, order.positions, agent, windows,
                                          lex_slots, lex,
                                          lambda s: derived.rows_cosines(query, s), named,
                                          cal, top, allowed)
            return self._unknown(slots, p, text, cfg, agent, cache,
                                 lambda s: derived.rows_cosines(query, s))
        seq, lay, lex_slots, lex, cos, named = self._inputs(text, embedding, cfg, agent, cache,
                                                            cosine)
        at, p = likely(self.cols, seq, lex_slots, lex, cos, named, lay, cal, top, allowed)
        slots = seq[at]
        if windows and cal.time_window_weight > 0:
            slots, p = self._windowed(slots, p, seq, lay.pos, agent, windows, lex_slots, lex,
                                      None if cos is None else (lambda s: cos[s]), named, cal,
                                      top, allowed)
        return self._unknown(slots, p, text, cfg, agent, cache,
                             None if cos is None else (lambda s: cos[s]))

    def in_windows(self, agent: str, windows: Sequence[Span]) -> tuple[IntArray, FloatArray]:
        """The slots ``agent`` may see written in any of ``windows``, ascending, and how well
        each fits them (``calibrated.window_weights``)."""
        cols = self.cols
        n = len(cols)
        t = cols.created_us[:n]
        mask = np.zeros(n, np.bool_)
        for w in windows:
            mask |= (t >= w.start) & (t < w.end)
        mask &= cols.visible(agent)
        out: IntArray = mask.nonzero()[0]
        return out, window_weights(t[out], windows)

    def _windowed(self, slots: IntArray, p: FloatArray, seq: Any, pos: Any, agent: str,
                  windows: Sequence[Span], lex_slots: IntArray, lex: FloatArray,
                  cosine_of: Callable[[IntArray], FloatArray] | None, named: Sequence[int],
                  cal: Calibration, top: int, allowed: BoolArray | None
                  ) -> tuple[IntArray, FloatArray]:
        """The candidates ``slots``/``p`` with the notes of the question's time ``windows``
        valued with their gain (``calibrated.window_likely``): each note's larger
        probability, the ``top`` most probable kept, in creation order (``pos``: each slot's
        position in ``seq``)."""
        inside, fit = self.in_windows(agent, windows)
        gain = window_gain(fit, len(seq), cal)
        up = gain > 0.0
        if not up.any():
            return slots, p
        inside, gain = inside[up], gain[up]
        if 0 < cal.time_window_max_notes < len(inside):
            kept = self._window_kept(inside, lex_slots, cosine_of, cal, allowed)
            inside, gain = inside[kept], gain[kept]
        at = np.asarray(pos[inside], np.int64)
        o = np.argsort(at)
        at, gain = at[o], gain[o]
        ws, wp = window_likely(self.cols, seq, at, lex_slots, lex, cosine_of, named, cal, gain,
                               allowed)
        if not len(ws):
            return slots, p
        both = np.concatenate((slots, ws))
        bp = np.concatenate((p, wp))
        where = np.asarray(pos[both], np.int64)
        o = np.lexsort((-bp, where))  # by position, the larger probability first
        where, both, bp = where[o], both[o], bp[o]
        first = np.concatenate(([True], where[1:] != where[:-1]))
        both, bp = both[first], bp[first]
        keep = candidates(bp, top)
        return both[keep], bp[keep]

    @staticmethod
    def _window_kept(slots: IntArray, lex_slots: IntArray,
                     cosine_of: Callable[[IntArray], FloatArray] | None,
                     cal: Calibration, allowed: BoolArray | None = None) -> BoolArray:
        """Which notes of a window wider than ``calibration.time_window_max_notes`` (its
        ``slots``) are valued: those that share a word with the query (``lex_slots``: the
        BM25 hits) and the ``time_window_max_notes`` nearest by cosine (every one tied with
        the last included) of the others at ``time_window_min_cosine`` or above and
        ``allowed`` (None: all; none without cosines: no other could be a candidate)."""
        keep: BoolArray = np.isin(slots, lex_slots)
        if cosine_of is None:
            return keep
        rest = (~keep).nonzero()[0]
        if allowed is not None:
            rest = rest[allowed[slots[rest]]]
        c = np.asarray(cosine_of(slots[rest]), np.float64)
        ok = c >= cal.time_window_min_cosine
        rest, c = rest[ok], c[ok]
        keep[rest[candidates(c, cal.time_window_max_notes)]] = True
        return keep

    def _unknown(self, slots: IntArray, p: FloatArray, text: str, cfg: RankingConfig,
                 agent: str, cache: TermCache | None,
                 cosines: Callable[[IntArray], FloatArray] | None
                 ) -> tuple[IntArray, FloatArray]:
        """``cfg.unknown_word_factor`` applied: each query word no note ``agent`` may see
        contains multiplies the probability of every candidate that is not close in meaning
        to the query (``cosines(slots)`` under ``calibration.min_cosine``; every candidate
        without cosines) by it; those then under ``calibration.floor`` (or at 0) are no
        longer candidates. Unless every query word is unknown: then each candidate came by
        meaning (a paraphrase), and none matches only the rest of the question."""
        f = cfg.unknown_word_factor
        if f >= 1.0 or not len(slots):
            return slots, p
        posts = self.cols.query_postings(text, cfg, agent, cache)
        k = len(self.cols.unknown_words(text, cfg, agent, cache, posts))
        if not k or k == len(posts):  # every word unknown: no note matches "the rest"
            return slots, p
        lexical = (np.ones(len(slots), np.bool_) if cosines is None
                   else cosines(slots) < cfg.calibration.min_cosine)
        p = np.where(lexical, p * (f ** k), p)
        keep = (p > 0.0) & (p >= cfg.calibration.floor)
        return slots[keep], p[keep]

    def relevance_slots(self, text: str, embedding: Sequence[float] | None,
                        cfg: RankingConfig, agent: str = "", cache: TermCache | None = None,
                        cosine: FloatArray | None = None, limit: int | None = None,
                        query: QueryVector | None = None,
                        allowed: BoolArray | None = None,
                        windows: Sequence[Span] = ()
                        ) -> tuple[IntArray, FloatArray]:
        """Relevance to ``agent``'s query of every live note (notes at 0 left out), as slots of
        ``cols`` and their relevance: the one relevance rule, used by every query (live and
        ``--as-of``). ``relevance = "calibrated"``: ``calibrated_slots`` (``cosine``,
        ``limit`` and ``query`` are its); ``"bm25"``, the rule of the first releases, below.

        Cosine (clamped to [0, 1]; 0 when either vector is zero) where the note and the query
        carry embeddings of the same dimension, computed with numpy over one matrix per
        dimension (its last bit may differ across CPUs and BLAS builds: see
        ``projections.ranking.bm25_rules``); BM25 (``Columns.bm25``, equal to the tests'
        ``scores_over``) otherwise. BM25 statistics come from the notes ``agent`` may see
        (shared + its own private ones) and other agents' private notes get no lexical score
        at all (the ranking drops them anyway). ``cache``: see ``Columns.bm25``.
        ``allowed`` (a flag per slot; None: all): only those slots may be candidates (a
        query's filter and the expiry, ``ranker.allowed_slots``), decided before the
        ``limit`` most relevant are kept; the relevance of the others is not changed.
        ``windows``: the time windows the question names (calibrated relevance only:
        ``calibrated_slots``).
        """
        if cfg.relevance == "calibrated":
            return self.calibrated_slots(text, embedding, cfg, agent, cache, cosine, limit,
                                         query, allowed, windows)
        lex_slots, lex = self.cols.bm25(text, cfg, agent, cache)
        if allowed is not None:
            ok = allowed[lex_slots]
            lex_slots, lex = lex_slots[ok], lex[ok]
        if embedding is None:
            return lex_slots, lex
        slots, m, norms = self._matrix(len(embedding))
        q = np.asarray(embedding, dtype=np.float64)
        qn = float(np.sqrt(np.dot(q, q)))
        with_vec = np.zeros(len(self.cols), np.bool_)
        with_vec[slots] = True
        keep = ~with_vec[lex_slots]
        lex_slots, lex = lex_slots[keep], lex[keep]
        if not len(slots) or qn == 0.0:
            return lex_slots, lex
        dots = np.einsum("ij,j->i", m, q)
        denom = norms * qn
        cos = np.clip(np.divide(dots, denom, out=np.zeros_like(dots), where=denom > 0), 0.0, 1.0)
        pos = cos > 0.0
        if allowed is not None:
            pos &= allowed[slots]
        return np.concatenate((lex_slots, slots[pos])), np.concatenate((lex, cos[pos]))

    def relevance(self, text: str, embedding: Sequence[float] | None, cfg: RankingConfig,
                  agent: str = "") -> dict[str, float]:
        """``relevance_slots`` keyed by note id."""
        slots, rel = self.relevance_slots(text, embedding, cfg, agent)
        ids = self.cols.ids
        return {ids[s]: v for s, v in zip(slots.tolist(), rel.tolist(), strict=True)}


def build_index(ns: str, notes: dict[str, NoteState],
                embedder: Embedder | None = None) -> NamespaceIndex:
    """An index over a given note set (``--as-of`` queries fold their own), its notes
    embedded with ``embedder``."""
    idx = NamespaceIndex(ns)
    idx.reset(notes.values(), ZERO, ZERO)
    idx.embed_missing(embedder)
    return idx
