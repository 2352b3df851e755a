"""``hivemind audit explain``: why a served query got these notes and not those.

What the audit entry recorded (``QueryServed.why``: the shown notes' signals, the strongest
left-out notes and the reason, counts per reason) is shown as it was written. With the log
(``derive``), the query is re-run exactly as ``audit reproduce`` re-runs it, on the state it
saw and under its recorded config, and every note that matched the query is accounted for:
shown (its place in the context), ``packed_out`` (with the best set that would have held it,
and what that set drops), ``over_budget``, ``below_min_relevance``, and the notes the agent
could not see: another agent's ``private`` note or a ``forgotten`` one (their relevance is
what they would have had were every note of the state visible, so they can be compared). The
seed's rule ("5 % a day" and a top-down fill) is run on the same candidates. A re-derivation
also says whether the recorded ``why`` is what the ranking gives again, and whether the
answer reproduces byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import msgspec
import numpy as np

from hivemind_memory.api_stub.protocol.messages import QueryRequest, QueryServed
from hivemind_memory.events.errors import QueryError
from hivemind_memory.projections.ranking.baseline import five_percent_fill, naive_score
from hivemind_memory.projections.ranking.calibrated import limit_for
from hivemind_memory.projections.ranking.columns import micros
from hivemind_memory.projections.ranking.config import RankingConfig
from hivemind_memory.projections.ranking.embedders import Embedder
from hivemind_memory.projections.ranking.filters import matches, parse_filter
from hivemind_memory.projections.ranking.index import build_index
from hivemind_memory.projections.ranking.packing import pack_positions
from hivemind_memory.projections.ranking.rank_result import (
    NoteSignals,
    Passage,
    RankResult,
    ScoredNote,
)
from hivemind_memory.projections.ranking.ranker import allowed_slots, rank_index
from hivemind_memory.projections.ranking.recency import SECONDS_PER_DAY
from hivemind_memory.projections.ranking.timewords import question_windows, spans_us
from hivemind_memory.projections.ranking.why import REASON_TEXT, Why
from hivemind_memory.projections.state import NoteState, tier_of
from hivemind_memory.projections.store.audit_trail import audit_event, audit_page
from hivemind_memory.projections.store.types import Store
from hivemind_memory.worker.audit.reproduce import LEGACY, Auditor, ServedEntry, decode_served
from hivemind_memory.worker.engine import run_rank, to_result, with_shown

MAX_ROWS = 1000
"""Most notes an explanation lists (shown first, then the strongest left out); the rest are
counted in ``omitted``. A note asked for by id is always answered."""
PAGE = 500
"""Audit entries read per round trip while looking for a query id (newest first)."""


class Considered(msgspec.Struct, frozen=True):
    """A note that matched the query, and what became of it."""

    note_id: str
    outcome: str
    """``shown`` or the reason it was left out (``projections.ranking.why.Reason``)."""
    detail: str
    """The outcome in words, with the figures that decided it."""
    position: int
    """Place in the context handed to the model (1 = first); 0 when not shown."""
    rank: int
    """Rank by score among the candidates (1 = strongest); 0 when not a candidate."""
    relevance: float
    recency: float
    score: float
    cost: int
    tier: str
    uses: int
    age_days: float
    created_at: datetime
    author: str
    scope: str
    text: str
    seed: bool
    """Taken by the seed's rule ("5 % a day" + top-down fill) from the same candidates."""
    seed_score: float
    """The seed's score: relevance x 0.95 ** age in days."""
    stands_for: list[str] = []
    """Near-identical notes this one stands for, not packed beside it (a shown note;
    ``RankingConfig.near_identical``)."""
    updates: list[str] = []
    """Older versions of the same fact this newer note won over (``RankingConfig.updates``)."""
    passage: Passage | None = None
    """Shown as a passage of a long note: its place in the note (``text`` is the passage's;
    ``RankingConfig.passage_tokens``)."""


