"""``hivemind demo``: the whole flow in one process on the embedded store (no server), and for
each query, side by side, what "5 % a day" plus a top-down fill would have returned.

The sample log (``demo_data``) is ingested into ``memory://``, projected by a burst RQ worker
and queried through queued query jobs with ``--explain``, exactly as in production. The naive
baseline is computed here from the same candidates (same relevance): only the recency curve
and the fill differ, so the two bugs of the seed show on one screen.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import textwrap
from collections import Counter
from collections.abc import Sequence
from typing import IO, Any

import msgspec

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.messages import QueryResult
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.projections.ranking.baseline import (
    DAILY_DECAY,
    Baseline,
    five_percent_fill,
    naive_score,
    value,
)
from hivemind_memory.projections.ranking.rank_result import NoteSignals, ScoredNote
from hivemind_memory.projections.state import tier_of
from hivemind_memory.projections.store.connection import connect
from hivemind_memory.projections.store.ingest import ingest
from hivemind_memory.projections.store.readmodel import read_dead, read_notes
from hivemind_memory.worker import runtime
from hivemind_memory.worker.cli.demo_data import AS_OF, NS, sample_events
from hivemind_memory.worker.loop import run_worker

WIDTH = 80
"""The demo's text output fits this many columns."""
MAX_WHY = 4
"""Missed notes explained per query (the strongest ones)."""

ASKS: tuple[tuple[str, str, int], ...] = (
    ("coder", "redis persistence aof event log", 300),
    ("ops", "deploy rollback canary", 2500),
    ("ops", "redis persistence noeviction", 200),
    ("planner", "stripe webhook idempotent billing", 150),
    ("research", "context packing knapsack greedy", 200),
)
"""(agent, text, budget) of the demo's queries."""
__all__ = ["ASKS", "DAILY_DECAY", "Baseline", "compare", "five_percent_fill", "naive_score",
           "run_demo", "value"]


def _fmt_score(x: float) -> str:
    return f"{x:.3f}" if x >= 0.0005 else f"{x:.0e}"


def _row(pos: int, n: ScoredNote, score: float) -> str:
    return f"{pos:>2} {n.note_id:<19.19} {n.age_days:>4.0f} {n.cost:>4} {_fmt_score(score):>5}"


def _why(res: QueryResult, base: Baseline, cands: dict[str, ScoredNote]) -> list[str]:
    """Why the baseline differs: the strongest notes hivemind packed that it missed, and where
    its fill stopped."""
    theirs = {n.note_id for n in base.notes}
    rank_of = {c.note_id: i for i, c in enumerate(base.ranked, start=1)}
    missed = sorted((cands[n.note_id] for n in res.notes if n.note_id not in theirs),
                    key=lambda c: (-c.score, c.note_id))
    out = []
    for c in missed[:MAX_WHY]:
        out.append(f"  missed {c.note_id:<20.20} {c.age_days:>3.0f} d, {c.uses:>2} uses "
                   f"({c.tier}): 5%/day #{rank_of[c.note_id]}, x{DAILY_DECAY ** c.age_days:.0e}")
    if len(missed) > MAX_WHY:
        out.append(f"  ... and {len(missed) - MAX_WHY} more packed by hivemind, missed by 5%/day")
    if base.stopped_at is not None:
        s = base.stopped_at
        out.append(f"  the fill stopped at {s.note_id} ({s.cost} tok), "
                   f"{res.budget - base.used} of {res.budget} tokens unused")
    return out


def _clip(rows: list[str], head: int, tail: int) -> list[str]:
    """At most ``head + tail + 1`` rows: the first, a count of the hidden ones, the last."""
    if len(rows) <= head + tail + 1:
        return rows
    hidden = len(rows) - head - tail
    return [*rows[:head], f"   ... {hidden} more", *rows[len(rows) - tail:]]


def _key(n: NoteSignals) -> tuple[str, int]:
    """A packed item: a note, or one passage of it."""
    return n.note_id, -1 if n.passage is None else n.passage.index


def compare(res: QueryResult) -> tuple[Baseline, list[str]]:
    """The baseline for a result (needs ``candidates``) and the side-by-side text lines."""
    cands = [msgspec.convert(c, ScoredNote) for c in res.candidates or []]
    by_id: dict[str, ScoredNote] = {}
    for c in cands:  # by score: a long note's best passage names it
        by_id.setdefault(c.note_id, c)
    by_key = {_key(c): c for c in cands}
    base = five_percent_fill(cands, res.budget)
    ours = [by_key[_key(n)] for n in res.notes]
    left = [f"hivemind ({res.method}, context order)",
            "ctx note                 age  tok score"]
    left += _clip([_row(i, n, n.score) for i, n in enumerate(ours, start=1)], 6, 5)
    left.append(f"{len(ours)} notes, {res.used} tok, value {value(ours):.3f}")
    right = ["5%/day + top-down fill (rank order)",
             "  # note                age  tok 5%/d"]
    right += _clip([_row(i, n, naive_score(n)) for i, n in enumerate(base.notes, start=1)],
                   11, 0)
    right.append(f"{len(base.notes)} notes, {base.used} tok, value {value(base.notes):.3f}")
    lines = []
    for i in range(max(len(left), len(right))):
        a = left[i] if i < len(left) else ""
        b = right[i] if i < len(right) else ""
        lines.append(f"{a:<39} | {b}".rstrip())
    lines += _why(res, base, by_id)
    return base, [ln if len(ln) <= WIDTH else ln[:WIDTH - 3] + "..." for ln in lines]


