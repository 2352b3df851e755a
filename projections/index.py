"""The worker's in-memory index of one namespace: note rows and lexical statistics. Pure: it
is filled by ``projections.store.index_loader`` (full load, then incremental refresh from the
changes stream) or from an in-memory fold (``--as-of``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hivemind_memory.events.positions import ZERO, Position
from hivemind_memory.projections.config import RankingConfig
from hivemind_memory.projections.relevance import LexicalIndex, scores_over
from hivemind_memory.projections.state import NoteState


@dataclass
class NamespaceIndex:
    """Notes of one namespace plus a BM25 index of the ones a query could return."""

    ns: str
    notes: dict[str, NoteState] = field(default_factory=dict)
    shared: LexicalIndex = field(default_factory=LexicalIndex)
    """BM25 index of the live shared notes."""
    private: dict[str, LexicalIndex] = field(default_factory=dict)
    """BM25 index of each agent's live private notes (only that agent's queries use it)."""
    checkpoint: Position = ZERO
    changes_seen: Position | None = None
    """Id of the last changes entry folded in (None: never loaded)."""
    full_loads: int = 0
    incremental_notes: int = 0
    _vectors: dict[int, tuple[list[str], Any, Any]] = field(default_factory=dict)
    """Per embedding dimension: note ids, their embeddings as one matrix, and their norms."""
    _dirty_dims: set[int] = field(default_factory=set)

    def put(self, note: NoteState) -> None:
        """Add or replace one note (a forgotten note leaves the lexical index)."""
        old = self.notes.get(note.note_id)
        if note.scope == "private":
            lex = self.private.get(note.agent)
            if lex is None:
                lex = self.private[note.agent] = LexicalIndex()
        else:
            lex = self.shared
        if note.embedding is not None:
            self._dirty_dims.add(len(note.embedding))
        self.notes[note.note_id] = note
        if note.forgotten:
            lex.remove(note.note_id)  # ignores a note it never had
        elif old is None or note.note_id not in lex:
            lex.add(note.note_id, note.text)

    def reset(self, notes: Iterable[NoteState], checkpoint: Position,
              changes_seen: Position) -> None:
        """Replace everything with ``notes`` (a full load, in note id order)."""
        self.notes = {}
        self.shared = LexicalIndex()
        self.private = {}
        self._vectors = {}
        self._dirty_dims = set()
        for note in sorted(notes, key=lambda n: n.note_id):
            self.put(note)
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
        self.incremental_notes += n
        self.checkpoint = max(self.checkpoint, checkpoint)
        self.changes_seen = changes_seen

    def _matrix(self, dim: int) -> tuple[list[str], Any, Any]:
        if dim in self._dirty_dims or dim not in self._vectors:
            ids = sorted(k for k, n in self.notes.items()
                         if not n.forgotten and n.embedding is not None and len(n.embedding) == dim)
            m = np.array([self.notes[k].embedding for k in ids], dtype=np.float64).reshape(
                len(ids), dim)
            self._vectors[dim] = (ids, m, np.sqrt(np.einsum("ij,ij->i", m, m)))
            self._dirty_dims.discard(dim)
        return self._vectors[dim]

    def relevance(self, text: str, embedding: Sequence[float] | None, cfg: RankingConfig,
                  agent: str = "") -> dict[str, float]:
        """Relevance to ``agent``'s query of every live note (notes at 0 left out): the one
        relevance rule, used by every query (live and ``--as-of``).

        Cosine (clamped to [0, 1]; 0 when either vector is zero) where the note and the query
        carry embeddings of the same dimension, computed with numpy over one matrix per
        dimension (its last bit may differ across CPUs and BLAS builds: see
        ``projections.relevance``); BM25 (``scores_over``) otherwise. BM25 statistics come from
        the notes ``agent`` may see (shared + its own private ones) and other agents' private
        notes get no lexical score at all (the ranking drops them anyway).
        """
        own = self.private.get(agent) if agent else None
        lex = scores_over([self.shared] if own is None else [self.shared, own], text, cfg)
        if embedding is None:
            return lex
        ids, m, norms = self._matrix(len(embedding))
        q = np.asarray(embedding, dtype=np.float64)
        qn = float(np.sqrt(np.dot(q, q)))
        with_vec = set(ids)
        out = {k: v for k, v in lex.items() if k not in with_vec}
        if not ids or qn == 0.0:
            return out
        dots = np.einsum("ij,j->i", m, q)
        denom = norms * qn
        cos = np.divide(dots, denom, out=np.zeros_like(dots), where=denom > 0)
        for k, v in zip(ids, np.clip(cos, 0.0, 1.0).tolist(), strict=True):
            if v > 0.0:
                out[k] = v
        return out


def build_index(ns: str, notes: dict[str, NoteState]) -> NamespaceIndex:
    """An index over a given note set (``--as-of`` queries fold their own)."""
    idx = NamespaceIndex(ns)
    for k in sorted(notes):
        idx.put(notes[k])
    idx.changes_seen = ZERO
    return idx