class SeedRun(msgspec.Struct, frozen=True):
    """The seed's rule on the same candidates."""

    notes: list[str]
    """Chosen, in the order the fill took them."""
    used: int
    value: float
    """Sum of hivemind's scores of the notes it took (comparable with ``Derived.value``)."""
    stopped_at: str | None
    """The first note that did not fit (the fill stops there)."""


class Derived(msgspec.Struct, frozen=True):
    """What a re-run on the state the query saw gives."""

    identical: bool
    """The re-run's result bytes hash to the entry's ``result_digest``."""
    differences: list[str]
    causes: list[str]
    recorded_why: str
    """``matches`` (the ranking records the same ``why`` again), ``differs``, or ``absent``
    (the entry has none: written before it was recorded, or with it turned off)."""
    value: float
    """Sum of the shown notes' scores."""
    room: int
    """Budget left unused."""
    candidates: int
    notes: list[Considered]
    """Shown notes in context order, then every other matched note, strongest first."""
    omitted: int
    """Matched notes past ``MAX_ROWS`` not listed."""
    seed: SeedRun
    note: Considered | None = None
    """The note asked for (``--note``), wherever it is in the list."""
    note_absent: str = ""
    """Why the note asked for is not among the matched notes, when it is not."""


class Explanation(msgspec.Struct, frozen=True):
    """``hivemind audit explain --json`` and ``GET /v1/ns/{ns}/audit/{query_id}/explain``."""

    ns: str
    audit_id: str
    query_id: str
    agent: str
    text: str
    budget: int
    used: int
    method: str
    live: bool
    served_at: datetime
    as_of: datetime
    config_digest: str
    min_relevance: float | None
    """The ``min_relevance`` the query ran with (None: its config is not in the history)."""
    chosen: list[tuple[str, float]]
    """Note ids and scores in context order, as recorded."""
    recorded: Why | None
    """The entry's own ``why``, as written when it was served."""
    reasons: dict[str, str]
    """Each reason in words."""
    derived: Derived | None = None
    not_derived: str = ""
    """Why there is no ``derived`` part, when there is none."""


def find_served(r: Store, ns: str, query_id: str) -> ServedEntry | None:
    """The audit entry of ``query_id`` (newest first: the one just served is found at once)."""
    before: str | None = None
    while True:
        page = audit_page(r, ns, before, PAGE)
        if not page:
            return None
        for e in page:
            raw = audit_event(e)
            if query_id.encode() in raw:
                x = decode_served(e.id.decode(), raw)
                if x.event.query_id == query_id:
                    return x
        before = page[-1].id.decode()


@dataclass
class _Row:
    c: ScoredNote
    outcome: str
    position: int = 0
    rank: int = 0
    detail: str = ""
    shown: NoteSignals | None = None
    """The packed item as the result lists it (a shown row: its passage, what it stands
    for and what it updates)."""


def _fmt(x: float) -> str:
    return f"{x:.3f}"


def _packed_out_detail(c: ScoredNote, j: int, cands: list[ScoredNote], res: RankResult,
                       budget: int, cfg: RankingConfig) -> str:
    """A packed-out note: the best set that holds it, what that set drops, both values."""
    room = budget - res.used
    others = [i for i in range(len(cands)) if i != j]
    ids = [cands[i].note_id for i in others]
    costs = np.array([cands[i].cost for i in others], np.int64)
    vals = np.array([cands[i].score for i in others], np.float64)
    got = pack_positions(lambda k: [ids[i] for i in k.tolist()], costs, vals, budget - c.cost,
                         cfg.exact_max_cells)
    with_it = {ids[i] for i in got.at.tolist()}
    drops = [n.note_id for n in res.notes if n.note_id not in with_it]
    packed = sum(n.score for n in res.notes)
    head = (f"fits alone ({c.cost} of {budget} tokens) but only {room} were left; the best set "
            f"with it is worth {_fmt(c.score + got.total_value)}, the chosen set "
            f"{_fmt(packed)}")
    if drops:
        shown = ", ".join(drops[:5]) + (f" and {len(drops) - 5} more" if len(drops) > 5 else "")
        head += f" (it would drop {shown})"
    return head