def _side_json(notes: Sequence[ScoredNote], used: int) -> dict[str, Any]:
    return {"notes": [{"note_id": n.note_id, "tokens": n.tokens, "cost": n.cost,
                       "score": n.score, "naive_score": float(f"{naive_score(n):.6g}"),
                       "relevance": n.relevance, "age_days": n.age_days, "uses": n.uses,
                       "tier": n.tier} for n in notes],
            "used": used, "value": round(value(notes), 6)}


def run_demo(config_path: str | None, as_json: bool = False, out: IO[str] | None = None,
             store_url: str = "memory://") -> int:
    """Ingest the sample into the embedded store, project it with a burst worker, run the
    queries and print each beside the naive baseline (text in 80 columns, or one JSON object).
    ``memory://PATH`` keeps the log on disk (a second run replays it; the repeated events are
    applied once)."""
    out = out or sys.stdout
    if not store_url.startswith("memory://"):
        print("hivemind demo: --store must be memory:// or memory://PATH", file=sys.stderr)
        return 2
    s = Settings.from_env({}, redis_url=store_url, config_path=config_path)
    rt = runtime.build(s, connect(s.redis_url))
    runtime.install(rt)
    events = sample_events()
    fd, path = tempfile.mkstemp(suffix=".jsonl")
    with os.fdopen(fd, "w") as fh:
        for e in events:
            fh.write(json.dumps(e) + "\n")
    try:
        rep = ingest(rt.store, path, on_error=lambda m: print(m, file=sys.stderr),
                     on_chunk=Client(rt.store, rt.rq, settings=rt.settings).schedule)
    finally:
        os.unlink(path)
    code = run_worker(rt, burst=True)
    notes = read_notes(rt.store, NS)
    dead = read_dead(rt.store, NS)
    client = Client(rt.store, settings=s)
    ids = [client.submit_query(NS, text, budget, agent=agent, as_of=AS_OF, explain=True)
           for agent, text, budget in ASKS]
    code = max(code, run_worker(rt, burst=True))
    results = []
    for qid in ids:
        body = client.result_json(qid, timeout=30)
        obj = msgspec.json.decode(body)
        if "error" in obj:
            print(f"hivemind: demo query {qid} failed: {obj['error']}", file=sys.stderr)
            return 1
        results.append(msgspec.json.decode(body, type=QueryResult))
    agents = {n.agent for n in notes.values()}
    tiers = Counter(tier_of(n.uses, n.kind, rt.cfg) for n in notes.values() if not n.forgotten)
    if as_json:
        doc: dict[str, Any] = {
            "ns": NS, "as_of": AS_OF.isoformat().replace("+00:00", "Z"),
            "events": rep.appended, "notes": len(notes), "agents": sorted(agents),
            "forgotten": sum(n.forgotten for n in notes.values()), "dead_letters": len(dead),
            "tiers": dict(sorted(tiers.items())), "queries": []}
        for (agent, text, budget), res in zip(ASKS, results, strict=True):
            base, _ = compare(res)
            every = [msgspec.convert(c, ScoredNote) for c in res.candidates or []]
            cands = {_key(c): c for c in every}
            doc["queries"].append({
                "query_id": res.query_id, "agent": agent, "text": text, "budget": budget,
                "candidates": len(every),
                "hivemind": {"method": res.method,
                             **_side_json([cands[_key(n)] for n in res.notes], res.used)},
                "baseline": {"stopped_at": base.stopped_at.note_id if base.stopped_at else None,
                             **_side_json(base.notes, base.used)}})
        out.write(json.dumps(doc, indent=2) + "\n")
        return code
    w = out.write
    w(f"hivemind demo: {rep.appended} events, {len(notes)} notes by {len(agents)} agents over "
      f"two years\n(embedded store, one RQ worker; as of {AS_OF:%Y-%m-%d %H:%M} UTC)\n")
    w("  tiers: " + ", ".join(f"{k} {v}" for k, v in sorted(tiers.items()))
      + f"; forgotten {sum(n.forgotten for n in notes.values())}; "
      f"dead letters {len(dead)}\n")
    for d in dead[:3]:
        w("  " + textwrap.shorten(f"dead letter: {d.reason}", WIDTH - 2, placeholder=" ...")
          + "\n")
    w("\nEach query below is answered twice from the same candidates (same relevance):\n"
      f"left, hivemind: recency by tier (half-life {rt.cfg.short.half_life_days:g} d, a floor; "
      f"used {rt.cfg.longterm_uses}x: no decay)\n"
      "and the best set that fits the budget. Right, the seed: 5% a day for every note,\n"
      "sorted by score and filled top-down. value = sum of hivemind scores.\n"
      "ctx = position in the context handed to the model (strongest at both ends),\n"
      "not a rank; age in days, tok = cost in tokens.\n")
    for i, ((agent, text, budget), res) in enumerate(zip(ASKS, results, strict=True), start=1):
        head = f"-- {i}. {text!r}  agent={agent}  budget={budget} "
        w("\n" + head + "-" * max(0, WIDTH - len(head)) + "\n")
        _, lines = compare(res)
        for ln in lines:
            w(ln + "\n")
    w("\nNext: hivemind curves (the decay curves); hivemind demo --json (for machines)\n")
    return code
