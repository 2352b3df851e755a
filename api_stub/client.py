"""The Python client: append events, submit queries (one or many), wait for results.

No ranking here. Waiting uses blocking Redis reads (BLPOP on the query's done list), never
sleeps; a timeout raises ``QueryTimeout`` naming the query id.
"""

from __future__ import annotations

import contextlib
import random
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

import msgspec
from rq import Queue

from hivemind_memory.api_stub.protocol import jobs
from hivemind_memory.api_stub.protocol.answers import Duplicate, Remembered
from hivemind_memory.api_stub.protocol.messages import (
    Envelope,
    QueryRequest,
    ReadRequest,
    encode,
    error_json,
    new_query_id,
    ns_of,
    parse_request,
)
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.api_stub.protocol.stamps import new_id, now_rfc3339
from hivemind_memory.events.codec import encode_event, parse_json_event
from hivemind_memory.events.errors import (
    AlreadySuperseded,
    CatchUpTimeout,
    EventError,
    EventIdConflict,
    NotAllowed,
    NoteExists,
    QueryError,
    QueryTimeout,
    StoreError,
    UnknownNote,
    VersionConflict,
    WriteRefused,
)
from hivemind_memory.events.positions import Position, format_pos
from hivemind_memory.events.schema import (
    MAX_SUPERSEDES,
    NS_PATTERN,
    Event,
    NoteCreated,
    event_type,
)
from hivemind_memory.projections.ranking.config import RankingConfig, load_config
from hivemind_memory.projections.state import NoteRow, note_row
from hivemind_memory.projections.store import results
from hivemind_memory.projections.store.beats import live_beats, served_queues
from hivemind_memory.projections.store.connection import connect, connect_queue
from hivemind_memory.projections.store.log import append_encoded, heads, tail
from hivemind_memory.projections.store.types import QueueConn, Store
from hivemind_memory.projections.store.urls import scrub

# What only writes, erasure and duplicate checks need is imported by the methods that use it
# (the checked write's fold, the read model, erasure, the cluster's appends, ingest's
# chunking, similarity): a process that only submits queries and reads their results
# (``hivemind batch``, ``hivemind query``) never loads it.
if TYPE_CHECKING:
    from hivemind_memory.projections.reduce import Rejected
    from hivemind_memory.projections.store import erasure
    from hivemind_memory.projections.store.dupcheck import Check
    from hivemind_memory.projections.store.ingest import Appender
    from hivemind_memory.projections.store.readmodel import WriteView

CHECKED_ATTEMPTS = 50
"""A checked append that keeps losing the compare-and-set to other writers gives up after
this many attempts (each one re-reads only the namespace's unprojected tail)."""
CHECKED_BACKOFF_S = 0.0005
"""The longest random pause after the first lost compare-and-set, doubled after each one..."""
CHECKED_BACKOFF_CAP_S = 0.05
"""...up to this (50 attempts then wait at most ~2.2 s in all). Eight processes writing
checked uses to one namespace with a worker projecting: none of 2,400 writes gave up (8 of
2,400 did before the pause and the narrower window)."""
SHARD_CHECK_S = 1.0
"""How long the client trusts its reading of which shards have a live worker (the
heartbeats: one SMEMBERS and one MGET) before it reads them again."""
SHARD_RETRY_AFTER_S = 5
"""The retry hint of a ``shard_unavailable`` answer (a restarted worker beats at once)."""


@dataclass(frozen=True, slots=True)
class CheckedAppend:
    """Outcome of ``Client.append_checked``: events appended now, and events already in the
    log (a retry of the same ``event_id``: applied once, not appended again)."""

    appended: int
    already: int


@dataclass(frozen=True, slots=True)
class Erasure:
    """Outcome of ``Client.erase``: the ``note.erased`` events appended now (none for notes
    erased before), what this call's redaction rewrote (none of what the redaction job the
    projector queues when it folds the ``note.erased``, or an earlier erasure, had rewritten
    first) and the copies of the notes' content now redacted in all, whoever redacted them
    (``erasure.redacted_copies``)."""

    event_ids: list[str]
    redaction: erasure.Redaction
    in_all: dict[str, int]

    @property
    def counts(self) -> dict[str, int]:
        """What this call's redaction rewrote, by kind (``log_entries``, ``dead_letters``...)."""
        from hivemind_memory.projections.store.erasure import erasure_counts

        return erasure_counts(self.redaction)