def _invisible(notes: dict[str, NoteState], s: QueryServed, req: QueryRequest,
               cfg: RankingConfig, embedder: Embedder | None = None
               ) -> tuple[list[ScoredNote], dict[str, NoteState]]:
    """The notes the agent could not see that match the query, scored as if every note of
    the state were shared and live (so their figures compare with the candidates')."""
    hidden = {k: n for k, n in notes.items() if not (n.erased or n.redacted) and (
        n.forgotten or n.superseded_by is not None
        or (n.scope == "private" and n.agent != s.agent))}
    if not hidden:
        return [], hidden
    every = {k: msgspec.structs.replace(n, scope="shared", forgotten=False, superseded_by=None)
             for k, n in notes.items()}
    idx = build_index("what-if", every, embedder)
    cosine = None
    if cfg.relevance == "calibrated" and embedder is not None:
        got = idx.query_cosines(embedder.embed([req.text]))
        cosine = None if got is None else got[:, 0]
    allowed = allowed_slots(idx.cols, req.conditions(), micros(s.as_of), cfg)
    spans = (spans_us(question_windows(req.text, s.as_of, cfg.calibration))
             if cfg.calibration.time_window_weight > 0 else [])
    slots, rel = idx.relevance_slots(req.text, req.embedding, cfg, s.agent, None, cosine,
                                     limit_for(cfg, s.budget), allowed=allowed,
                                     windows=spans)
    # each hidden note on its own: a twin of a visible note is not merged into it here
    alone = msgspec.structs.replace(cfg, near_identical=0.0)
    res = rank_index(idx, slots, rel, agent=s.agent, now=s.as_of, budget=s.budget, cfg=alone,
                     explain=True, rendered=req.context, id_prefix=req.id_prefix,
                     allowed=allowed, query=req.text)
    return [c for c in res.candidates if c.note_id in hidden], hidden


def _considered(row: _Row, note: NoteState | None, seed: set[str]) -> Considered:
    c = row.c
    item: NoteSignals = row.shown or c
    return Considered(
        note_id=c.note_id, outcome=row.outcome, detail=row.detail, position=row.position,
        rank=row.rank, relevance=item.relevance, recency=item.recency, score=item.score,
        cost=item.cost,
        tier=c.tier, uses=c.uses, age_days=c.age_days, created_at=c.created_at,
        author=note.agent if note else "", scope=note.scope if note else "", text=item.text,
        seed=c.note_id in seed, seed_score=float(f"{naive_score(c):.6g}"),
        stands_for=list(item.stands_for), updates=list(item.updates), passage=item.passage)


