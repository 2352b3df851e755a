"""``Memory``: the SDK agents use. One class over a store URL or over ``hivemind serve``.

::

    from hivemind_memory import Memory

    mem = Memory("http://127.0.0.1:8080", ns="team-a", token="...")   # or redis://, memory://
    nid = mem.remember("Deploys happen on Tuesdays after 14:00 UTC")
    got = mem.recall("when do we deploy?", budget=500)
    prompt = f"Context:\\n{got.context}\\n\\nQuestion: ..."
    mem.used(*got.note_ids)

It fills ``event_id`` (time-ordered, unique), ``at`` (now, UTC), ``ns`` and ``agent``, and
raises typed errors (``EventError``, ``QueryError``, ``QueryTimeout``, ``AccessDenied``,
``TooLarge``, ``StoreError``; all ``HivemindError``). Over a store URL the agent is the one
given here (the store trusts its callers); over HTTP it is the token's, and ``agent=`` may be
left out. Over ``memory://`` a worker runs in this process. Synchronous; ``AsyncMemory``
wraps it for asyncio code.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

import msgspec

from hivemind_memory.api_stub import wiring
from hivemind_memory.api_stub.protocol import answers
from hivemind_memory.api_stub.protocol.answers import (  # the SDK's, re-exported
    Duplicate as Duplicate,
)
from hivemind_memory.api_stub.protocol.answers import (
    RecalledNote as RecalledNote,
)
from hivemind_memory.api_stub.protocol.stamps import filled, new_id
from hivemind_memory.events.errors import (
    AccessDenied,
    AlreadySuperseded,
    EventError,
    EventIdConflict,
    ForeignNoteId,
    HivemindError,
    IndexWarming,
    NotAllowed,
    NoteExists,
    QueryError,
    QueryTimeout,
    StoreError,
    TooLarge,
    UnknownNote,
    VersionConflict,
    query_error,
)
from hivemind_memory.projections.ranking.rank_result import Passage


@dataclass(frozen=True)
class Note:
    """A note as an agent reads it by id (``Memory.get``, ``Memory.notes``)."""

    note_id: str
    text: str
    agent: str
    """Who wrote it."""
    scope: str
    kind: str
    tokens: int
    created_at: datetime
    uses: int
    last_used_at: datetime | None
    tier: str
    revised_at: datetime | None = None
    """When its current text was written, if it was revised."""
    version: int = 1
    """1 for the created text, +1 per revision."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """The note's metadata (empty: none)."""
    expires_at: datetime | None = None
    """When it leaves every answer (its own ``expires_at``), if set."""

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Note:
        """From a row of ``GET/POST .../notes|read`` (``hivemind notes --json``)."""
        last = row.get("last_used_at")
        return cls(note_id=row["note_id"], text=row.get("text", ""), agent=row["agent"],
                   scope=row["scope"], kind=row["kind"], tokens=row["tokens"],
                   created_at=_parse_time(row["created_at"]), uses=row["uses"],
                   last_used_at=None if last is None else _parse_time(last), tier=row["tier"],
                   revised_at=_parse_time(row["revised_at"]) if row.get("revised_at") else None,
                   version=int(row.get("version", 1)), metadata=row.get("metadata") or {},
                   expires_at=_parse_time(row["expires_at"]) if row.get("expires_at") else None)