DuplicateMode = Literal["report", "supersede", "ignore", "keep"]
"""What ``remember`` does about near-duplicates: report them (and write nothing for an exact
twin of the writer's own active note: the answer names it), also supersede those the writer
may supersede (its own), report them but write even a twin (``keep``), or not look."""


@dataclass(frozen=True, slots=True)
class RememberOutcome:
    """Outcome of ``Client.remember``: the write (nothing appended when ``duplicate_of``
    names the twin it was merged into), the near-duplicates found before it (``(note_id,
    word overlap)``; None: not checked, ``unchecked`` says why unless the caller asked not
    to look) and the notes it superseded."""

    write: CheckedAppend
    duplicates: list[tuple[str, float]] | None
    superseded: list[str]
    duplicate_of: str | None = None
    unchecked: str | None = None

    def answer(self, ev: NoteCreated, *, show_duplicates: bool = True) -> Remembered:
        """What ``remember`` answers for the note ``ev`` wrote (or the twin it was merged
        into), on every door; ``show_duplicates`` False leaves the near-duplicates out
        (``duplicates_checked`` still says whether they were looked for)."""
        dups = None if self.duplicates is None or not show_duplicates else [
            Duplicate(n, o) for n, o in self.duplicates]
        return Remembered(self.duplicate_of or ev.note_id, ev.event_id,
                          duplicates_checked=self.duplicates is not None, duplicates=dups,
                          duplicate_of=self.duplicate_of, duplicates_unchecked=self.unchecked,
                          superseded=self.superseded)


class _TailMoved(Exception):
    """A checked append found entries appended since the check it rests on."""


def refusal(index: int, why: Rejected, events: Sequence[Event]) -> WriteRefused:
    """The typed error for the first event of a write that would never apply (a private
    note of another agent is "not found" to the writer, so its id does not leak)."""
    ev = events[index]
    where = f"events[{index}] ({event_type(ev)} {ev.note_id!r})"
    if why.code == "note_id_exists" or (why.code == "erased_note" and type(ev) is NoteCreated
                                         and not why.reason.startswith("erased_note: a ")):
        return NoteExists(f"{where}: note {ev.note_id!r} already exists in namespace "
                          f"{ev.ns!r} (ids are never reused, even after forgetting)", index)
    if why.code == "not_allowed":
        verb = {"note.forgotten": "forget", "note.revised": "revise"}.get(event_type(ev))
        return NotAllowed(f"{where}: only the note's author or an admin may {verb} it"
                          if verb else f"{where}: {why.reason.partition(': ')[2]}", index)
    if why.code == "version_conflict":
        return VersionConflict(f"{where}: {why.reason.partition(': ')[2]}", index)
    if why.code == "superseded_note":
        return AlreadySuperseded(f"{where}: {why.reason.partition(': ')[2]}", index)
    if why.code == "duplicate_supersedes":
        return WriteRefused(f"{where}: supersedes names {why.reason.partition(': ')[2]}",
                            index)
    if type(ev) is NoteCreated and ev.supersedes:
        return UnknownNote(f"{where}: a note it supersedes is not in namespace {ev.ns!r} "
                           "(never created, forgotten, erased, or not visible to this agent)",
                           index)
    return UnknownNote(f"{where}: no note {ev.note_id!r} in namespace {ev.ns!r} "
                       "(never created, forgotten, erased, or not visible to this agent)", index)


