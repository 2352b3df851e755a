"""Answering queries in the worker: catch up, refresh the index, rank, write the result key
and the audit event together."""

from __future__ import annotations

import time
from collections import OrderedDict
from datetime import datetime

import msgspec
import structlog

from hivemind_memory.api_stub.protocol.messages import (
    Envelope,
    QueryRequest,
    QueryResult,
    effective_config,
    encode,
    error_json,
    ns_of,
    parse_request,
    utcnow,
)
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.events.errors import CatchUpTimeout, QueryError
from hivemind_memory.events.positions import parse_pos
from hivemind_memory.projections.config import RankingConfig
from hivemind_memory.projections.index import NamespaceIndex, build_index
from hivemind_memory.projections.rank import RankResult, rank
from hivemind_memory.projections.store import results
from hivemind_memory.projections.store.index_loader import refresh_index
from hivemind_memory.projections.store.rebuild import fold_log
from hivemind_memory.projections.store.types import Store
from hivemind_memory.worker.projector import ensure_projected

log = structlog.get_logger("hivemind.query")
AS_OF_CACHE = 4
"""How many ``--as-of`` folds a worker keeps (keyed by namespace, position, time)."""


class QueryEngine:
    """Per-process query state: the live indexes and a small cache of as-of folds."""

    def __init__(self, r: Store, cfg: RankingConfig, settings: Settings) -> None:
        self.r = r
        self.cfg = cfg
        self.settings = settings
        self.live: dict[str, NamespaceIndex] = {}
        self.as_of: OrderedDict[tuple[str, str, datetime], NamespaceIndex] = OrderedDict()

    def index_for(self, req: QueryRequest, position: str) -> NamespaceIndex:
        """The index the query must see: live (caught up to its position) or as of a time."""
        ns = req.ns
        if req.as_of is None:
            idx = self.live.get(ns)
            if idx is None:
                idx = self.live[ns] = NamespaceIndex(ns)
            refresh_index(self.r, idx)
            return idx
        key = (ns, position, req.as_of)
        hit = self.as_of.get(key)
        if hit is not None:
            self.as_of.move_to_end(key)
            return hit
        rb = fold_log(self.r, ns, until=parse_pos(position), as_of=req.as_of)
        idx = build_index(ns, rb.projection.notes)
        self.as_of[key] = idx
        while len(self.as_of) > AS_OF_CACHE:
            self.as_of.popitem(last=False)
        return idx

    def answer(self, env: Envelope) -> tuple[bytes, QueryResult | None, str]:
        """The result (or error) JSON of one query, and the digest of the config it used.
        Never raises for a bad request."""
        digest = self.cfg.digest()
        try:
            req = parse_request(env.request)
            cfg = effective_config(self.cfg, req.config)
            digest = cfg.digest()
            pos = parse_pos(env.position)
            if req.as_of is None:
                ensure_projected(self.r, req.ns, pos, self.settings)
            idx = self.index_for(req, env.position)
            now = req.as_of if req.as_of is not None else utcnow()
            res = run_rank(idx, req, cfg, now)
        except QueryError as exc:
            return error_json(env.query_id, exc.code, exc.message), None, digest
        except CatchUpTimeout as exc:
            return error_json(env.query_id, "catch_up_timeout", str(exc)), None, digest
        out = to_result(env.query_id, req, now, res)
        return encode(out), out, digest

    def serve(self, envelopes: list[Envelope]) -> dict[str, int]:
        """Answer each query, writing result, done marker and audit event per query."""
        ok = failed = 0
        ttl = self.settings.result_ttl_seconds
        for env in envelopes:
            t0 = time.perf_counter()
            digest = self.cfg.digest()
            try:
                body, res, digest = self.answer(env)
            except Exception as exc:  # one broken query must not take the batch down
                log.exception("query_failed", query_id=env.query_id)
                body, res = error_json(env.query_id, "internal", f"{type(exc).__name__}: "
                                       f"{exc}"), None
            ns = ns_of(env.query_id)
            write_result(self.r, ns, env.query_id, body, res, digest, env.position, ttl)
            ok += res is not None
            failed += res is None
            log.info("query_served", query_id=env.query_id, ok=res is not None,
                     notes=len(res.notes) if res else 0,
                     duration_ms=round((time.perf_counter() - t0) * 1000, 2))
        return {"ok": ok, "failed": failed}


def run_rank(idx: NamespaceIndex, req: QueryRequest, cfg: RankingConfig,
             now: datetime) -> RankResult:
    """Relevance over the index, then the pure ranking pipeline."""
    rel = idx.relevance(req.text, req.embedding, cfg, req.agent)
    return rank((idx.notes[k] for k in rel), rel, agent=req.agent, now=now,
                budget=req.budget, cfg=cfg, explain=req.explain)


def to_result(query_id: str, req: QueryRequest, now: datetime, res: RankResult) -> QueryResult:
    """The contract's result object."""
    notes = [n.signals() for n in res.notes]
    return QueryResult(query_id=query_id, ns=req.ns, agent=req.agent, text=req.text,
                       as_of=now, budget=req.budget, used=res.used, method=res.method,
                       notes=notes, upper_bound=res.upper_bound,
                       candidates=list(res.candidates) if req.explain else None)


class QueryServed(msgspec.Struct, frozen=True, tag="query.served", tag_field="type"):
    """Audit event: what an agent was shown, when, and under which config."""

    query_id: str
    agent: str
    text: str
    as_of: datetime
    budget: int
    position: str
    config_digest: str
    method: str
    chosen: list[tuple[str, float]]


def write_result(r: Store, ns: str, query_id: str, body: bytes, res: QueryResult | None,
                 config_digest: str, position: str, ttl: int) -> None:
    """Result key (TTL), done marker and audit event in one MULTI (one hash slot)."""
    p = r.pipeline(transaction=True)
    results.stage_result(p, ns, query_id, body, ttl)
    if res is not None:
        ev = QueryServed(query_id=query_id, agent=res.agent, text=res.text, as_of=res.as_of,
                         budget=res.budget, position=position, config_digest=config_digest,
                         method=res.method, chosen=[(n.note_id, n.score) for n in res.notes])
        results.stage_audit(p, ns, encode(ev))
    p.execute()