class Remembered(str):
    """What ``remember`` returns: the note's id (a ``str``: the new note's, or the existing
    twin's when ``duplicate_of`` is set and nothing was written), with ``duplicates`` (the
    near-duplicates found before writing it, most similar first; None: not checked, and
    ``duplicates_unchecked`` says why unless the caller asked not to look), ``superseded``
    (the notes it superseded) and ``event_id``."""

    duplicates: list[Duplicate] | None
    superseded: list[str]
    event_id: str
    duplicate_of: str | None
    duplicates_unchecked: str | None

    def __new__(cls, note_id: str, event_id: str = "",
                duplicates: list[Duplicate] | None = None,
                superseded: Sequence[str] = (), duplicate_of: str | None = None,
                duplicates_unchecked: str | None = None) -> Remembered:
        self = super().__new__(cls, note_id)
        self.event_id = event_id
        self.duplicates = duplicates
        self.superseded = list(superseded)
        self.duplicate_of = duplicate_of
        self.duplicates_unchecked = duplicates_unchecked
        return self

    @property
    def duplicates_checked(self) -> bool:
        """Whether near-duplicates were looked for."""
        return self.duplicates is not None

    @classmethod
    def of(cls, answer: answers.Remembered) -> Remembered:
        """From ``remember``'s answer (``protocol.answers.Remembered``, every door's)."""
        return cls(answer.note_id, answer.event_id, answer.duplicates, answer.superseded,
                   answer.duplicate_of, answer.duplicates_unchecked)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Remembered:
        """From the answer of ``POST .../remember``."""
        return cls.of(msgspec.convert(body, answers.Remembered))


def _plain(obj: Any) -> Any:
    """msgspec's hook for what it cannot encode: a ``str`` subclass (``Remembered``) as its
    text; anything else is still an error."""
    if isinstance(obj, str):
        return str.__str__(obj)
    raise TypeError(f"Encoding objects of type {type(obj).__name__} is unsupported")


_encode = msgspec.json.Encoder(enc_hook=_plain).encode