class Client:
    """Talks to the store (streams, results) and to RQ (jobs)."""

    def __init__(self, store: Store, rq: QueueConn | None = None,
                 settings: Settings | None = None) -> None:
        self.store = store
        self.rq = jobs.queue_connection(store, rq)
        self.settings = settings or Settings()
        self._shard_queues: dict[int, Queue] = {}
        self._qq = self.shard_queue(0)
        """The query queue of shard 0 (the only one with one shard)."""
        self._pq = jobs.queue(self.rq, jobs.PROJECT_QUEUE, self.settings)
        self._cfg: RankingConfig | None = None
        self._served: tuple[float, set[str]] | None = None

    @classmethod
    def connect(cls, settings: Settings) -> Client:
        """A client connected as ``settings`` say: the store (one Redis, a cluster or the
        embedded store) and, when ``rq_url`` is set, RQ's own plain Redis."""
        rq = connect_queue(settings.rq_url) if settings.rq_url is not None else None
        return cls(connect(settings.redis_url), rq, settings=settings)

    # -- events ------------------------------------------------------------------------------
    def append(self, events: Iterable[Event | Mapping[str, Any]]) -> int:
        """Validate exactly as ``hivemind ingest`` does (structs too: a struct built by hand
        skips msgspec's checks, so it is encoded and parsed again), then append as ``ingest``
        does (one chunk, scheduled before and after it lands). Returns how many were appended.
        Nothing is appended if any is bad; ``AppendFailed`` says how many landed."""
        from hivemind_memory.projections.store.ingest import IngestReport, append_chunks

        evs = self._validated(events)
        report = IngestReport()
        append_chunks(self.store, [[(e.ns, encode_event(e)) for e in evs]], report,
                      self.schedule, self.appender)
        return report.appended

    def append_checked(self, events: Iterable[Event | Mapping[str, Any]], *,
                       at_tail: str | None = None, view: WriteView | None = None,
                       holds: Callable[[str, str], bool] | None = None) -> CheckedAppend:
        """``append`` for events that must apply, all of one namespace: each is folded, as the
        projector will fold it, onto the namespace as the log stands (read model + the tail
        not projected yet), and the write is appended only if every event applies, in one
        compare-and-set on the stream's newest entry (a concurrent writer makes it check
        again). Raises ``NoteExists``, ``UnknownNote`` or ``NotAllowed`` (nothing appended).
        Events already in the log (a retry: same ``event_id``) are not appended again.
        ``at_tail``: the write rests on a check made at that stream entry; raises
        ``_TailMoved`` (nothing appended) once the stream has moved past it, unless
        ``holds(at_tail, new_tail)`` says the check still holds there (then it rests on the
        new tail). ``view``: the write's view read with that check (``readmodel.write_view``
        at ``at_tail``, of these events' notes and ids), used for the first attempt instead
        of reading the tail again."""
        from hivemind_memory.projections.reduce import check_write, touched_by
        from hivemind_memory.projections.store import readmodel
        from hivemind_memory.projections.store.checked_append import append_if_tail

        evs = self._validated(events)
        if not evs:
            return CheckedAppend(0, 0)
        nss = {e.ns for e in evs}
        if len(nss) != 1:
            raise EventError(f"a checked write is of one namespace, got {sorted(nss)}")
        ns = evs[0].ns
        blobs = [encode_event(e) for e in evs]
        note_ids = sorted({n for e in evs for n in touched_by(e)})
        event_ids = [e.event_id for e in evs]
        prepared = False
        for attempt in range(CHECKED_ATTEMPTS):
            if attempt:  # lost the race: a random pause, so writers that met do not meet again
                time.sleep(random.uniform(0.0, min(CHECKED_BACKOFF_CAP_S,
                                                   CHECKED_BACKOFF_S * 2 ** (attempt - 1))))
            if attempt or view is None:
                view = readmodel.write_view(self.store, ns, note_ids, event_ids)
            if at_tail is not None and view.tail != at_tail:
                if holds is None or not holds(at_tail, view.tail):
                    raise _TailMoved
                at_tail = view.tail
            verdict = check_write(view.notes, view.logged, evs)
            if verdict.refused is not None:
                raise refusal(*verdict.refused, evs)
            if verdict.logged:  # and the events of this write that share their ids
                again = {evs[i].event_id for i in verdict.logged}
                pick = [i for i, e in enumerate(evs) if e.event_id in again]
                clash = readmodel.conflicting(self.store, ns, [evs[i] for i in pick])
                if clash is not None:
                    where, eid = pick[clash[0]], clash[1]
                    raise EventIdConflict(
                        f"events[{where}]: event_id {eid!r} is already in namespace {ns!r} with "
                        "other content (a retry must resend the same event; give a new "
                        "event_id for a new event)", where, event_id=eid)
            if not verdict.fresh:
                return CheckedAppend(0, len(verdict.logged))
            if not prepared:  # once, before the first entry can land (a refused write
                # registers nothing): a retry's race window is its check alone
                jobs.schedule_and_register(self.store, self._pq, ns)
                prepared = True
            ids = append_if_tail(self.store, ns, view.tail, [blobs[i] for i in verdict.fresh],
                                 self.settings.wait_replicas, self.settings.wait_timeout_ms,
                                 register=False)
            if ids is not None:
                self.schedule([ns])
                return CheckedAppend(len(ids), len(verdict.logged))
        raise StoreError(f"namespace {ns!r}: {CHECKED_ATTEMPTS} checked appends in a row lost "
                         "the race to other writers; try again")

    def erase(self, ns: str, note_ids: Sequence[str], *, agent: str = "operator",
              timeout_s: float = 60.0, on_append: Callable[[], None] | None = None,
              catch_up: Callable[[str, Position, float], None] | None = None) -> Erasure:
        """Erase notes (an admin's or the operator's act: ``as_admin`` is set): append their
        ``note.erased`` through the checked write (``UnknownNote`` for a note the namespace
        does not have; nothing appended then), wait until the projector folded them
        (``catch_up``, default: wait for the workers, ``CatchUpTimeout`` after
        ``timeout_s``; ``on_append`` runs after the append, e.g. to wake an in-process
        worker), then redact their content everywhere (``projections.store.erasure``).
        Returns once all of it is redacted. A note already erased is not erased again, but
        its redaction runs again (it completes one a crash cut short)."""
        from hivemind_memory.projections.store import erasure, readmodel

        ids = list(dict.fromkeys(str(n) for n in note_ids))  # a str subclass (Remembered)
        if not ids:
            raise EventError("erase: give at least one note id")
        view = readmodel.write_view(self.store, ns, ids, [])
        todo = [n for n in ids if not (n in view.notes and view.notes[n].erased)]
        at = now_rfc3339()
        event_ids = [new_id("erase") for _ in todo]
        evs = [{"type": "note.erased", "event_id": eid, "ns": ns, "note_id": n,
                "agent": agent, "at": at, "as_admin": True} for eid, n in zip(event_ids, todo,
                                                                             strict=True)]
        if evs:
            try:
                self.append_checked(evs)
            except UnknownNote:  # erased meanwhile by someone else is fine; unknown is not
                again = readmodel.write_view(self.store, ns, todo, [])
                if not all(n in again.notes and again.notes[n].erased for n in todo):
                    raise
        if on_append is not None:
            on_append()
        target = tail(self.store, ns)
        if catch_up is not None:
            catch_up(ns, target, timeout_s)
        elif not readmodel.wait_projected(self.store, ns, target, timeout_s):
            raise CatchUpTimeout(f"namespace {ns!r} was not projected up to the erasure in "
                                 f"{timeout_s:g}s (is a worker running? see `hivemind "
                                 "worker`); nothing is redacted yet: erase again once it is")
        from hivemind_memory.api_stub.protocol.job_erasure import redact_jobs

        ttl = self.settings.result_ttl_seconds
        red = erasure.redact(self.store, ns, ids,
                             also=lambda c: redact_jobs(self.rq, self.store, ns, c, ttl))
        if red.not_erased:
            raise StoreError(f"namespace {ns!r}: notes {red.not_erased} are not erased in the "
                             "read model after the projector folded their note.erased")
        return Erasure(event_ids, red, erasure.redacted_copies(self.store, ns, red.erased))

    def remember(self, ev: NoteCreated, duplicates: DuplicateMode = "report") -> RememberOutcome:
        """A checked append of one new note, after looking for near-duplicates of it
        (``check_duplicates``; not for ``ignore`` nor for a retry of an event already in
        the log). An exact twin (same normalised text) of an active note of the same author
        is not written unless ``keep``: the outcome names it (``duplicate_of``). ``supersede``:
        the new note also supersedes the near-duplicates its author wrote (not already
        superseded), besides any ``ev.supersedes`` names. The write rests on the check: the
        check reads the tail once and the append reuses that read; if another write lands
        between the two, the check runs again only when an entry in between could change
        it (``dupcheck.still_holds``), else just the append is retried on the new tail. A note
        that supersedes nothing is first sent in one step (``_remember_fresh``: the lookup,
        the tail's compare-and-set and the append in one script) and takes that full check
        only when something could name it."""
        from hivemind_memory.projections.reduce import touched_by
        from hivemind_memory.projections.store.dupcheck import still_holds

        if duplicates == "ignore":
            return RememberOutcome(self.append_checked([ev]), None, list(ev.supersedes))
        if not ev.supersedes:
            fast = self._remember_fresh(ev)
            if fast is not None:
                return fast
        asked = list(ev.supersedes)
        for attempt in range(CHECKED_ATTEMPTS):
            if attempt:
                time.sleep(random.uniform(0.0, min(CHECKED_BACKOFF_CAP_S,
                                                   CHECKED_BACKOFF_S * 2 ** (attempt - 1))))
            got = self.check_duplicates(ev.ns, ev.agent, ev.text, exclude=ev.note_id,
                                        touched=touched_by(ev), event_ids=[ev.event_id])
            if got.near is None or got.view is None:
                return RememberOutcome(self.append_checked([ev]), None, asked,
                                       unchecked=got.unchecked)
            if ev.event_id in got.view.logged:  # a retry: append_checked tells which
                return RememberOutcome(self.append_checked([ev]), None, asked)
            if got.twin is not None and duplicates != "keep":
                return RememberOutcome(CheckedAppend(0, 0), got.near, [],
                                       duplicate_of=got.twin)
            write = ev
            if got.near and duplicates == "supersede":
                write = self._superseding(ev, asked, got)
            touched = touched_by(write)

            def holds(since: str, until: str, _got: Check = got,
                      _touched: tuple[str, ...] = touched) -> bool:
                return still_holds(self.store, ev.ns, _got, ev.text, self.config(), _touched,
                                   [ev.event_id], since, until)
            try:
                done = self.append_checked([write], at_tail=got.tail, view=got.view,
                                           holds=holds)
            except _TailMoved:
                continue
            return RememberOutcome(done, got.near, list(write.supersedes))
        raise StoreError(f"namespace {ev.ns!r}: {CHECKED_ATTEMPTS} checked writes in a row met "
                         "other writers between their check and their append; try again")

    def _remember_fresh(self, ev: NoteCreated) -> RememberOutcome | None:
        """``remember`` of a note that supersedes nothing, in one round trip when nothing can
        name it (``dupappend.append_unless_named``: the lookup, the compare-and-set on the
        tail and the append in one script); None when it wrote nothing (a note may be named,
        the ids exist, the tail is long, the store is a cluster, replicas are awaited, or
        the store failed): then the full check runs and answers."""
        from redis.exceptions import RedisError

        from hivemind_memory.projections.store import dupappend

        if self.settings.wait_replicas > 0 or not dupappend.supported(self.store):
            return None
        (checked,) = self._validated([ev])
        assert isinstance(checked, NoteCreated)
        try:
            got = dupappend.append_unless_named(self.store, checked.ns, checked,
                                                encode_event(checked), self.config())
        except (RedisError, StoreError, OSError):
            # the outcome is unknown: the full check finds the event if it landed (a retry);
            # a job is queued in case the script set the marker and this call never knew
            dupappend.forget_seen(self.store, ev.ns)
            with contextlib.suppress(RedisError, OSError):
                jobs.schedule_projection(self.store, self._pq, ev.ns, force=True)
            return None
        if got is None:
            return None
        if got.marked:
            jobs.enqueue_projection(self._pq, ev.ns)
        return RememberOutcome(CheckedAppend(1, 0), [], [])

    def _superseding(self, ev: NoteCreated, asked: list[str], got: Check) -> NoteCreated:
        """``ev`` also superseding the near-duplicates of ``got`` its author wrote (their
        states as the check read them: ``got.view``)."""
        assert got.near is not None and got.view is not None
        mine = got.view.notes
        more = [nid for nid, _ in got.near if nid in mine and nid not in asked
                and mine[nid].agent == ev.agent and mine[nid].superseded_by is None]
        if not more:
            return ev
        return msgspec.structs.replace(ev, supersedes=(asked + more)[:MAX_SUPERSEDES])

    def not_after(self) -> datetime:
        """The latest ``at`` an event may carry now: the clock plus ``max_future_skew_s``."""
        return datetime.now(UTC) + timedelta(seconds=self.settings.max_future_skew_s)

    def _validated(self, events: Iterable[Event | Mapping[str, Any]]) -> list[Event]:
        evs: list[Event] = []
        not_after = self.not_after()
        for i, e in enumerate(events, start=1):
            if isinstance(e, msgspec.Struct):
                e = msgspec.to_builtins(e)
            evs.append(parse_json_event(msgspec.json.encode(e), lineno=i, not_after=not_after))
        return evs

    def schedule(self, nss: Iterable[str]) -> None:
        """Schedule the projection of namespaces an append touches (called before the first
        entry can land and after the last has: a job that ran in between saw none)."""
        jobs.schedule_namespaces(self.store, self._pq, nss)

    @property
    def appender(self) -> Appender:
        """How this client appends encoded events: waiting for ``wait_replicas`` replicas
        when the settings ask for it, else the plain pipelined append."""
        s = self.settings
        if s.wait_replicas <= 0:
            return append_encoded
        from hivemind_memory.projections.store.cluster import append_encoded_replicated

        def replicated(r: Store, events: Sequence[tuple[str, bytes]]) -> list[str]:
            return append_encoded_replicated(r, events, s.wait_replicas, s.wait_timeout_ms)

        return replicated

    def wait_projected(self, ns: str, timeout_s: float) -> bool:
        """Wait (never project) until every event appended to ``ns`` before this call is
        projected; False if ``timeout_s`` ran out first."""
        from hivemind_memory.projections.store import readmodel

        return readmodel.wait_projected(self.store, ns, tail(self.store, ns), timeout_s)

    # -- reads -------------------------------------------------------------------------------
    def read(self, ns: str, agent: str, req: ReadRequest) -> list[NoteRow]:
        """The notes ``agent`` may see (live; shared or its own) of ``req``: by id in the
        order asked, or by prefix in id order after ``req.after``, at most ``req.limit``; as
        they stand after every event appended before the call (``notes_view``)."""
        from hivemind_memory.projections.store.notes_view import visible_notes

        cfg = self.config()
        if req.prefix is None:
            got = visible_notes(self.store, ns, agent, note_ids=req.note_ids)
            return [note_row(got[i], cfg) for i in dict.fromkeys(req.note_ids) if i in got]
        got = visible_notes(self.store, ns, agent, prefix=req.prefix)
        ids = sorted(i for i in got if i > req.after)[:req.limit]
        return [note_row(got[i], cfg) for i in ids]

    def notes(self, ns: str) -> list[NoteRow]:
        """Every projected note of ``ns`` (forgotten ones included) as rows in id order, as
        the read model holds them now (``wait_projected`` first to read your writes)."""
        from hivemind_memory.projections.store.readmodel import read_notes

        got = read_notes(self.store, ns)
        cfg = self.config()
        return [note_row(got[k], cfg) for k in sorted(got)]

    def audit(self, ns: str, limit: int) -> list[tuple[str, bytes]]:
        """The newest ``limit`` audit entries of ``ns``, oldest first: each entry's id and
        its ``query.served`` event's JSON (empty if the entry has none)."""
        from hivemind_memory.projections.store.audit_trail import audit_event, audit_page

        return [(e.id.decode(), audit_event(e))
                for e in reversed(audit_page(self.store, ns, None, limit))]

    def namespaces(self) -> list[str]:
        """Every namespace that has had an event appended, sorted."""
        from hivemind_memory.projections.store.log import namespaces

        return namespaces(self.store)

    def ping(self) -> None:
        """Raise the store's error if it does not answer."""
        self.store.ping()

    def config(self) -> RankingConfig:
        """The ranking config this client's settings name (read once)."""
        if self._cfg is None:
            self._cfg = load_config(self.settings.config_path)
        return self._cfg

    def workers_alive(self) -> bool:
        """Whether any worker process keeps a heartbeat (one SMEMBERS and one MGET)."""
        return bool(live_beats(self.rq))

    def check_duplicates(self, ns: str, agent: str, text: str, *,
                         exclude: str | None = None, touched: Sequence[str] = (),
                         event_ids: Sequence[str] = ()) -> Check:
        """The notes ``agent`` may see that nearly say what ``text`` says, and its twin
        (``projections.store.dupcheck.check``: a lookup of the projector's near-duplicate
        index plus the unprojected tail, no query, nothing written). A store that cannot
        answer gives a check that says why (``unchecked``) instead of raising."""
        from redis.exceptions import RedisError

        from hivemind_memory.projections.store.dupcheck import Check, check

        try:
            return check(self.store, ns, agent, text, self.config(), exclude=exclude,
                         touched=touched, event_ids=event_ids)
        except (RedisError, StoreError, OSError) as exc:
            why = scrub(str(exc), self.settings.redis_url)
            return Check(None, None, "", f"store_unavailable: the near-duplicate check could "
                         f"not read the store ({type(exc).__name__}: {why})")

    # -- queries -----------------------------------------------------------------------------
    def submit_query(self, ns: str, text: str, budget: int, *, agent: str = "",
                     as_of: str | datetime | None = None, explain: bool = False,
                     embedding: Sequence[float] | None = None,
                     config: Mapping[str, Any] | None = None) -> str:
        """Submit one query; returns its id. It will see every event appended before now."""
        req: dict[str, Any] = {"ns": ns, "text": text, "budget": budget, "agent": agent,
                               "explain": explain}
        if as_of is not None:
            req["as_of"] = as_of if isinstance(as_of, str) else as_of.isoformat()
        if embedding is not None:
            req["embedding"] = list(embedding)
        if config is not None:
            req["config"] = dict(config)
        return self.submit_batch([req])[0]

    def submit_batch(self, requests: Sequence[QueryRequest | Mapping[str, Any] | QueryError]
                     ) -> list[str]:
        """Submit many queries as few jobs (``settings.query_chunk`` per job), ids in order.

        A bad request (or a ``QueryError`` the caller already found, e.g. a malformed line)
        gets its error object at its result key at once; the rest are queued. Requests that
        are already ``QueryRequest`` structs are not parsed again.
        """
        parsed: list[tuple[Mapping[str, Any], QueryRequest | QueryError]] = []
        for raw in requests:
            if isinstance(raw, QueryError | QueryRequest):
                parsed.append(({}, raw))
                continue
            try:
                parsed.append((raw, parse_request(dict(raw))))
            except QueryError as exc:
                parsed.append((raw, exc))
        nss = sorted({p.ns for _, p in parsed if isinstance(p, QueryRequest)})
        positions, lengths = self._positions(nss)
        ids: list[str] = []
        envs: list[dict[str, Any]] = []
        for raw, p in parsed:
            if isinstance(p, QueryError):
                ns = raw.get("ns")
                if not (isinstance(ns, str) and re.fullmatch(NS_PATTERN, ns)):
                    ns = results.INVALID_NS
                qid = f"{ns}.{uuid.uuid4().hex[:24]}"
                self._write_error(ns, qid, p.code, p.message)
                ids.append(qid)
                continue
            qid = new_query_id(p, lengths[p.ns])
            ids.append(qid)
            if p.as_of is not None and results.result_exists(self.store, p.ns, qid):
                continue  # the same as-of query on the same log: already answered
            envs.append(msgspec.to_builtins(
                Envelope(qid, positions[p.ns], msgspec.to_builtins(p))))
        shards = self.settings.shards
        by_shard: dict[int, list[dict[str, Any]]] = {}
        for env in envs:  # each namespace's queries on its shard's queue, in input order
            by_shard.setdefault(jobs.shard_of(env["request"]["ns"], shards), []).append(env)
        for shard in sorted(by_shard):
            q = self.shard_queue(shard)
            part = by_shard[shard]
            workers = jobs.query_workers(q) if len(part) > jobs.MIN_QUERY_CHUNK else 1
            # a query still queued when its result would have expired is dropped: no one
            # waits for it any more (its shard had no worker all that time)
            jobs.enqueue_queries(q, part, self.settings.query_chunk, workers,
                                 ttl=self.settings.result_ttl_seconds)
        return ids

    # -- shards ------------------------------------------------------------------------------
    def shard_queue(self, shard: int) -> Queue:
        """The RQ queue of query jobs of ``shard`` (``jobs.query_queue_name``)."""
        got = self._shard_queues.get(shard)
        if got is None:
            got = self._shard_queues[shard] = jobs.queue(
                self.rq, jobs.query_queue_name(shard, self.settings.shards), self.settings)
        return got

    def _served_queues(self) -> set[str]:
        """The queues live workers listen on, read at most every ``SHARD_CHECK_S``."""
        now = time.monotonic()
        if self._served is None or now - self._served[0] >= SHARD_CHECK_S:
            self._served = (now, served_queues(self.rq))
        return self._served[1]

    def unserved_shards(self) -> list[int]:
        """The shards no live worker serves now (``/readyz``; empty: all are served)."""
        served = self._served_queues()
        n = self.settings.shards
        return [k for k in range(n) if jobs.query_queue_name(k, n) not in served]

    def shard_problem(self, ns: str) -> str | None:
        """Why ``ns``'s queries cannot be answered now (no live worker listens on its
        shard's queue), or None."""
        n = self.settings.shards
        shard = jobs.shard_of(ns, n)
        name = jobs.query_queue_name(shard, n)
        if name in self._served_queues():
            return None
        if n == 1:
            return (f"no worker is running for namespace {ns!r} (start `hivemind worker`); "
                    f"retry in {SHARD_RETRY_AFTER_S}s")
        return (f"shard {shard} of {n} (namespace {ns!r}, queue {name}) has no live worker: "
                f"start one with `hivemind worker --shards {shard}` and HIVEMIND_SHARDS={n}; "
                f"retry in {SHARD_RETRY_AFTER_S}s")

    def _positions(self, nss: Sequence[str]) -> tuple[dict[str, str], dict[str, int]]:
        """Each namespace's newest stream id and length, read together (one MULTI each)."""
        got = heads(self.store, nss)
        return ({ns: format_pos(pos) for ns, (pos, _) in got.items()},
                {ns: n for ns, (_, n) in got.items()})

    def _write_error(self, ns: str, qid: str, code: str, message: str) -> None:
        results.write_results(self.store, ns, {qid: error_json(qid, code, message)},
                              self.settings.result_ttl_seconds)

    def result_json(self, query_id: str, timeout: float = 30.0) -> bytes:
        """The result (or error) object's JSON bytes; ``QueryTimeout`` after ``timeout`` s."""
        ns = self._result_ns(query_id)
        deadline = time.monotonic() + timeout
        body = results.read_result(self.store, ns, query_id)
        while body is None:
            if ns != results.INVALID_NS:  # queued: is a worker there to answer it?
                why = self.shard_problem(ns)
                if why is not None:  # the job stays queued: a worker that comes answers it
                    return error_json(query_id, "shard_unavailable", f"query {query_id}: {why}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise QueryTimeout(
                    f"query {query_id}: no result within {timeout:g}s "
                    "(is a worker running? see `hivemind worker`)")
            done, body = results.wait_result(self.store, ns, query_id, remaining,
                                                self.settings.result_ttl_seconds)
            if not done:  # a marker lost to a waiter that died: the result may be there
                body = results.read_result(self.store, ns, query_id)
        return body

    @staticmethod
    def _result_ns(query_id: str) -> str:
        invalid = query_id.startswith(results.INVALID_NS + ".")
        return results.INVALID_NS if invalid else ns_of(query_id)

    def result(self, query_id: str, timeout: float = 30.0) -> dict[str, Any]:
        """The result (or error) object as a dict."""
        out: dict[str, Any] = msgspec.json.decode(self.result_json(query_id, timeout))
        return out

    def query(self, ns: str, text: str, budget: int, *, timeout: float = 30.0,
              **kw: Any) -> dict[str, Any]:
        """Submit and wait."""
        return self.result(self.submit_query(ns, text, budget, **kw), timeout)

    def batch_results(self, query_ids: Sequence[str], timeout: float = 300.0
                      ) -> Iterator[bytes]:
        """Each query's JSON in input order, as the worker wrote it; one deadline for the
        whole batch (``batch_result_runs``, one by one)."""
        for run in self.batch_result_runs(query_ids, timeout):
            yield from run

    def batch_result_runs(self, query_ids: Sequence[str], timeout: float = 300.0
                          ) -> Iterator[list[bytes]]:
        """The queries' JSON in input order, in runs: each run is what one round trip found
        (up to ``READ_AHEAD`` results of one namespace that are already there), so a caller
        can write each run at once (``hivemind batch``, ``POST .../queries``) while later
        jobs are still running. When the next result is not there yet, the wait for it
        (``results.wait_results``) reads it and the ones after it in the round trip that
        ends the wait. One deadline for the whole batch: a result still missing then is a
        ``timeout`` error object in its place; one whose shard has no live worker, a
        ``shard_unavailable`` one (as ``result_json`` answers)."""
        deadline = time.monotonic() + timeout
        nss = [self._result_ns(q) for q in query_ids]  # once each, not once a read-ahead
        i = 0
        waited = False
        got: list[bytes | None] = []
        while i < len(query_ids):
            ns = nss[i]
            j = i + 1
            while j < len(query_ids) and j - i < READ_AHEAD and nss[j] == ns:
                j += 1
            if waited:  # the wait's round trip read these already
                waited = False
            else:
                got = results.read_results(self.store, ns, query_ids[i:j])
            run = _leading(got)
            if run:
                i += len(run)
                yield run
                continue
            qid = query_ids[i]
            why = None if ns == results.INVALID_NS else self.shard_problem(ns)
            if why is not None:  # the job stays queued: a worker that comes answers it
                i += 1
                yield [error_json(qid, "shard_unavailable", f"query {qid}: {why}")]
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                i += 1
                yield [error_json(qid, "timeout", f"query {qid}: no result within "
                                  f"{timeout:g}s (is a worker running? see `hivemind worker`)")]
                continue
            # not done within a slice: read again (a marker lost to a waiter that died)
            waited, got = results.wait_results(self.store, ns, query_ids[i:j], remaining,
                                               self.settings.result_ttl_seconds)


def _leading(bodies: Sequence[bytes | None]) -> list[bytes]:
    """The results at the head of ``bodies`` that are there (up to the first missing)."""
    run: list[bytes] = []
    for body in bodies:
        if body is None:
            break
        run.append(body)
    return run


READ_AHEAD = 100
"""Results ``batch_results`` reads in one round trip when they are already there."""


__all__ = ["Client", "encode"]