def derive(auditor: Auditor, x: ServedEntry, note_id: str | None = None) -> Derived:
    """Re-run ``x`` on the state it saw and account for every note that matched."""
    s = x.event
    rep = auditor.reproduce_one(x)
    req, cfg, _ = auditor.inputs(s)
    idx, notes = auditor.states.of(s)
    # every candidate, and every note under min_relevance
    full = run_rank(idx, msgspec.structs.replace(req, explain=True), cfg, s.as_of,
                    why_limit=max(1, len(idx.cols)), embedder=auditor.embedder)
    recorded = "absent"
    if s.why is not None:
        again = run_rank(idx, req, cfg, s.as_of, why_limit=s.why.limit,
                         embedder=auditor.embedder)
        res = to_result(s.query_id, req, s.as_of, again, empty=not len(idx.cols))
        recorded = "matches" if with_shown(again.why, res) == s.why else "differs"
    cands = list(full.candidates)
    rank_of = {c.note_id: i for i, c in enumerate(cands, start=1)}
    by_id = {c.note_id: c for c in cands}
    rows: list[_Row] = []
    n_shown = len(full.notes)
    for p, n in enumerate(full.notes, start=1):
        rows.append(_Row(by_id[n.note_id], "shown", p, rank_of[n.note_id],
                         f"shown at position {p} of {n_shown} (rank {rank_of[n.note_id]} "
                         "by score)", shown=n))
    explained = 0
    for j, c in enumerate(cands):
        if c.chosen:
            continue
        if c.cost > s.budget:
            rows.append(_Row(c, "over_budget", 0, j + 1,
                             f"costs {c.cost} tokens, more than the whole budget of "
                             f"{s.budget}"))
            continue
        detail = f"fits alone ({c.cost} of {s.budget} tokens) but only {s.budget - full.used} " \
                 "were left; the chosen set is worth more"
        if explained < max(s.why.limit if s.why else 0, 20) or c.note_id == note_id:
            detail = _packed_out_detail(c, j, cands, full, s.budget, cfg)
            explained += 1
        rows.append(_Row(c, "packed_out", 0, j + 1, detail))
    below = [r for r in (full.why.left_out if full.why else [])
             if r.reason == "below_min_relevance"]
    for r in below:
        st = notes[r.note_id]
        rows.append(_Row(_scored(st, r.relevance, r.recency, r.score, r.cost, s.as_of, cfg),
                         "below_min_relevance", 0, 0,
                         f"relevance {r.relevance:.6f} is below min_relevance "
                         f"{cfg.min_relevance:g}"))
    hidden_scored, hidden = _invisible(notes, s, req, cfg, auditor.embedder)
    for c in hidden_scored:
        st = hidden[c.note_id]
        if st.forgotten:
            rows.append(_Row(c, "forgotten", 0, 0,
                             f"forgotten before the query (in the log up to {s.seen}); "
                             "visible, it would have scored " + _fmt(c.score)))
        elif st.superseded_by is not None:
            rows.append(_Row(c, "superseded", 0, 0,
                             f"superseded by {st.superseded_by} before the query (in the log "
                             f"up to {s.seen}); live, it would have scored " + _fmt(c.score)))
        else:
            rows.append(_Row(c, "private", 0, 0,
                             f"private to {st.agent}: only its author may retrieve it; "
                             "visible, it would have scored " + _fmt(c.score)))
    rows += _erased_rows(notes, s, cfg, {r.c.note_id for r in rows})
    shown_rows, rest = rows[:n_shown], rows[n_shown:]
    rest.sort(key=lambda r: (-r.c.score, -r.c.relevance, r.c.note_id))
    ordered = shown_rows + rest
    base = five_percent_fill(cands, s.budget)
    seed = {n.note_id for n in base.notes}
    listed = [_considered(r, notes.get(r.c.note_id), seed) for r in ordered[:MAX_ROWS]]
    asked: Considered | None = None
    absent = ""
    if note_id is not None:
        hit = next((r for r in ordered if r.c.note_id == note_id), None)
        if hit is not None:
            asked = _considered(hit, notes.get(note_id), seed)
        else:
            absent = _absent(note_id, notes, s)
    return Derived(
        identical=rep.identical, differences=rep.differences, causes=rep.causes,
        recorded_why=recorded, value=round(sum(n.score for n in full.notes), 6),
        room=s.budget - full.used, candidates=len(cands), notes=listed,
        omitted=max(0, len(ordered) - MAX_ROWS),
        seed=SeedRun(notes=[n.note_id for n in base.notes], used=base.used,
                     value=round(sum(n.score for n in base.notes), 6),
                     stopped_at=base.stopped_at.note_id if base.stopped_at else None),
        note=asked, note_absent=absent)