def _parse_time(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


@dataclass(frozen=True)
class Recall:
    """What ``recall`` found: ``context`` is ready to paste into a prompt (each note under a
    ``[note id | date]`` header; the headers count in the budget)."""

    context: str
    notes: list[RecalledNote]
    used_tokens: int
    budget: int
    query_id: str
    result: dict[str, Any] = field(repr=False)
    """The full result object (the contract's query result)."""

    @property
    def note_ids(self) -> list[str]:
        """The ids of the notes shown, once each (two passages of a note name it once), in
        context order: what ``used`` takes."""
        return list(dict.fromkeys(n.note_id for n in self.notes))

    @property
    def nothing_relevant(self) -> bool:
        """No note was likely enough to be needed: the empty context is the answer."""
        return bool(self.result.get("nothing_relevant", False))

    @property
    def unknown_words(self) -> list[str]:
        """The query's words that no note this agent may see holds (listed when the
        worker's ``unknown_word_factor`` is under 1)."""
        return list(self.result.get("unknown_words") or [])

    def __str__(self) -> str:
        return self.context


def recall_from_result(res: Mapping[str, Any]) -> Recall:
    """A ``Recall`` from a query result object (raises ``QueryError`` for an error object)."""
    if "error" in res:
        raise query_error(res["error"]["code"], res["error"]["message"])
    notes = [RecalledNote(n["note_id"], n["text"], n["score"], n["tokens"], n["created_at"],
                          n.get("tier", ""), n.get("uses", 0), n.get("metadata") or {},
                          None if n.get("passage") is None
                          else msgspec.convert(n["passage"], Passage),
                          list(n.get("stands_for") or ()), list(n.get("updates") or ()))
             for n in res["notes"]]
    context = res.get("context")
    return Recall(context="\n\n".join(n.text for n in notes) if context is None else context,
                  notes=notes,
                  used_tokens=res["used"], budget=res["budget"], query_id=res["query_id"],
                  result=dict(res))


READ_CHUNK = 1000
"""Note ids one read names at most (the server's ``MAX_READ``)."""
QUERY_CHUNK = 1000
"""Queries one ``POST .../queries`` carries at most (the server's ``MAX_QUERIES``): a larger
``batch`` over HTTP goes in several requests."""


class EmbeddedWorker(Protocol):
    """A worker running in this process (what ``memory://`` needs: no other process can
    reach its store)."""

    def kick(self) -> None:
        """Work is waiting (called after every append and query submission)."""

    def stop(self, timeout: float = 10.0) -> None:
        """Stop and wait for the worker's thread."""


EmbeddedWorkerFactory = Callable[[Any, Any], EmbeddedWorker]
"""``(settings, store) -> a started EmbeddedWorker``."""

_embedded_worker: EmbeddedWorkerFactory | None = wiring.embedded_worker
"""How a ``Memory`` over ``memory://`` starts its in-process worker: the factory the package
root left in ``api_stub.wiring`` when it was imported (always before this module: the root
runs first). The SDK sits beside the worker and never imports it; ``hivemind_memory/__init__``
(the package root, above both) injects ``worker.inprocess.start_embedded``."""


class _Transport:
    """How a Memory reaches hivemind."""

    def append(self, events: list[dict[str, Any]]) -> int:
        raise NotImplementedError

    def queries(self, reqs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        raise NotImplementedError

    def remember(self, ev: dict[str, Any], duplicates: str) -> Remembered:
        """Write one ``note.created`` after looking for near-duplicates (``Client.remember``)."""
        raise NotImplementedError

    def read(self, ns: str, agent: str, body: dict[str, Any]) -> list[dict[str, Any]]:
        """Rows of the notes ``agent`` may see (the body of ``POST .../read``)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the transport holds (nothing by default)."""


class _StoreTransport(_Transport):
    """Straight to the store with the Python client (plus a worker thread for memory://)."""

    def __init__(self, url: str, timeout: float, client: Any = None,
                 on_write: Callable[[], None] | None = None, settings: Any = None) -> None:
        self.timeout = timeout
        self._worker: Any = None
        self._held: str | None = None
        """The store URL this transport connected itself (released by ``close``)."""
        self.on_write = on_write
        if client is None:
            from dataclasses import replace

            from hivemind_memory.api_stub.client import Client
            from hivemind_memory.api_stub.protocol.settings import Settings

            s = settings if settings is not None else Settings.from_env(redis_url=url)
            client = Client.connect(replace(s, redis_url=url))  # with RQ apart if rq_url
            self._held = url
            if url.startswith("memory://"):
                if _embedded_worker is None:
                    raise StoreError(
                        "memory:// runs its worker in this process, and none is registered: "
                        "import Memory from hivemind_memory (the package root registers it)")
                self._worker = _embedded_worker(s, client.store)
                self.on_write = self._worker.kick
        self.client = client

    def append(self, events: list[dict[str, Any]]) -> int:
        from hivemind_memory.events.codec import parse_json_event

        evs = [parse_json_event(_encode(e), lineno=i)
               for i, e in enumerate(events, start=1)]
        for ns in dict.fromkeys(e.ns for e in evs):  # each namespace's events all or nothing
            self.client.append_checked([e for e in evs if e.ns == ns])
        if self.on_write is not None:
            self.on_write()
        return len(evs)

    def remember(self, ev: dict[str, Any], duplicates: str) -> Remembered:
        from hivemind_memory.events.codec import parse_json_event
        from hivemind_memory.events.schema import NoteCreated

        parsed = parse_json_event(_encode(ev), lineno=1)
        assert isinstance(parsed, NoteCreated)
        if duplicates not in ("report", "supersede", "ignore", "keep"):
            raise EventError(f"duplicates must be 'report', 'supersede', 'keep' or 'ignore', "
                             f"got {duplicates!r}")
        got = self.client.remember(parsed, duplicates)
        if self.on_write is not None and got.duplicate_of is None:
            self.on_write()
        return Remembered.of(got.answer(parsed))

    def queries(self, reqs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        ids = self.client.submit_batch(reqs)
        if self.on_write is not None:
            self.on_write()
        out: list[dict[str, Any]] = []
        for body in self.client.batch_results(ids, self.timeout):
            out.append(msgspec.json.decode(body))
        return out

    def read(self, ns: str, agent: str, body: dict[str, Any]) -> list[dict[str, Any]]:
        from hivemind_memory.api_stub.protocol.messages import ReadRequest

        try:
            req = msgspec.convert(body, ReadRequest)
        except msgspec.ValidationError as exc:
            raise QueryError("invalid_request", f"read: {exc}") from None
        out: list[dict[str, Any]] = msgspec.to_builtins(self.client.read(ns, agent, req))
        return out

    def close(self) -> None:
        """Stop the embedded worker, then let go of the store: the last ``Memory`` of a
        ``memory://PATH`` store in this process to close unlocks it (``connection.release``);
        a second ``close`` does nothing."""
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.stop()
        held, self._held = self._held, None
        if held is not None:
            from hivemind_memory.projections.store.connection import release

            release(held)


class _HttpTransport(_Transport):
    """JSON over HTTP to ``hivemind serve`` (standard library only)."""

    def __init__(self, url: str, ns: str, token: str | None, timeout: float) -> None:
        self.base = url.rstrip("/") + f"/v1/ns/{ns}"
        self.token = token
        self.timeout = timeout

    def call(self, method: str, path: str, body: Any = None,
             kind: Literal["event", "query"] = "query") -> Any:
        import urllib.error  # over HTTP only
        import urllib.request

        data = None if body is None else _encode(body)
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout + 5) as resp:
                return msgspec.json.decode(resp.read())
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                err = json.loads(raw)["error"]
                code, msg = str(err["code"]), str(err["message"])
            except (ValueError, KeyError, TypeError):
                code, msg = "http_error", raw.decode(errors="replace")[:500]
            raise _http_error(exc.code, code, msg, kind) from None
        except (urllib.error.URLError, OSError) as exc:
            raise StoreError(f"cannot reach {self.base}: {exc}") from exc

    def append(self, events: list[dict[str, Any]]) -> int:
        return int(self.call("POST", "/events", events, kind="event")["appended"])

    def remember(self, ev: dict[str, Any], duplicates: str) -> Remembered:
        body = {k: v for k, v in ev.items() if k not in ("type", "ns")}
        body["duplicates"] = duplicates
        return Remembered.from_body(self.call("POST", "/remember", body, kind="event"))

    def queries(self, reqs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for r in reqs:
            r.pop("ns", None)
        out: list[dict[str, Any]] = []
        for i in range(0, len(reqs), QUERY_CHUNK):
            out += self.call("POST", "/queries", reqs[i:i + QUERY_CHUNK])
        return out

    def read(self, ns: str, agent: str, body: dict[str, Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = self.call("POST", "/read",
                                              {**body, "agent": agent} if agent else body)
        return out


_CONFLICT_ID = re.compile(r"event_id '([^']*)'")
"""The id an ``event_id_conflict`` message names (``Client.append_checked`` writes it)."""


def _http_error(status: int, code: str, message: str, kind: str) -> HivemindError:
    refused = {"note_exists": NoteExists, "unknown_note": UnknownNote,
               "foreign_note_id": ForeignNoteId,
               "not_allowed": NotAllowed, "already_superseded": AlreadySuperseded,
               "version_conflict": VersionConflict}.get(code)
    if code == "event_id_conflict" and kind == "event":
        got = _CONFLICT_ID.search(message)
        return EventIdConflict(message, event_id=got.group(1) if got else "")
    if refused is not None and kind == "event":
        return refused(message)
    if status in (401, 403):
        return AccessDenied(f"{status} {code}: {message}")
    if status == 413:
        return TooLarge(message)
    if status == 504:
        return QueryTimeout(message)
    if code == "index_warming":
        return IndexWarming(message)
    if status == 503 and code == "shard_unavailable":  # as over a store: the query's code
        return QueryError(code, message)
    if status == 422 and kind == "event":
        return EventError(message)
    if status in (400, 404, 422, 507):  # 507: namespace_too_large (the worker's budget)
        return QueryError(code, message)
    return StoreError(f"{status} {code}: {message}")


class Memory:
    """remember / recall / used / revise / forget, and the raw append / query / batch."""

    def __init__(self, url: str, *, ns: str, agent: str = "", token: str | None = None,
                 timeout: float = 30.0, settings: Any = None, admin: bool = False) -> None:
        """``settings`` (a store URL only): the ``Settings`` to use, e.g. with a ranking
        config for the in-process worker (default: from the environment and ``url``).
        ``admin`` (a store URL only; over HTTP the token decides): forget any note, as an
        operator with the ``admin`` right may."""
        self.ns = ns
        self.agent = agent
        self.admin = admin
        self.own_ids = False
        """Create notes only with ids of this agent's own space (``events.noteids``): set
        for a restricted caller of ``serve`` (MCP with a non-admin token); over HTTP the
        server decides."""
        self._suffix: str | None = None
        self.timeout = timeout
        self._t: _Transport
        if url.startswith(("http://", "https://")):
            self._t = _HttpTransport(url, ns, token, timeout)
        else:
            if not agent:
                raise AccessDenied("Memory over a store URL needs agent= (who is writing)")
            self._t = _StoreTransport(url, timeout, settings=settings)

    @classmethod
    def over_client(cls, client: Any, *, ns: str, agent: str, timeout: float = 30.0,
                    on_write: Callable[[], None] | None = None, admin: bool = False) -> Memory:
        """A Memory over an open ``Client`` (the MCP server and ``serve`` use this)."""
        m = cls.__new__(cls)
        m.ns, m.agent, m.timeout, m.admin = ns, agent, timeout, admin
        m.own_ids, m._suffix = False, None
        m._t = _StoreTransport("", timeout, client=client, on_write=on_write)
        return m

    def close(self) -> None:
        self._t.close()

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Memory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.to_thread(self.close)

    # -- raw ---------------------------------------------------------------------------------
    def _fill(self, e: Mapping[str, Any]) -> dict[str, Any]:
        return filled(e, self.ns, self.agent)

    def append(self, events: Sequence[Mapping[str, Any]]) -> int:
        """Append events (``event_id``, ``at``, ``ns``, ``agent`` filled when absent)."""
        evs = [self._fill(e) for e in events]
        for i, ev in enumerate(evs):
            if ev.get("type") == "note.created":
                self._may_choose(ev.get("note_id"), f"events[{i}]")
        return self._t.append(evs)

    def _may_choose(self, note_id: Any, where: str) -> None:
        """``ForeignNoteId`` if this caller may not create a note with ``note_id``."""
        from hivemind_memory.events import noteids

        if self.own_ids and isinstance(note_id, str) and not noteids.may_choose(
                note_id, self.agent):
            raise ForeignNoteId(noteids.foreign_message(where, self.agent))

    def id_suffix(self) -> str:
        """What a note id this caller chooses must end with (``KEY@@AGENT``; "" when any id
        is free to it: a store URL, open mode, an ``admin`` token). Over HTTP the server
        says (``GET .../whoami``, asked once)."""
        if self._suffix is None:
            from hivemind_memory.events import noteids

            if isinstance(self._t, _HttpTransport):
                self._suffix = str(self._t.call("GET", "/whoami")["id_suffix"])
            else:
                self._suffix = noteids.id_suffix(self.agent) if self.own_ids else ""
        return self._suffix

    def _request(self, text: str, budget: int, **kw: Any) -> dict[str, Any]:
        req: dict[str, Any] = {"ns": self.ns, "text": text, "budget": budget}
        if self.agent:
            req["agent"] = self.agent
        for k, v in kw.items():
            if v is not None:
                req[k] = v.isoformat() if isinstance(v, datetime) else v
        return req

    def query(self, text: str, budget: int, *, as_of: datetime | str | None = None,
              explain: bool = False, embedding: Sequence[float] | None = None,
              config: Mapping[str, Any] | None = None, context: bool = False,
              id_prefix: str = "", filter: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The contract's result object (an error object raises ``QueryError``); ``context``:
        with the packed notes rendered (``recall``); ``id_prefix``: only notes whose id starts
        with it are candidates; ``filter``: only notes whose metadata matches it (LangGraph's
        form: ``{"k": v}``, ``$eq``, ``$ne``, ``$in``, ``$gt``, ``$gte``, ``$lt``, ``$lte``)."""
        [res] = self.batch([self._request(text, budget, as_of=as_of, explain=explain or None,
                                          embedding=list(embedding) if embedding else None,
                                          config=dict(config) if config else None,
                                          context=context or None,
                                          id_prefix=id_prefix or None,
                                          filter=dict(filter) if filter else None)])
        if "error" in res:
            err = res["error"]
            if err["code"] == "timeout":
                raise QueryTimeout(err["message"])
            raise query_error(err["code"], err["message"])
        return res

    def batch(self, requests: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Many queries at once; results (or error objects) in order."""
        reqs = []
        for r in requests:
            d = dict(r)
            d.setdefault("ns", self.ns)
            if self.agent:
                d.setdefault("agent", self.agent)
            reqs.append(d)
        return self._t.queries(reqs)

    # -- for agents --------------------------------------------------------------------------
    def remember(self, text: str, *, kind: Literal["note", "scratch"] = "note",
                 scope: Literal["shared", "private"] = "shared", note_id: str | None = None,
                 tokens: int | None = None, embedding: Sequence[float] | None = None,
                 supersedes: Sequence[str] = (),
                 duplicates: Literal["report", "supersede", "ignore", "keep"] = "report",
                 metadata: Mapping[str, str | int | float | bool] | None = None,
                 expires_at: datetime | str | None = None) -> Remembered:
        """Store a note; returns its id (a new time-ordered one unless ``note_id`` is given)
        as a ``Remembered`` (a ``str``) that also lists the near-duplicates found before
        writing (``duplicates``: notes this agent may see whose word overlap with ``text``
        reaches the config's ``duplicate_threshold``; a lookup of the projector's index, no
        query; None when the check could not run, ``duplicates_unchecked`` says why). An
        exact twin (same normalised text) of this agent's own active note is not written:
        the id returned is the twin's, and ``duplicate_of`` names it. ``"keep"``: write it
        anyway; ``"supersede"``: the new note also supersedes the near-duplicates this agent
        wrote; ``"ignore"``: do not look.
        ``supersedes``: notes this one replaces (they leave future answers, their uses carry
        over to it); only their author may supersede them (``NotAllowed``). ``metadata``:
        string keys to scalar values (at most 32 keys; filters match on them);
        ``expires_at`` (RFC 3339 or an aware datetime): from then on the note is in no
        answer."""
        nid = note_id or new_id("n")
        self._may_choose(nid, "remember")
        ev: dict[str, Any] = {"type": "note.created", "note_id": nid, "text": text,
                              "kind": kind, "scope": scope}
        if tokens is not None:
            ev["tokens"] = tokens
        if embedding is not None:
            ev["embedding"] = list(embedding)
        if supersedes:
            ev["supersedes"] = list(supersedes)
        if metadata:
            ev["metadata"] = dict(metadata)
        if expires_at is not None:
            ev["expires_at"] = (expires_at.isoformat() if isinstance(expires_at, datetime)
                                else expires_at)
        return self._t.remember(self._fill(ev), duplicates)

    def revise(self, note_id: str, text: str, *, tokens: int | None = None,
               embedding: Sequence[float] | None = None,
               kind: Literal["note", "scratch"] | None = None,
               metadata: Mapping[str, str | int | float | bool] | None = None,
               expected_version: int | None = None) -> None:
        """A new text for a note (it keeps its id, uses and tier; an answer as of before now
        still shows the old text). Only its author may revise it (``NotAllowed``), or an admin;
        ``UnknownNote`` if this agent cannot see it. ``tokens`` absent: estimated from the new
        text; ``embedding`` absent: the note has none after it; ``kind`` absent: unchanged;
        ``metadata`` absent: unchanged (``{}`` clears it). ``expected_version``: revise only
        if the note is still at that version (``Note.version``), else ``VersionConflict``
        and nothing is written."""
        ev: dict[str, Any] = {"type": "note.revised", "note_id": note_id, "text": text}
        if tokens is not None:
            ev["tokens"] = tokens
        if embedding is not None:
            ev["embedding"] = list(embedding)
        if kind is not None:
            ev["kind"] = kind
        if metadata is not None:
            ev["metadata"] = dict(metadata)
        if expected_version is not None:
            ev["expected_version"] = expected_version
        if self.admin and not isinstance(self._t, _HttpTransport):
            ev["as_admin"] = True
        self.append([ev])

    def recall(self, query: str, budget: int = 1000, *, as_of: datetime | str | None = None,
               embedding: Sequence[float] | None = None, id_prefix: str = "",
               filter: Mapping[str, Any] | None = None) -> Recall:
        """The best notes for ``query`` that fit ``budget`` tokens, packed and ordered, and
        ``context``: them rendered for a prompt, each under ``[note_id | date]``; the headers
        count in the budget, so the context never exceeds it. ``id_prefix``: only among notes
        whose id starts with it; ``filter``: only among notes whose metadata matches it
        (``query``)."""
        return recall_from_result(self.query(query, budget, as_of=as_of, embedding=embedding,
                                             context=True, id_prefix=id_prefix, filter=filter))

    def get(self, note_id: str) -> Note | None:
        """The note, if this agent may see it (live; shared or its own), with every write made
        before the call applied (no worker needed); else None."""
        got = self.read_notes([note_id])
        return got[0] if got else None

    def read_notes(self, note_ids: Sequence[str]) -> list[Note]:
        """The notes of ``note_ids`` this agent may see, in the order asked (read 1000 at a
        time)."""
        ids = list(note_ids)
        return [Note.from_row(r) for i in range(0, len(ids), READ_CHUNK)
                for r in self._read({"note_ids": ids[i:i + READ_CHUNK]})]

    def notes(self, prefix: str = "", *, after: str = "", limit: int = 100) -> list[Note]:
        """The notes this agent may see whose id starts with ``prefix``, in id order, after
        the id ``after`` (the last of the previous page), at most ``limit`` (1..1000)."""
        return [Note.from_row(r)
                for r in self._read({"prefix": prefix, "after": after, "limit": limit})]

    def _read(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        return self._t.read(self.ns, self.agent, body)

    def used(self, *note_ids: str) -> int:
        """Say which notes the agent actually used (they earn permanence); returns how many
        uses were recorded. ``UnknownNote`` (nothing recorded) if one is not a note this
        agent can see."""
        return self.append([{"type": "note.used", "note_id": n} for n in note_ids])

    def forget(self, note_id: str) -> None:
        """The note is gone from every future answer (it stays in the log). ``UnknownNote``
        if this agent cannot see it; ``NotAllowed`` for another author's note (an admin
        may forget any)."""
        ev: dict[str, Any] = {"type": "note.forgotten", "note_id": note_id}
        if self.admin and not isinstance(self._t, _HttpTransport):
            ev["as_admin"] = True
        self.append([ev])

    def erase(self, note_id: str) -> dict[str, Any]:
        """Erase a note: its text and embedding are removed from everything hivemind wrote
        (the log is rewritten; replay gives the same state, without the content). Returns
        once that is done: ``{"note_id", "event_id", "redacted": {kind: count},
        "redacted_in_all": {kind: count}}`` (``redacted``: what this call rewrote, none of
        what the worker's redaction job rewrote first; ``redacted_in_all``: the copies now
        redacted, whoever redacted them; see ``DELETE .../notes/{note_id}``). Over HTTP
        the token needs the ``admin`` right (else ``AccessDenied``); over a store URL this
        Memory must be the operator's (``admin=True``, else ``NotAllowed``).
        ``UnknownNote`` if the namespace has no such note."""
        note_id = str(note_id)  # what remember returned (a Remembered) works as is
        if isinstance(self._t, _HttpTransport):
            out: dict[str, Any] = self._t.call("DELETE", f"/notes/{note_id}", kind="event")
            return out
        if not self.admin:
            raise NotAllowed(f"erasing note {note_id!r} is an operator's act: open this Memory "
                             "with admin=True (or use a token with the admin right over HTTP)")
        assert isinstance(self._t, _StoreTransport)
        from hivemind_memory.projections.store.erasure import erasure_counts

        got = self._t.client.erase(self.ns, [note_id], agent=self.agent or "operator",
                                   timeout_s=self.timeout, on_append=self._t.on_write)
        return {"note_id": note_id, "event_id": got.event_ids[0] if got.event_ids else None,
                "redacted": erasure_counts(got.redaction), "redacted_in_all": got.in_all}


class AsyncMemory:
    """``Memory`` for asyncio code: the same calls, awaitable. Each runs the synchronous call
    in a worker thread (``asyncio.to_thread``), so an event loop is never blocked."""

    def __init__(self, url: str, *, ns: str, agent: str = "", token: str | None = None,
                 timeout: float = 30.0, settings: Any = None, admin: bool = False) -> None:
        self.sync = Memory(url, ns=ns, agent=agent, token=token, timeout=timeout,
                           settings=settings, admin=admin)

    @classmethod
    def of(cls, memory: Memory) -> AsyncMemory:
        """An ``AsyncMemory`` over an open ``Memory`` (closing either closes both)."""
        m = cls.__new__(cls)
        m.sync = memory
        return m

    @property
    def ns(self) -> str:
        return self.sync.ns

    @property
    def agent(self) -> str:
        return self.sync.agent

    async def __aenter__(self) -> AsyncMemory:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def remember(self, text: str, **kw: Any) -> Remembered:
        return await asyncio.to_thread(self.sync.remember, text, **kw)

    async def revise(self, note_id: str, text: str, **kw: Any) -> None:
        await asyncio.to_thread(self.sync.revise, note_id, text, **kw)

    async def recall(self, query: str, budget: int = 1000, **kw: Any) -> Recall:
        return await asyncio.to_thread(self.sync.recall, query, budget, **kw)

    async def used(self, *note_ids: str) -> int:
        return await asyncio.to_thread(self.sync.used, *note_ids)

    async def forget(self, note_id: str) -> None:
        await asyncio.to_thread(self.sync.forget, note_id)

    async def erase(self, note_id: str) -> dict[str, Any]:
        return await asyncio.to_thread(self.sync.erase, note_id)

    async def get(self, note_id: str) -> Note | None:
        return await asyncio.to_thread(self.sync.get, note_id)

    async def read_notes(self, note_ids: Sequence[str]) -> list[Note]:
        return await asyncio.to_thread(self.sync.read_notes, note_ids)

    async def notes(self, prefix: str = "", *, after: str = "", limit: int = 100) -> list[Note]:
        return await asyncio.to_thread(self.sync.notes, prefix, after=after, limit=limit)

    async def append(self, events: Sequence[Mapping[str, Any]]) -> int:
        return await asyncio.to_thread(self.sync.append, events)

    async def query(self, text: str, budget: int, **kw: Any) -> dict[str, Any]:
        return await asyncio.to_thread(self.sync.query, text, budget, **kw)

    async def batch(self, requests: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self.sync.batch, requests)

    async def close(self) -> None:
        await asyncio.to_thread(self.sync.close)
