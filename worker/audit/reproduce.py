"""Audit replay: prove what an agent was shown by re-running a served query exactly as it ran.

A ``query.served`` event records everything the answer depended on: the log position of the
state it was ranked on (``seen``), ``now`` (``as_of``), the config digest (the config itself is
in the namespace's config history), the request (agent, text, budget, explain, overrides, the
embedding's digest) and the SHA-256 of the result bytes. Reproduction folds the log up to
``seen`` (a live query: every entry up to it, whatever its ``at``, since the agent saw the log
up to a position and a back-dated note ingested later must not leak in; an as-of query: the
entries up to its position with ``at <= as_of``, as the worker did), then runs the worker's own
ranking path (``engine.run_rank`` / ``engine.to_result``) and compares the bytes.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import msgspec

from hivemind_memory.api_stub.protocol.messages import (
    QueryRequest,
    QueryResult,
    QueryServed,
    digest_bytes,
    effective_config,
    encode,
)
from hivemind_memory.events.errors import QueryError
from hivemind_memory.events.positions import ZERO, Position, parse_pos
from hivemind_memory.events.schema import CONTENT_EVENTS, Event
from hivemind_memory.projections.ranking.config import (
    RankingConfig,
    config_from_json,
    filed_digests,
    filed_form,
)
from hivemind_memory.projections.ranking.embedders import Embedder, embedder_for
from hivemind_memory.projections.ranking.index import NamespaceIndex, build_index
from hivemind_memory.projections.reduce import Projection, Rejected, Undecodable, apply_event
from hivemind_memory.projections.state import NoteState
from hivemind_memory.projections.store import audit_trail as audit_store
from hivemind_memory.projections.store.log import iter_all, read_after
from hivemind_memory.projections.store.readmodel import decode_entry, read_notes
from hivemind_memory.projections.store.rebuild import fold_entries, fold_log
from hivemind_memory.projections.store.types import Store
from hivemind_memory.worker.engine import run_rank, to_result

_served = msgspec.json.Decoder(QueryServed).decode
SINCE_SLACK_MS = 300_000
"""``audit list --since`` stops scanning at entries appended this long before ``since``
(workers' clocks and the server's may differ a little; entries are in append order)."""
LEGACY = "served before audit replay recorded its inputs (no log position, config or now)"
"""Cause given for audit events written by versions that did not record what replay needs."""


@dataclass(frozen=True, slots=True)
class ServedEntry:
    """One audit entry: its id in the audit stream and the decoded event."""

    audit_id: str
    event: QueryServed

    @property
    def live(self) -> bool:
        return self.event.requested_as_of is None

    @property
    def served_at(self) -> datetime:
        """When it was served (the audit entry's time for events that do not record it)."""
        if self.event.served_at is not None:
            return self.event.served_at
        return self.event.as_of if self.live else _entry_time(self.audit_id)


def _entry_time(entry_id: str) -> datetime:
    return datetime.fromtimestamp(parse_pos(entry_id).ms / 1000, UTC)


def decode_served(audit_id: str, raw: bytes) -> ServedEntry:
    """An audit entry's event; ``QueryError('bad_audit', ...)`` names the entry if unreadable."""
    try:
        return ServedEntry(audit_id, _served(raw))
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise QueryError("bad_audit", f"audit entry {audit_id}: unreadable: {exc}") from exc


def all_served(r: Store, ns: str) -> list[ServedEntry]:
    """Every served query of the namespace, oldest first."""
    return [decode_served(e.id.decode(), audit_store.audit_event(e))
            for e in audit_store.iter_audit(r, ns)]


def list_served(r: Store, ns: str, *, agent: str | None = None, since: datetime | None = None,
                until: datetime | None = None, before: str | None = None,
                limit: int = 20) -> tuple[list[ServedEntry], str | None]:
    """One page of served queries, newest first, filtered; and the audit id to pass as
    ``before`` for the next page (None: no more)."""
    out: list[ServedEntry] = []
    cursor = before
    while len(out) < limit:
        page = audit_store.audit_page(r, ns, cursor, max(limit * 2, 100))
        if not page:
            return out, None
        for e in page:
            cursor = e.id.decode()
            s = decode_served(cursor, audit_store.audit_event(e))
            t = s.served_at
            if agent is not None and s.event.agent != agent:
                continue
            if since is not None and t < since:
                if parse_pos(cursor).ms < since.timestamp() * 1000 - SINCE_SLACK_MS:
                    return out, None  # appended long before ``since``: so is the rest
                continue
            if until is not None and t > until:
                continue
            out.append(s)
            if len(out) == limit:
                break
    more = audit_store.audit_page(r, ns, cursor, 1) if cursor else []
    return out, cursor if more else None


class ConfigHistory:
    """The namespace's config history, checked: an entry must hash to its digest."""

    def __init__(self, filed: Sequence[tuple[str, bytes]]) -> None:
        self._ok: dict[str, RankingConfig] = {}
        self.problems: dict[str, str] = {}
        for d, data in filed:  # every entry filed under a digest must hash to it
            try:
                cfg = config_from_json(data)
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                self.problems[d] = f"config history entry {d} is unreadable: {exc}"
                continue
            if d not in filed_digests(cfg, data) or not filed_form(cfg, data):
                self.problems[d] = (f"config history entry {d} was altered: its content "
                                    f"hashes to {cfg.digest()}")
                continue
            self._ok.setdefault(d, cfg)

    @classmethod
    def load(cls, r: Store, ns: str) -> ConfigHistory:
        return cls(audit_store.read_configs(r, ns))

    def get(self, digest: str) -> RankingConfig | str:
        """The config with ``digest``, or why it cannot be had."""
        if digest in self._ok:
            return self._ok[digest]
        return self.problems.get(digest, f"config {digest} is missing from the config history")


class States:
    """The ranking state each served query saw, rebuilt from the log.

    The log is read once, up to the newest position asked for, and its decoded entries are
    kept for the run (memory grows with the log read, which is the price of not folding it
    again for every as-of query). Live states are folded incrementally (queries are visited
    in log order, and the index is updated note by note as the worker's live index is);
    as-of states are folds of a prefix filtered by ``at`` (``rebuild.fold_entries``, the
    worker's own rule), the last few kept.
    """

    def __init__(self, r: Store, ns: str, chunk: int = 5000,
                 embedder: Embedder | None = None) -> None:
        self.r, self.ns, self.chunk = r, ns, chunk
        self.embedder = embedder
        """Embeds the notes as the worker did (derived data: recomputed from the texts)."""
        self.entries: list[tuple[str, Event | Undecodable, bytes]] = []
        self.positions: list[Position] = []
        self._reset()
        self._as_of: dict[tuple[Position, datetime], tuple[NamespaceIndex,
                                                           dict[str, NoteState]]] = {}

    def _reset(self) -> None:
        self.proj = Projection()
        self.pos = ZERO
        self.fed = 0
        self.idx = build_index(self.ns, {})

    def _read(self, pos: Position) -> int:
        """Read the log up to ``pos``; the number of entries at or before it."""
        while not self.positions or self.positions[-1] < pos:
            after = self.positions[-1] if self.positions else ZERO
            got = read_after(self.r, self.ns, after, self.chunk)
            if not got:
                break
            for eid, fields in got:
                ev, raw = decode_entry(fields, self.ns)
                self.entries.append((eid.decode(), ev, raw))
                self.positions.append(parse_pos(eid))
        return bisect.bisect_right(self.positions, pos)

    def live(self, pos: Position) -> tuple[NamespaceIndex, dict[str, NoteState]]:
        """Index and notes of every log entry up to ``pos``."""
        if pos < self.pos:
            self._reset()
        n = self._read(pos)
        for i in range(self.fed, n, self.chunk):
            res = self.proj.feed(self.entries[i:min(i + self.chunk, n)])
            self.idx.update(res.notes.values(), self.positions[min(i + self.chunk, n) - 1],
                            ZERO)
            self.idx.embed_missing(self.embedder)
        self.fed = max(self.fed, n)
        self.pos = max(self.pos, pos)
        return self.idx, self.proj.notes

    def as_of(self, pos: Position, as_of: datetime
              ) -> tuple[NamespaceIndex, dict[str, NoteState]]:
        """Index and notes of the entries up to ``pos`` with ``at <= as_of``."""
        key = (pos, as_of)
        hit = self._as_of.get(key)
        if hit is None:
            n = self._read(pos)
            rb = fold_entries(self.entries[:n], as_of=as_of, chunk=self.chunk)
            hit = (build_index(self.ns, rb.projection.notes, self.embedder),
                   rb.projection.notes)
            if len(self._as_of) >= 4:
                self._as_of.pop(next(iter(self._as_of)))
            self._as_of[key] = hit
        return hit

    def of(self, s: QueryServed) -> tuple[NamespaceIndex, dict[str, NoteState]]:
        """The state ``s`` was ranked on."""
        pos = parse_pos(s.seen)
        if s.requested_as_of is None:
            return self.live(pos)
        return self.as_of(pos, s.requested_as_of)


def log_order(served: Iterable[ServedEntry]) -> list[ServedEntry]:
    """Served queries ordered so the live fold only moves forward (then by audit id)."""
    return sorted(served, key=lambda x: (parse_pos(x.event.seen), x.audit_id))


@dataclass
class Reproduction:
    """The outcome of re-running one served query."""

    served: ServedEntry
    identical: bool
    differences: list[str] = field(default_factory=list)
    causes: list[str] = field(default_factory=list)
    result: QueryResult | None = None
    legacy: bool = False
    erased: list[str] = field(default_factory=list)
    """Notes whose content was in the state the query saw and was erased since: the answer
    cannot be reproduced by design (status ``erased``, not a difference)."""


class ReproductionView(msgspec.Struct, frozen=True):
    """One reproduced query as ``audit reproduce --json`` prints it (and the HTTP API)."""

    query_id: str
    audit_id: str
    identical: bool
    legacy: bool
    differences: list[str]
    causes: list[str]
    erased: list[str] = []
    """Non-empty: the answer does not reproduce because these notes were erased since
    (status ``erased``; not counted as different)."""


def view_of(rep: Reproduction) -> ReproductionView:
    return ReproductionView(query_id=rep.served.event.query_id, audit_id=rep.served.audit_id,
                            identical=rep.identical, legacy=rep.legacy,
                            differences=rep.differences, causes=rep.causes,
                            erased=rep.erased)


class ReproduceSummary(msgspec.Struct, frozen=True):
    """``POST /v1/ns/{ns}/audit/reproduce``: what ``hivemind audit reproduce`` reports."""

    ns: str
    ok: bool
    """Every query identical (or ``erased``) and none missing (the CLI's exit status 0)."""
    identical: int
    different: int
    legacy: int
    """Served before audit replay recorded its inputs: skipped (``--all`` only; a legacy
    query asked for by id counts as different)."""
    not_found: list[str]
    """Query ids asked for that are not in the namespace's audit."""
    reproductions: list[ReproductionView]
    erased: int = 0
    """Answers that held (or were ranked among) notes erased since: not reproducible by
    design, reported apart; they do not make ``ok`` false (an erasure is an admin's
    recorded act, the ``note.erased`` stays in the log)."""


def reproduce_queries(r: Store, ns: str, fallback: RankingConfig,
                      query_ids: Sequence[str] | None,
                      on_each: Callable[[Reproduction], None] | None = None
                      ) -> ReproduceSummary:
    """Re-run the served queries ``query_ids`` (None: all of them) in log order; ``on_each``
    sees each reproduction as it is made (the CLI prints them as they come)."""
    served = all_served(r, ns)
    missing: list[str] = []
    if query_ids is not None:
        wanted = set(query_ids)
        found = {x.event.query_id for x in served}
        missing = [q for q in dict.fromkeys(query_ids) if q not in found]
        served = [x for x in served if x.event.query_id in wanted]
    auditor = Auditor(r, ns, fallback)
    same = differ = legacy = erased = 0
    views: list[ReproductionView] = []
    for rep in auditor.reproduce(served):
        if rep.legacy and query_ids is None:
            legacy += 1
        elif rep.erased:
            erased += 1
        elif rep.identical:
            same += 1
        else:
            differ += 1
        views.append(view_of(rep))
        if on_each is not None:
            on_each(rep)
    return ReproduceSummary(ns=ns, ok=not differ and not missing, identical=same,
                            different=differ, legacy=legacy, not_found=missing,
                            reproductions=views, erased=erased)


def request_of(s: QueryServed, ns: str, embedding: list[float] | None) -> QueryRequest:
    """The request a served query ran."""
    return QueryRequest(ns=ns, text=s.text, budget=s.budget, agent=s.agent,
                        as_of=s.requested_as_of, explain=s.explain, embedding=embedding,
                        config=s.overrides, context=s.context, id_prefix=s.id_prefix,
                        filter=s.filter)


class Auditor:
    """Reproduces a namespace's served queries (and sweeps them, ``worker.audit.config_sweep``)."""

    def __init__(self, r: Store, ns: str, fallback: RankingConfig,
                 embedder: Embedder | Literal["config"] | None = "config") -> None:
        self.r, self.ns = r, ns
        self.fallback = fallback
        """The config a query is re-run under when its own is missing from the history."""
        self.embedder = embedder_for(fallback.embedder) if embedder == "config" else embedder
        """The embedder re-runs use: this worker's own (``fallback``'s), never one a filed
        config names (a filed config comes from Redis; a plugin spec would import code)."""
        self.embedder_digest = "" if self.embedder is None else self.embedder.digest()
        self.history = ConfigHistory.load(r, ns)
        self.embeddings: dict[str, bytes | None] = {}
        """Filed embeddings by digest (None: an entry under it does not hash to it)."""
        self.erased_embeddings = audit_store.redacted_embeddings(r, ns)
        """Filed embeddings an erasure emptied: digest -> the erased note."""
        for d, raw in audit_store.read_embeddings(r, ns):
            if d in self.erased_embeddings:
                continue
            ok = digest_bytes(raw)[:32] == d and self.embeddings.get(d, raw) is not None
            self.embeddings[d] = raw if ok else None
        self.states = States(r, ns, embedder=self.embedder)
        self._current: dict[str, NoteState] | None = None
        self._erased: list[str] | None = None

    def current_notes(self) -> dict[str, NoteState]:
        """The live read model (for 'forgotten since' causes), read once."""
        if self._current is None:
            self._current = read_notes(self.r, self.ns)
        return self._current

    def erased_ids(self) -> list[str]:
        """The notes the live read model has erased (sorted), read once."""
        if self._erased is None:
            self._erased = sorted(n for n, st in self.current_notes().items() if st.erased)
        return self._erased

    def erased_since(self, notes: Mapping[str, NoteState]) -> list[str]:
        """Notes of a state a query saw whose content was there then (folded, not erased yet,
        not forgotten or superseded) and is erased now: the log holds their redacted form."""
        out: list[str] = []
        for nid in self.erased_ids():
            n = notes.get(nid)
            if n is not None and not n.erased and not n.forgotten and n.superseded_by is None:
                out.append(nid)
        return out

    def erased_inputs(self, s: QueryServed) -> dict[str, str]:
        """The query's own inputs an erasure removed (its text, its filed embedding, as its
        audit entry and the embedding entry record): erased note -> what went."""
        out: dict[str, str] = {}
        if s.redacted:
            out[s.redacted] = (f"query text was a version of note {s.redacted}, erased since"
                               if not s.text else f"query filter named a metadata value of "
                               f"note {s.redacted}, erased since")
        nid = self.erased_embeddings.get(s.embedding_digest) if s.embedding_digest else None
        if nid is not None:
            out.setdefault(nid, f"query embedding was note {nid}'s, erased since")
        return out

    def inputs(self, s: QueryServed) -> tuple[QueryRequest, RankingConfig, list[str]]:
        """The request and the config to re-run ``s`` with, and any cause already known."""
        causes: list[str] = []
        emb: list[float] | None = None
        if s.embedding_digest:
            raw = self.embeddings.get(s.embedding_digest)
            if raw is None:
                causes.append(f"query embedding {s.embedding_digest} is missing or altered")
            else:
                emb = msgspec.json.decode(raw, type=list[float])
        req = request_of(s, self.ns, emb)
        cfg, more = self.config_of(s)
        return req, cfg, causes + more

    def config_of(self, s: QueryServed) -> tuple[RankingConfig, list[str]]:
        """The config to re-run ``s`` under, and what is wrong with its recorded inputs
        besides the request (the config history, the log position it saw)."""
        causes: list[str] = []
        got = self.history.get(s.config_digest)
        if isinstance(got, str):
            cfg = effective_config(self.fallback, s.overrides)
            causes.append(f"{got}; re-ran under the current config {cfg.digest()} "
                          "(config changed)")
        else:
            cfg = got
        if s.seen and parse_pos(s.seen) != ZERO and \
                not audit_store.log_entry_exists(self.r, self.ns, parse_pos(s.seen)):
            causes.append(f"log rewritten: no entry at position {s.seen} any more")
        return cfg, causes

    def rerun(self, s: QueryServed, req: QueryRequest, cfg: RankingConfig
              ) -> tuple[QueryResult, dict[str, NoteState]]:
        """Run ``req`` under ``cfg`` on the state ``s`` saw, at the time it was served."""
        idx, notes = self.states.of(s)
        return to_result(s.query_id, req, s.as_of,
                         run_rank(idx, req, cfg, s.as_of, embedder=self.embedder),
                         empty=not len(idx.cols)), notes

    def reproduce(self, served: Sequence[ServedEntry]) -> Iterator[Reproduction]:
        """Re-run each served query (in log order, so the log is read once)."""
        for x in log_order(served):
            yield self.reproduce_one(x)

    def reproduce_one(self, x: ServedEntry) -> Reproduction:
        s = x.event
        if not s.seen:
            return Reproduction(x, identical=False, causes=[LEGACY], legacy=True)
        lost = self.erased_inputs(s)
        if lost:  # cannot be re-run: what it asked was erased with the note
            _, causes = self.config_of(s)
            if causes:  # other inputs damaged too: not the erasure alone
                return Reproduction(x, identical=False, causes=[*lost.values(), *causes],
                                    differences=["cannot re-run: its query was erased, and "
                                                 "other recorded inputs are damaged"])
            return Reproduction(x, identical=False, causes=list(lost.values()),
                                erased=sorted(lost))
        req, cfg, causes = self.inputs(s)
        res, notes = self.rerun(s, req, cfg)
        body = encode(res)
        diffs = compare(s, res)
        if not diffs and digest_bytes(body) != s.result_digest:
            diffs.append("result bytes differ (same notes, order, scores, used and method; "
                         "a candidate or another field changed)")
        if diffs and not causes:
            gone = self.erased_since(notes)
            if gone:  # the content it was ranked on was erased since: by design, not tampering
                return Reproduction(x, identical=False, differences=diffs,
                                    causes=[f"note {n} erased since" for n in gone],
                                    result=res, erased=gone)
        if diffs:
            now = self.embedder_digest if cfg.relevance == "calibrated" else ""
            if now != s.embedder_digest:
                causes.append(f"embedder changed: served with {s.embedder_digest or 'none'}, "
                              f"re-ran with {now or 'none'}")
            causes += self._note_causes(s, res, notes)
        elif causes:
            # a damaged input fails the proof even when the re-run happens to agree
            diffs.append("same answer, but not from intact inputs (see causes)")
        return Reproduction(x, identical=not diffs, differences=diffs, causes=causes,
                            result=res)

    def _note_causes(self, s: QueryServed, res: QueryResult,
                     notes: Mapping[str, NoteState]) -> list[str]:
        out: list[str] = []
        now_ids = {n.note_id for n in res.notes}
        current = self.current_notes()
        for nid, _ in s.chosen:
            if nid in now_ids:
                continue
            n = notes.get(nid)
            if n is None:
                out.append(f"note {nid} is not in the log up to {s.seen} (log rewritten)")
            elif n.forgotten:
                out.append(f"note {nid} is forgotten in the log before {s.seen} "
                           "(log rewritten)")
            cur = current.get(nid)
            if cur is not None and cur.forgotten and (n is None or not n.forgotten):
                out.append(f"note {nid} forgotten since")
        return out


def compare(s: QueryServed, res: QueryResult) -> list[str]:
    """Differences between what was served and a re-run: notes out and in, order, scores,
    tokens used, method."""
    out: list[str] = []
    was = [nid for nid, _ in s.chosen]
    now = [n.note_id for n in res.notes]
    gone = [n for n in was if n not in set(now)]
    new = [n for n in now if n not in set(was)]
    if gone:
        out.append("notes out: " + ", ".join(gone))
    if new:
        out.append("notes in: " + ", ".join(new))
    if not gone and not new and was != now:
        out.append(f"order changed: was {' '.join(was)}, now {' '.join(now)}")
    if was == now:  # position by position: a long note's passages share its id
        for (nid, score), n in zip(s.chosen, res.notes, strict=True):
            if n.score != score:
                out.append(f"score of {nid}: was {score:.6f}, now {n.score:.6f}")
    else:
        scores: dict[str, float] = {}
        for n in res.notes:
            scores.setdefault(n.note_id, n.score)
        first: dict[str, float] = {}
        for nid, score in s.chosen:
            first.setdefault(nid, score)
        for nid, score in first.items():
            if nid in scores and scores[nid] != score:
                out.append(f"score of {nid}: was {score:.6f}, now {scores[nid]:.6f}")
    if s.used != res.used:
        out.append(f"used: was {s.used}, now {res.used}")
    if s.method != res.method:
        out.append(f"method: was {s.method}, now {res.method}")
    if s.upper_bound != res.upper_bound:
        out.append(f"upper_bound: was {s.upper_bound:.6f}, now {res.upper_bound:.6f}")
    return out


@dataclass
class NoteHistory:
    """``hivemind show``: a note, its events in log order, the served queries that returned it."""

    note: NoteState | None
    events: list[tuple[str, dict[str, Any]]]
    served: list[tuple[ServedEntry, int, float]]
    """Each served query that returned the note, with its rank in context order and score."""
    versions: list[Version] = field(default_factory=list)
    """Its texts, oldest first: the created one and each applied revision."""


class Version(msgspec.Struct, frozen=True):
    """One text a note had: from ``at`` (its event's time) until the next version."""

    version: int
    at: datetime
    agent: str
    event_id: str
    position: str
    text: str
    """Empty when an erasure redacted it (``erased`` then says so)."""
    tokens: int
    erased: bool = False


def note_versions(events: Sequence[tuple[str, Event]]) -> list[Version]:
    """The versions of one note from its own events in log order: each content event
    (``note.created``, ``note.revised``) that the fold applies (``apply_event``)."""
    out: list[Version] = []
    state: NoteState | None = None
    for pos, ev in events:
        got = apply_event(state, ev)
        if isinstance(got, Rejected):
            continue
        state = got
        if isinstance(ev, CONTENT_EVENTS):
            out.append(Version(version=got.version, at=ev.at, agent=ev.agent,
                               event_id=ev.event_id, position=pos, text=ev.text,
                               tokens=got.tokens, erased=ev.redacted is not None))
    return out


class ServedHit(msgspec.Struct, frozen=True):
    """A served query that returned the note: its rank in context order and the score."""

    query_id: str
    agent: str
    served_at: datetime
    rank: int
    score: float


class NoteShow(msgspec.Struct, frozen=True):
    """``hivemind show --json`` and ``GET /v1/ns/{ns}/notes/{note_id}``."""

    note: NoteState | None
    """The projected note (None: not projected, or not yet)."""
    events: list[dict[str, Any]]
    """Its events in log order, each with its log ``position``."""
    served: list[ServedHit]
    versions: list[Version] = []
    """Its texts, oldest first (the created one, then each applied revision)."""


def show_of(h: NoteHistory) -> NoteShow:
    return NoteShow(note=h.note, events=[{"position": p, **e} for p, e in h.events],
                    versions=h.versions,
                    served=[ServedHit(query_id=x.event.query_id, agent=x.event.agent,
                                      served_at=x.served_at, rank=i, score=sc)
                            for x, i, sc in h.served])


def note_history(r: Store, ns: str, note_id: str) -> NoteHistory:
    """Everything the namespace knows about one note (reads the whole log and audit)."""
    events: list[tuple[str, dict[str, Any]]] = []
    own: list[tuple[str, Event]] = []
    for entry in iter_all(r, ns):
        ev, _ = decode_entry(entry.fields, ns)
        if isinstance(ev, Undecodable):
            continue
        if ev.note_id == note_id or note_id in getattr(ev, "supersedes", ()):
            events.append((entry.id.decode(), msgspec.to_builtins(ev)))
        if ev.note_id == note_id:
            own.append((entry.id.decode(), ev))
    hits: list[tuple[ServedEntry, int, float]] = []
    for x in all_served(r, ns):
        for i, (nid, score) in enumerate(x.event.chosen, start=1):
            if nid == note_id:
                hits.append((x, i, score))
    note = read_notes(r, ns).get(note_id)
    if note is None and events:  # not projected here (yet): fold the log for it
        note = fold_log(r, ns).projection.notes.get(note_id)
    return NoteHistory(note=note, events=events, served=hits, versions=note_versions(own))


__all__ = ["Auditor", "ConfigHistory", "NoteHistory", "NoteShow", "ReproduceSummary",
           "Reproduction", "ReproductionView", "ServedEntry", "ServedHit", "States", "Version",
           "all_served", "compare", "list_served", "note_history", "note_versions",
           "reproduce_queries", "show_of", "view_of"]