def _scored(n: NoteState, rel: float, rec: float, score: float, cost: int, now: datetime,
            cfg: RankingConfig) -> ScoredNote:
    """A below-``min_relevance`` note as a candidate row (its signals as recorded)."""
    age = max(0.0, (now - n.created_at).total_seconds() / SECONDS_PER_DAY)
    return ScoredNote(n.note_id, n.text, n.tokens, cost, score, rel, rec,
                      tier_of(n.uses, n.kind, cfg), n.uses, round(age, 6), n.created_at,
                      n.metadata, chosen=False)


def _erased_rows(notes: dict[str, NoteState], s: QueryServed, cfg: RankingConfig,
                 listed: set[str]) -> list[_Row]:
    """The notes the query showed whose content was erased since (the log holds their
    redacted form: no text to rank), with the signals the audit recorded."""
    shown = s.why.shown if s.why is not None else []
    out: list[_Row] = []
    for i, (nid, score) in enumerate(s.chosen):
        n = notes.get(nid)
        if n is None or nid in listed or not (n.redacted or n.erased):
            continue
        sig = shown[i] if i < len(shown) else None
        c = _scored(n, sig.relevance if sig else 0.0, sig.recency if sig else 0.0, score,
                    sig.cost if sig else n.tokens, s.as_of, cfg)
        out.append(_Row(c, "erased", 0, 0,
                        f"shown at position {i + 1} when served; its content was erased since "
                        "(the log keeps the note id and a digest of the content, no text)"))
    return out


def _absent(note_id: str, notes: dict[str, NoteState], s: QueryServed) -> str:
    n = notes.get(note_id)
    if n is not None and (n.erased or n.redacted):
        return (f"note {note_id} was erased: its content is gone from the log (the redacted "
                "events keep its id and a digest), so it matches nothing")
    if n is None:
        return (f"note {note_id} is not in the log up to {s.seen}"
                + (f" with at <= {s.as_of.isoformat()}" if s.requested_as_of else "")
                + ": it was created later (or never)")
    if s.id_prefix and not note_id.startswith(s.id_prefix):
        return f"note {note_id} is outside the query's id_prefix {s.id_prefix!r}"
    if s.filter and not matches(n.metadata, parse_filter(s.filter)):
        return f"note {note_id}'s metadata does not match the query's filter"
    if n.expires_at is not None and n.expires_at <= s.as_of:
        return f"note {note_id} expired at {n.expires_at.isoformat()}"
    return f"note {note_id} shares nothing with the query (relevance 0)"


def explain(r: Store, ns: str, fallback: RankingConfig, query_id: str,
            note_id: str | None = None, derive_it: bool = True) -> Explanation:
    """The explanation of one served query (``QueryError('not_found')`` if it has no entry)."""
    x = find_served(r, ns, query_id)
    if x is None:
        raise QueryError("not_found", f"no served query {query_id!r} in namespace {ns!r}")
    s = x.event
    auditor = Auditor(r, ns, fallback)
    got = auditor.history.get(s.config_digest)
    derived: Derived | None = None
    why_not = ""
    if not s.seen:
        why_not = LEGACY
    elif s.redacted:
        why_not = f"its query text was a version of note {s.redacted}, erased since"
    elif not derive_it:
        why_not = "only the recorded part was asked for"
    else:
        derived = derive(auditor, x, note_id)
    return Explanation(
        ns=ns, audit_id=x.audit_id, query_id=s.query_id, agent=s.agent, text=s.text,
        budget=s.budget, used=s.used, method=s.method, live=x.live, served_at=x.served_at,
        as_of=s.as_of, config_digest=s.config_digest,
        min_relevance=None if isinstance(got, str) else got.min_relevance,
        chosen=list(s.chosen), recorded=s.why, reasons=dict(REASON_TEXT), derived=derived,
        not_derived=why_not)


__all__ = ["MAX_ROWS", "Considered", "Derived", "Explanation", "SeedRun", "derive", "explain",
           "find_served"]
