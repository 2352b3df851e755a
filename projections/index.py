"""The worker's in-memory index of one namespace: note rows and lexical statistics, refreshed
incrementally from the changes stream, so a query never reloads every note.

Each committed projection batch appends one entry to ``changes`` listing the notes it
touched; a refresh reads the entries after the last one it saw and re-reads only those notes.
A ``reset`` entry (written by ``replay``) or a gap (the changes stream was trimmed past our
position) triggers a full reload.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from events import keys
from events.log import ZERO, Position, parse_pos
from projections.relevance import LexicalIndex, scores_over
from projections.state import NoteState, unpack_note


def _id_pos(entry_id: bytes | str) -> Position:
    return parse_pos(entry_id)


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

    def _put(self, note: NoteState) -> None:
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

    def load(self, r: Any) -> None:
        """Full load (first use, reset, or a gap in the changes stream)."""
        p = r.pipeline(transaction=True)
        p.xrevrange(keys.changes(self.ns), count=1)
        p.get(keys.checkpoint(self.ns))
        p.hgetall(keys.notes(self.ns))
        last_change, cp, raw = p.execute()
        self.notes = {}
        self.shared = LexicalIndex()
        self.private = {}
        self._vectors = {}
        self._dirty_dims = set()
        for k in sorted(raw):
            self._put(unpack_note(raw[k]))
        self.checkpoint = parse_pos(cp)
        self.changes_seen = _id_pos(last_change[0][0]) if last_change else ZERO
        self.full_loads += 1

    def refresh(self, r: Any) -> None:
        """Bring the index up to the read model's current state."""
        if self.changes_seen is None:
            self.load(r)
            return
        start = "(" + f"{self.changes_seen[0]}-{self.changes_seen[1]}"
        entries = r.xrange(keys.changes(self.ns), min=start if self.changes_seen != ZERO else "-")
        if not entries:
            return
        if self.changes_seen != ZERO:
            me = f"{self.changes_seen[0]}-{self.changes_seen[1]}"
            if not r.xrange(keys.changes(self.ns), min=me, max=me):
                # the entry we last saw was trimmed away: later ones may be gone too
                self.load(r)
                return
        touched: set[str] = set()
        for _eid, f in entries:
            if f.get(b"reset") == b"1":
                self.load(r)
                return
            touched.update(x for x in f.get(b"notes", b"").decode().split(" ") if x)
        ids = sorted(touched)
        if ids:
            for blob in r.hmget(keys.notes(self.ns), ids):
                if blob is not None:
                    self._put(unpack_note(blob))
        self.incremental_notes += len(ids)
        last = entries[-1][1].get(b"pos")
        self.checkpoint = max(self.checkpoint, parse_pos(last))
        self.changes_seen = _id_pos(entries[-1][0])


    def _matrix(self, dim: int) -> tuple[list[str], Any, Any]:
        if dim in self._dirty_dims or dim not in self._vectors:
            ids = sorted(k for k, n in self.notes.items()
                         if not n.forgotten and n.embedding is not None and len(n.embedding) == dim)
            m = np.array([self.notes[k].embedding for k in ids], dtype=np.float64).reshape(
                len(ids), dim)
            self._vectors[dim] = (ids, m, np.sqrt(np.einsum("ij,ij->i", m, m)))
            self._dirty_dims.discard(dim)
        return self._vectors[dim]

    def relevance(self, text: str, embedding: Sequence[float] | None, cfg: Any,
                  agent: str = "") -> dict[str, float]:
        """Relevance to ``agent``'s query of every live note (notes at 0 left out), vectorised.

        Same rule as ``projections.relevance.relevance_for``: cosine (clamped to [0, 1]) where
        the note and the query carry embeddings of the same dimension, BM25 otherwise. BM25
        statistics come from the notes ``agent`` may see (shared + its own private ones) and
        other agents' private notes get no lexical score at all.
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
        idx._put(notes[k])
    idx.changes_seen = ZERO
    return idx
