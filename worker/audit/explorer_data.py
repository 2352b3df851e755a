"""What the browser explorer (``/ui`` of ``hivemind serve``) reads besides the admin endpoints
it shares with the CLI: the decay curves of the config in force and one note's recency over
its life. Reads only; ``now`` is passed in."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from hivemind_memory.projections.ranking.config import RankingConfig
from hivemind_memory.projections.ranking.curves import (
    DAILY_DECAY,
    PLOT_MAX_DAYS,
    CurvePoint,
    note_curve,
    tier_points,
)
from hivemind_memory.projections.state import tier_of
from hivemind_memory.projections.store.audit_trail import audit_event, audit_page
from hivemind_memory.projections.store.types import Store
from hivemind_memory.worker.audit.reproduce import ConfigHistory, NoteHistory, decode_served

CURVE_STEP_DAYS = 5
"""Days between two samples of the tier curves."""


class Curves(msgspec.Struct, frozen=True):
    """``GET /v1/ns/{ns}/curves``: each tier's recency multiplier beside "5 % a day"."""

    config_digest: str
    source: str
    """``worker``: the config the newest served query of the namespace ran under (the
    worker's own, from the config history); ``server``: this server's config (no query
    served yet, or its config is not in the history)."""
    config: dict[str, Any]
    daily_decay: float
    ages: list[int]
    tiers: dict[str, list[float]]
    """Tier (``short``, ``scratch``, ``longterm``, and ``five_percent``) -> multiplier at each
    of ``ages``."""


def config_in_force(r: Store, ns: str, fallback: RankingConfig) -> tuple[RankingConfig, str]:
    """The config the newest served query of ``ns`` ran under (its worker's own, without
    per-query overrides) and ``worker``; or ``fallback`` and ``server``."""
    page = audit_page(r, ns, None, 1)
    if page:
        x = decode_served(page[0].id.decode(), audit_event(page[0]))
        digest = x.event.base_digest or x.event.config_digest
        got = ConfigHistory.load(r, ns).get(digest)
        if not isinstance(got, str):
            return got, "worker"
    return fallback, "server"


def curves(r: Store, ns: str, fallback: RankingConfig) -> Curves:
    cfg, source = config_in_force(r, ns, fallback)
    return Curves(config_digest=cfg.digest(), source=source, config=msgspec.to_builtins(cfg),
                  daily_decay=DAILY_DECAY,
                  ages=list(range(0, PLOT_MAX_DAYS + 1, CURVE_STEP_DAYS)),
                  tiers=tier_points(cfg, PLOT_MAX_DAYS, CURVE_STEP_DAYS))


class NoteRecency(msgspec.Struct, frozen=True):
    """``GET /v1/ns/{ns}/notes/{note_id}/recency``: a note's recency from its creation to now
    (or its forgetting), with its uses and tier at each instant."""

    note_id: str
    config_digest: str
    tier: str
    uses: list[datetime]
    """When it was used (the ``at`` of each ``note.used`` event it folded)."""
    points: list[CurvePoint]


def note_recency(h: NoteHistory, cfg: RankingConfig, now: datetime) -> NoteRecency | None:
    """The recency curve of the note of ``h`` (None if it is not projected)."""
    n = h.note
    if n is None:
        return None
    used = sorted(datetime.fromisoformat(str(e["at"]).replace("Z", "+00:00"))
                  for _, e in h.events if e.get("type") == "note.used")[:max(n.uses, 0)]
    return NoteRecency(note_id=n.note_id, config_digest=cfg.digest(),
                       tier=tier_of(n.uses, n.kind, cfg), uses=used,
                       points=note_curve(n.created_at, n.kind, used, cfg, max(now, n.created_at)))
