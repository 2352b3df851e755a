"""Notes of given ages and the query path over them, for the ranking rules' tests (updated
facts, unknown words...): the notes are indexed with the production embedder and ranked by
``worker.engine.run_rank``, as a worker ranks a query, at the fixed ``NOW``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hivemind_memory.api_stub.protocol.messages import QueryRequest
from hivemind_memory.events.schema import Scope
from hivemind_memory.projections.ranking.config import DEFAULT, RankingConfig
from hivemind_memory.projections.ranking.embedders import embedder_for
from hivemind_memory.projections.ranking.index import build_index
from hivemind_memory.projections.ranking.rank_result import RankResult
from hivemind_memory.projections.state import NoteState
from hivemind_memory.worker.engine import run_rank

NOW = datetime(2026, 6, 1, tzinfo=UTC)
"""The clock of every query ranked here."""
EMBEDDER = embedder_for("wordllama")
"""The embedder the notes are indexed with and the queries embedded by."""


def note(nid: str, text: str, days: float, *, tokens: int = 20, uses: int = 0,
              agent: str = "ann", scope: Scope = "shared") -> NoteState:
    """A note written ``days`` before ``NOW``."""
    return NoteState(note_id=nid, agent=agent, scope=scope, kind="note", text=text,
                     tokens=tokens, created_at=NOW - timedelta(days=days), uses=uses)


def ranked(notes: list[NoteState], text: str, budget: int, cfg: RankingConfig = DEFAULT,
           **request: Any) -> RankResult:
    """``text`` asked of ``notes`` with ``explain`` on (every candidate in the result);
    ``request``: more fields of the ``QueryRequest`` (``agent``, ``id_prefix``...)."""
    idx = build_index("t", {n.note_id: n for n in notes}, EMBEDDER)
    req = QueryRequest(ns="t", text=text, budget=budget, explain=True, **request)
    return run_rank(idx, req, cfg, NOW, embedder=EMBEDDER)
