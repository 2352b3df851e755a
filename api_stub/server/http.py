"""``hivemind serve``: the HTTP JSON API (Starlette on uvicorn). No ranking here: every endpoint
validates, checks the token, and calls the Python client or reads the store.

Why Starlette + msgspec rather than Litestar: the MCP SDK already brings Starlette and uvicorn
(so no second framework), the MCP streamable-HTTP app mounts into it as is, and the contract's
error object, status codes and body caps are ours to write instead of a framework's to
override. The OpenAPI document is built from the same msgspec structs the code validates with.

Identity: the agent of every event and query is the bearer token's. A body may omit
``agent`` (and ``ns``); if it names them they must match (another agent: 403, another
namespace: 422). Without a tokens file the server is for one trusted user on loopback: the
agent is whatever the body names.
"""

from __future__ import annotations

import contextlib
import html
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeVar

import anyio.to_thread
import msgspec
import redis
import structlog
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from hivemind_memory.api_stub.client import SHARD_RETRY_AFTER_S, Client
from hivemind_memory.api_stub.protocol.jobs import query_queue_name
from hivemind_memory.api_stub.protocol.messages import (
    MAX_BUDGET,
    IdPrefix,
    QueryResult,
    ReadRequest,
    error_json,
    ns_of,
    parse_request,
)
from hivemind_memory.api_stub.sdk import new_id, now_rfc3339
from hivemind_memory.api_stub.server import explorer
from hivemind_memory.api_stub.server.access import AccessLog
from hivemind_memory.api_stub.server.common import ApiError, audited, grant_of
from hivemind_memory.api_stub.server.guard import OpenModeGuard
from hivemind_memory.api_stub.server.tokens import (
    Grant,
    Right,
    TokenTable,
)
from hivemind_memory.events import noteids
from hivemind_memory.events.codec import parse_json_event
from hivemind_memory.events.errors import (
    WARMING_RETRY_S,
    CatchUpTimeout,
    EventError,
    ForeignNoteId,
    QueryError,
    QueryTimeout,
    StoreError,
    WriteRefused,
)
from hivemind_memory.events.schema import (
    ID_PATTERN,
    NS_PATTERN,
    Embedding,
    Event,
    NoteCreated,
    UtcDatetime,
)
from hivemind_memory.projections.ranking.config import load_config
from hivemind_memory.projections.state import NoteRow, note_row
from hivemind_memory.projections.store import results
from hivemind_memory.projections.store.audit_trail import audit_event, audit_page
from hivemind_memory.projections.store.erasure import erasure_counts
from hivemind_memory.projections.store.readmodel import read_notes
from hivemind_memory.worker.audit.reproduce import (
    NoteShow,
    ReproduceSummary,
    note_history,
    reproduce_queries,
    show_of,
)
from hivemind_memory.worker.ops import heartbeat, metrics
from hivemind_memory.worker.ops.status import DeadLetters, Status, dead_letters, read_status

log = structlog.get_logger("hivemind.http")
_T = TypeVar("_T")

MAX_BODY_BYTES = 1024 * 1024
"""Largest request body (bytes) by default; ``--max-body`` changes it. Over it: 413."""
MAX_EVENTS = 1000
ADMIN_EVENTS = ("note.forgotten", "note.revised", "note.erased")
"""Events whose ``as_admin`` the server sets from the token's ``admin`` right."""
"""Most events in one ``POST .../events``; more: 413."""
MAX_QUERIES = 1000
"""Most queries in one ``POST .../queries`` (the size of batch several workers answer at
once); more: 413."""
MAX_WAIT_S = 30.0
"""Longest ``?wait=`` of ``GET .../results/{id}``."""
MAX_AUDIT = 1000
"""Most audit entries in one ``GET .../audit``."""
MAX_DEAD = 10_000
"""Most dead letters in one ``GET .../dead`` (``?limit=``, default 1000 as in the CLI)."""
MEMORY_STATUS = {"namespace_too_large": 507, "worker_out_of_memory": 503,
                 "index_load_failed": 503}
"""HTTP status of the errors of a worker that cannot hold a namespace's index (its memory
budget, ``worker.memory``): 507 Insufficient Storage when the namespace does not fit the
budget at all, 503 when a load failed (a retry may find memory free or another worker)."""
MAX_REPRODUCE = 1000
"""Most query ids in one ``POST .../audit/reproduce`` (``"all": true`` has no cap)."""


# -- bodies (the OpenAPI document is generated from these) ------------------------------------
class QueryBody(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """A query; ``ns`` and ``agent`` come from the path and the token (if given, must match)."""

    text: Annotated[str, msgspec.Meta(min_length=1, max_length=16_384)]
    budget: Annotated[int, msgspec.Meta(ge=1, le=MAX_BUDGET)]
    as_of: UtcDatetime | None = None
    explain: bool = False
    embedding: Embedding | None = None
    config: dict[str, Any] | None = None
    ns: Annotated[str, msgspec.Meta(pattern=NS_PATTERN)] | None = None
    agent: Annotated[str, msgspec.Meta(pattern="^$|" + ID_PATTERN)] | None = None
    context: bool = False
    """Answer the packed notes rendered as one ``context`` text too, each under a
    ``[note_id | date]`` header whose cost counts in the budget."""
    id_prefix: IdPrefix = ""
    """Only notes whose id starts with this are candidates."""
    filter: dict[str, Any] | None = None
    """Only notes whose metadata matches are candidates (LangGraph's form: ``{"k": v}``,
    ``$eq``, ``$ne``, ``$in``, ``$gt``, ``$gte``, ``$lt``, ``$lte``)."""


class Appended(msgspec.Struct):
    appended: int
    """Events accepted (each applies exactly once; a retry's events count, see ``already``)."""
    event_ids: list[str] = []
    """Each event's id, in order (the server makes one for an event that has none)."""
    already: int = 0
    """Events of this request that were already in the log (a retry): not appended again."""


class RememberBody(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """``POST .../remember``: a note; ``note_id`` (default: a new time-ordered one),
    ``event_id`` and ``at`` (default: the server's) may be left out."""

    text: str
    kind: str | None = None
    scope: str | None = None
    note_id: str | None = None
    tokens: int | None = None
    embedding: list[float] | None = None
    event_id: str | None = None
    at: str | None = None
    agent: str | None = None
    supersedes: list[str] | None = None
    """Notes this one replaces (they leave future answers; their uses carry over to it)."""
    metadata: dict[str, str | int | float | bool] | None = None
    """String keys to scalar values; ``filter`` on a query matches on them."""
    expires_at: str | None = None
    """RFC 3339: from then on the note is in no answer."""
    duplicates: Literal["report", "supersede", "ignore", "keep"] = "report"
    """Near-duplicates (notes the writer may see whose word overlap with ``text`` reaches
    the config's ``duplicate_threshold``): ``report`` them in the answer, also
    ``supersede`` those the writer wrote, ``keep`` (report them, and write even an exact
    twin), or ``ignore`` (do not look). Except with ``keep`` and ``ignore``, an exact twin
    (same normalised text) of the writer's own active note is not written: the answer names
    it (``duplicate_of``)."""


class ReviseBody(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """``POST .../revise``: a new text (and optionally tokens, embedding, kind) for a note
    (its author, or an ``admin`` token)."""

    note_id: str
    text: str
    tokens: int | None = None
    embedding: list[float] | None = None
    kind: str | None = None
    event_id: str | None = None
    at: str | None = None
    agent: str | None = None
    metadata: dict[str, str | int | float | bool] | None = None
    """The note's metadata from now on (absent: unchanged; ``{}``: none)."""
    expected_version: int | None = None
    """Revise only if the note is at this version (409 ``version_conflict`` otherwise)."""


class UsedBody(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """``POST .../used``: the notes the agent used."""

    note_ids: Annotated[list[str], msgspec.Meta(min_length=1, max_length=MAX_EVENTS)]
    agent: str | None = None


class ForgetBody(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """``POST .../forget``: the note to forget."""

    note_id: str
    agent: str | None = None


class RecallBody(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """``POST .../recall``: a question and a budget in tokens (default 1000)."""

    query: str
    budget: int = 1000
    as_of: str | None = None
    agent: str | None = None
    embedding: list[float] | None = None


class RecalledNote(msgspec.Struct):
    note_id: str
    created_at: str
    score: float
    tokens: int
    cost: int
    """``tokens`` plus the note's header in the context."""


class Recalled(msgspec.Struct):
    """What ``recall`` answers: ``context`` is ready to paste into a prompt."""

    query_id: str
    context: str
    notes: list[RecalledNote]
    used_tokens: int
    budget: int


class Duplicate(msgspec.Struct):
    note_id: str
    overlap: float
    """Word overlap of the two texts, 0..1 (``projections.ranking.similarity``)."""


class Remembered(msgspec.Struct, omit_defaults=True):
    note_id: str
    """The new note's id; the twin's when ``duplicate_of`` is set."""
    event_id: str
    duplicates_checked: bool
    """Whether near-duplicates were looked for (false: ``duplicates: "ignore"``, or the check
    could not run and ``duplicates_unchecked`` says why)."""
    duplicates: list[Duplicate] | None
    """Near-duplicates found before writing, most similar first; null: not checked."""
    duplicate_of: str | None = None
    """The writer's own active note with the same normalised text: nothing was written."""
    duplicates_unchecked: str | None = None
    """Why the check could not run (the note was written unchecked)."""
    superseded: list[str] = []
    """The notes the new note superseded."""


class Revised(msgspec.Struct):
    note_id: str
    event_id: str


class Forgot(msgspec.Struct):
    note_id: str
    event_id: str


class Erased(msgspec.Struct):
    """What ``DELETE .../notes/{note_id}`` answers once the note's content is gone from
    everything hivemind wrote: the event that erased it (null: it was erased before, and
    only the redaction ran again) and what was rewritten, by kind (``log_entries``,
    ``dead_letters``, ``audit_entries``, ``query_embeddings``, ``results``, ``jobs``,
    ``snapshot_keys``, ``file_records``)."""

    note_id: str
    event_id: str | None
    redacted: dict[str, int]


class Whoami(msgspec.Struct):
    """``GET .../whoami``: the token's agent (null in open mode) and what a note id it
    chooses must end with (``events.noteids``; "" when any id is free to it)."""

    agent: str | None
    id_suffix: str


class ErrorDetail(msgspec.Struct):
    code: str
    message: str


class ErrorResponse(msgspec.Struct):
    error: ErrorDetail


class Health(msgspec.Struct):
    ok: bool
    detail: str = ""


class AuditEntry(msgspec.Struct):
    id: str
    event: dict[str, Any]


class ReproduceBody(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Which served queries to re-run: ``query_ids``, or ``"all": true``."""

    query_ids: Annotated[list[Annotated[str, msgspec.Meta(min_length=1, max_length=256)]],
                         msgspec.Meta(max_length=MAX_REPRODUCE)] = []
    all: bool = False


@dataclass
class ServerOptions:
    """What ``create_app`` needs besides the client."""

    tokens: TokenTable | None = None
    """None: no authentication (loopback only, the CLI enforces it)."""
    max_body: int = MAX_BODY_BYTES
    query_timeout_s: float = 30.0
    on_write: Callable[[], None] = field(default=lambda: None)
    """Called after an append or a query submission (wakes an in-process worker)."""
    workers_alive: Callable[[], int] | None = None
    """How many workers serve the queues (default: the live heartbeats, ``worker.ops.heartbeat``,
    which ``/metrics`` and ``hivemind status`` count too)."""
    caught_up: Callable[[], bool] = field(default=lambda: True)
    """False while the read model is still being rebuilt after a start (readyz: 503)."""
    mcp_app: ASGIApp | None = None
    """The MCP streamable-HTTP app to mount at ``/mcp`` (token-checked here first)."""
    mcp_lifespan: Callable[[], contextlib.AbstractAsyncContextManager[Any]] | None = None


_json = msgspec.json.Encoder()


def _respond(obj: Any, status: int = 200) -> Response:
    return Response(_json.encode(obj), status_code=status, media_type="application/json")


RETRY_AFTER_S = {"shard_unavailable": SHARD_RETRY_AFTER_S, "index_warming": WARMING_RETRY_S}
"""Error codes answered 503 with a ``Retry-After`` (seconds): the query was right, no worker
could take it now."""


def _retry_after(code: str) -> dict[str, str] | None:
    s = RETRY_AFTER_S.get(code)
    return None if s is None else {"Retry-After": str(s)}


def _error(status: int, code: str, message: str) -> Response:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else _retry_after(code)
    return Response(_json.encode(ErrorResponse(ErrorDetail(code, message))), status_code=status,
                    media_type="application/json", headers=headers)


class Api:
    """The endpoints, bound to one client and options."""

    def __init__(self, client: Client, opts: ServerOptions) -> None:
        self.client = client
        self.opts = opts
        self.cfg = load_config(client.settings.config_path)
        """The ranking config the notes listing computes tiers with."""

    # -- helpers ---------------------------------------------------------------------------
    @property
    def tokens(self) -> TokenTable | None:
        """The server's tokens (None: open mode)."""
        return self.opts.tokens

    def grant(self, request: Request) -> Grant:
        """The caller's grant (401 without a known bearer token)."""
        return grant_of(self.opts.tokens, request.headers.get("authorization"))

    def authorize(self, request: Request, right: Right) -> tuple[str, Grant]:
        g = self.grant(request)  # 401 before anything else is looked at
        ns = request.path_params["ns"]
        if not re.fullmatch(NS_PATTERN, ns):
            raise ApiError(404, "not_found", f"namespace {ns!r} must match {NS_PATTERN}")
        if not g.may(ns, right):
            raise ApiError(403, "forbidden",
                           f"this token lacks the {right} right in namespace {ns!r}")
        return ns, g

    async def body(self, request: Request) -> Any:
        cl = request.headers.get("content-length")
        if cl is not None and cl.isdigit() and int(cl) > self.opts.max_body:
            raise ApiError(413, "too_large", f"request body over {self.opts.max_body} bytes")
        chunks: list[bytes] = []
        n = 0
        async for chunk in request.stream():
            n += len(chunk)
            if n > self.opts.max_body:
                raise ApiError(413, "too_large", f"request body over {self.opts.max_body} bytes")
            chunks.append(chunk)
        try:
            return msgspec.json.decode(b"".join(chunks))
        except msgspec.DecodeError as exc:
            raise ApiError(400, "malformed_json", f"body is not JSON: {exc}") from exc
        except RecursionError:  # msgspec's depth limit: no request nests that deep
            raise ApiError(400, "malformed_json", "body is not JSON this API takes: nested "
                           "too deeply") from None

    @staticmethod
    def identity(g: Grant, claimed: Any, where: str) -> str:
        """The agent to act as: the token's; a body naming another agent is refused."""
        if not g.agent:  # open (no tokens): the body names the agent
            if claimed is None:
                return ""
            if not isinstance(claimed, str):
                raise ApiError(422, "invalid_request", f"{where}.agent must be a string")
            return claimed
        if claimed is not None and claimed != g.agent:
            raise ApiError(403, "forbidden_agent",
                           f"{where}.agent is {claimed!r} but this token is agent {g.agent!r}")
        return g.agent

    @staticmethod
    def same_ns(ns: str, claimed: Any, where: str) -> None:
        if claimed is not None and claimed != ns:
            raise ApiError(422, "invalid_request",
                           f"{where}.ns is {claimed!r} but the path names namespace {ns!r}")

    def query_request(self, ns: str, g: Grant, obj: Any, where: str
                      ) -> dict[str, Any] | QueryError:
        """The request to submit, or (in a batch) the ``QueryError`` that takes its place.

        Who and where (agent, namespace) are checked for the whole request; a batch item that
        is otherwise invalid gets its error object in place, as in ``hivemind batch``."""
        if not isinstance(obj, dict):
            raise ApiError(422, "invalid_request", f"{where} must be a JSON object")
        self.same_ns(ns, obj.get("ns"), where)
        req = {**obj, "ns": ns, "agent": self.identity(g, obj.get("agent"), where)}
        try:
            parse_request(req)
        except QueryError as exc:
            err = QueryError(exc.code, f"{where}: {exc.message}")
            if where == "query":
                raise ApiError(422, err.code, err.message) from exc
            return err
        return req

    def check_work(self, reqs: list[dict[str, Any] | QueryError]) -> None:
        """413 ``batch_too_costly`` when a batch asks for more work than ``batch_max_work``
        (budgets summed, an ``as_of`` query ``batch_as_of_weight`` times its budget)."""
        s = self.client.settings
        work = sum(int(r["budget"]) * (s.batch_as_of_weight if r.get("as_of") else 1)
                   for r in reqs if isinstance(r, dict))
        if work > s.batch_max_work:
            raise ApiError(413, "batch_too_costly",
                           f"this batch asks for {work:,} budget tokens of work (budgets summed, "
                           f"as_of queries x{s.batch_as_of_weight}); at most {s.batch_max_work:,}"
                           " a request (HIVEMIND_BATCH_MAX_WORK): split it")

    async def run(self, fn: Callable[[], Any]) -> Any:
        return await anyio.to_thread.run_sync(fn)

    # -- endpoints -------------------------------------------------------------------------
    async def events(self, request: Request) -> Response:
        ns, g = self.authorize(request, "write")
        data = await self.body(request)
        if not isinstance(data, list):
            raise ApiError(422, "invalid_request", "body must be a JSON array of events")
        if len(data) > MAX_EVENTS:
            raise ApiError(413, "too_large", f"{len(data)} events; at most {MAX_EVENTS} a request")
        return _respond(await self.write(ns, g, data, "events"))

    def event(self, ns: str, g: Grant, obj: Any, where: str) -> Event:
        """One event of a request as it will be appended: the namespace of the path, the
        token's agent, an ``event_id`` (time-ordered) and ``at`` (the server's clock) when the
        body has none, and ``as_admin`` from the token's rights (never from the body)."""
        if not isinstance(obj, dict):
            raise ApiError(422, "invalid_event", f"{where}: an event must be a JSON object")
        self.same_ns(ns, obj.get("ns"), where)
        if "as_admin" in obj:
            raise ApiError(422, "invalid_event",
                           f"{where}: as_admin is set by the server from the token's rights")
        agent = self.identity(g, obj.get("agent"), where)
        ev = {"event_id": new_id("ev"), "at": now_rfc3339(), **obj, "ns": ns}
        if agent:
            ev["agent"] = agent
        if ev.get("type") == "note.erased":
            raise ApiError(422, "invalid_event", f"{where}: a note is erased with DELETE "
                           f"/v1/ns/{ns}/notes/{{note_id}} (admin), which also removes its "
                           "content from everything hivemind wrote")
        if ev.get("type") in ADMIN_EVENTS and g.may(ns, "admin"):
            ev["as_admin"] = True
        nid = ev.get("note_id")
        if (ev.get("type") == "note.created" and isinstance(nid, str) and self.owned_ids(ns, g)
                and not noteids.may_choose(nid, g.agent)):
            raise ApiError(403, ForeignNoteId.code, noteids.foreign_message(where, g.agent))
        try:
            return parse_json_event(_json.encode(ev), not_after=self.client.not_after())
        except EventError as exc:
            raise ApiError(422, "invalid_event", f"{where}: {exc}") from exc

    async def write(self, ns: str, g: Grant, objs: list[Any], where: str) -> Appended:
        """Check and append a request's events, all or nothing: a write that would never
        apply gets its typed error (409 ``note_exists``, 404 ``unknown_note``, 403
        ``not_allowed``) and nothing of the request is appended."""
        evs = [self.event(ns, g, obj, f"{where}[{i}]") for i, obj in enumerate(objs)]
        if not evs:
            return Appended(0)
        try:
            got = await self.run(lambda: self.client.append_checked(evs))
        except WriteRefused as exc:
            raise ApiError(exc.status, exc.code, _as_sent(exc, where)) from exc
        self.opts.on_write()
        return Appended(len(evs), [e.event_id for e in evs], got.already)

    async def shaped(self, request: Request, kind: type[_T]) -> _T:
        """The body as the endpoint's struct; 422 naming what is wrong with it."""
        try:
            return msgspec.convert(await self.body(request), kind)
        except msgspec.ValidationError as exc:
            raise ApiError(422, "invalid_request", f"body: {exc}") from exc

    async def whoami(self, request: Request) -> Response:
        """Who the token is, and the ending of the note ids it may choose."""
        g = self.grant(request)
        ns = request.path_params["ns"]
        if not re.fullmatch(NS_PATTERN, ns):
            raise ApiError(404, "not_found", f"namespace {ns!r} must match {NS_PATTERN}")
        return _respond(Whoami(g.agent or None,
                               noteids.id_suffix(g.agent) if self.owned_ids(ns, g) else ""))

    def owned_ids(self, ns: str, g: Grant) -> bool:
        """Whether ``g`` creates notes only with ids of its own space: ``HIVEMIND_NOTE_IDS``
        is ``owned`` and it is a token's agent that may not see every note (no ``admin``)."""
        return (self.client.settings.note_ids == "owned" and bool(g.agent)
                and not g.may(ns, "admin"))

    async def remember(self, request: Request) -> Response:
        """A note -> its id (a new time-ordered one unless given), the event id, the
        near-duplicates found before writing it and the notes it superseded."""
        ns, g = self.authorize(request, "write")
        body = await self.shaped(request, RememberBody)
        raw = {k: v for k, v in msgspec.to_builtins(body).items() if k != "duplicates"}
        ev = self.event(ns, g, {"type": "note.created", "note_id": body.note_id or new_id("n"),
                                **raw}, "remember")
        assert isinstance(ev, NoteCreated)
        try:
            mode = body.duplicates  # without the query right there is no one to report to
            if mode == "report" and not g.may(ns, "query"):
                mode = "ignore"
            got = await self.run(lambda: self.client.remember(ev, mode))
        except WriteRefused as exc:
            raise ApiError(exc.status, exc.code, exc.message) from exc
        self.opts.on_write()
        dups = None if got.duplicates is None or not g.may(ns, "query") else [
            Duplicate(n, o) for n, o in got.duplicates]  # overlaps are reads: query right
        return _respond(Remembered(got.duplicate_of or ev.note_id, ev.event_id,
                                   duplicates_checked=got.duplicates is not None,
                                   duplicates=dups, duplicate_of=got.duplicate_of,
                                   duplicates_unchecked=got.unchecked,
                                   superseded=got.superseded))

    async def revise(self, request: Request) -> Response:
        """A new text for a note -> its id and the event id (``note.revised``)."""
        ns, g = self.authorize(request, "write")
        body = await self.shaped(request, ReviseBody)
        ev = {"type": "note.revised", **msgspec.to_builtins(body)}
        got = await self.write(ns, g, [ev], "revise")
        return _respond(Revised(body.note_id, got.event_ids[0]))

    async def used(self, request: Request) -> Response:
        """The notes the agent used -> how many uses were recorded."""
        ns, g = self.authorize(request, "write")
        body = await self.shaped(request, UsedBody)
        evs = [_no_none({"type": "note.used", "note_id": n, "agent": body.agent})
               for n in body.note_ids]
        return _respond(await self.write(ns, g, evs, "used"))

    async def forget(self, request: Request) -> Response:
        """A note -> its id and the event id that forgot it."""
        ns, g = self.authorize(request, "write")
        body = await self.shaped(request, ForgetBody)
        ev = _no_none({"type": "note.forgotten", "note_id": body.note_id, "agent": body.agent})
        got = await self.write(ns, g, [ev], "forget")
        return _respond(Forgot(body.note_id, got.event_ids[0]))

    async def recall(self, request: Request) -> Response:
        """What the SDK's ``recall`` gives: the packed notes rendered as ``context`` (each
        under ``[note_id | date]``, headers counted in the budget) and what it is made of."""
        ns, g = self.authorize(request, "query")
        body = await self.shaped(request, RecallBody)
        req = {k: v for k, v in msgspec.to_builtins(body).items() if k != "query"}
        req.update(text=body.query, budget=body.budget, context=True)
        [raw] = await self._answer([self.query_request(ns, g, req, "recall")])
        res = msgspec.json.decode(raw)
        if "error" in res:
            code = res["error"]["code"]
            raise ApiError(504 if code in ("timeout", "catch_up_timeout") else
                           503 if code in RETRY_AFTER_S else MEMORY_STATUS.get(code, 422), code,
                           res["error"]["message"])
        notes = [RecalledNote(n["note_id"], n["created_at"], n["score"], n["tokens"], n["cost"])
                 for n in res["notes"]]
        return _respond(Recalled(res["query_id"], res["context"], notes, res["used"],
                                 res["budget"]))

    async def _answer(self, reqs: list[dict[str, Any] | QueryError]) -> list[bytes]:
        def go() -> list[bytes]:
            ids = self.client.submit_batch(reqs)
            self.opts.on_write()
            return list(self.client.batch_results(ids, self.opts.query_timeout_s))

        return list(await self.run(go))

    async def query(self, request: Request) -> Response:
        ns, g = self.authorize(request, "query")
        [body] = await self._answer([self.query_request(ns, g, await self.body(request),
                                                        "query")])
        obj = msgspec.json.decode(body)
        if "error" in obj:
            code = obj["error"]["code"]
            status = {"invalid_request": 422, "timeout": 504, "catch_up_timeout": 504,
                      **MEMORY_STATUS}.get(code, 503 if code in RETRY_AFTER_S else 500)
            return Response(body, status_code=status, media_type="application/json",
                            headers=_retry_after(code))
        return Response(body, media_type="application/json")

    async def queries(self, request: Request) -> Response:
        ns, g = self.authorize(request, "query")
        data = await self.body(request)
        if not isinstance(data, list):
            raise ApiError(422, "invalid_request", "body must be a JSON array of queries")
        if len(data) > MAX_QUERIES:
            raise ApiError(413, "too_large",
                           f"{len(data)} queries; at most {MAX_QUERIES} a request")
        reqs = [self.query_request(ns, g, obj, f"queries[{i}]") for i, obj in enumerate(data)]
        self.check_work(reqs)
        if not reqs:
            return Response(b"[]", media_type="application/json")

        def submit() -> list[str]:
            ids = self.client.submit_batch(reqs)
            self.opts.on_write()
            return ids

        ids = await self.run(submit)
        runs = self.client.batch_result_runs(ids, self.opts.query_timeout_s)

        cap = self.client.settings.batch_max_answer_bytes
        too_large = (f"the answers of this batch passed {cap:,} bytes "
                     "(HIVEMIND_BATCH_MAX_ANSWER_BYTES): ask for this query again, or for less")

        def capped(run: list[bytes], first: int, size: list[int]) -> list[bytes]:
            """``run`` with each answer that would take the batch past ``cap`` bytes replaced
            by its ``answer_too_large`` error object (``size``: bytes so far, updated)."""
            out = []
            for i, body in enumerate(run):
                if size[0] + len(body) > cap:
                    body = error_json(ids[first + i], "answer_too_large", too_large)
                size[0] += len(body)
                out.append(body)
            return out

        def array() -> Iterator[bytes]:  # the worker's bytes as they are, in input order
            sent = 0
            size = [0]
            try:
                for run in runs:
                    yield (b"[" if not sent else b",") + b",".join(capped(run, sent, size))
                    sent += len(run)
            except (redis.RedisError, StoreError) as exc:
                # the status line is gone already: the answers sent stay, and every query
                # not answered yet gets its error object in place, so the array stays whole
                log.warning("store_error", error=str(exc), answered=sent, left=len(ids) - sent)
                why = f"the store failed while the answers were read: {type(exc).__name__}"
                left = [error_json(qid, "store_unavailable", why) for qid in ids[sent:]]
                if left:
                    yield (b"[" if not sent else b",") + b",".join(left)
                    sent += len(left)
            yield b"]" if sent else b"[]"

        # streamed as the jobs finish (one chunk per round trip of results), never re-encoded
        return StreamingResponse(array(), media_type="application/json")

    async def result(self, request: Request) -> Response:
        ns, g = self.authorize(request, "query")
        qid = request.path_params["query_id"]
        try:
            if ns_of(qid) != ns:
                raise ApiError(404, "not_found", f"query {qid!r} is not in namespace {ns!r}")
        except QueryError as exc:
            raise ApiError(404, "not_found", exc.message) from exc
        raw_wait = request.query_params.get("wait", "0")
        try:
            wait = float(raw_wait)
        except ValueError:
            raise ApiError(400, "invalid_request", f"wait={raw_wait!r} is not a number") from None
        if not 0 <= wait <= MAX_WAIT_S:
            raise ApiError(400, "invalid_request", f"wait must be within 0..{MAX_WAIT_S:g}")

        def get() -> bytes | None:
            body = results.read_result(self.client.store, ns, qid)
            if body is None and wait > 0:
                results.wait_done(self.client.store, ns, qid, wait)
                body = results.read_result(self.client.store, ns, qid)
            return body

        body = await self.run(get)
        if body is not None and g.agent and "admin" not in g.rights:
            owner = msgspec.json.decode(body).get("agent")
            if owner is not None and owner != g.agent:
                body = None  # another agent's answer (it may hold their private notes)
        if body is None:
            why = await self.run(lambda: self.client.shard_problem(ns))
            if why is not None:  # still queued, and no worker to answer it for now
                raise ApiError(503, "shard_unavailable", f"query {qid}: {why}")
            raise ApiError(404, "not_found", f"no result for query {qid!r} (yet)")
        return Response(body, media_type="application/json")

    def wait_projected(self, ns: str) -> None:
        """Block until the worker has projected every event appended before now (read your
        writes for the notes view); 504 after ``query_timeout_s``. Waits, never projects."""
        if not self.client.wait_projected(ns, self.opts.query_timeout_s):
            raise ApiError(504, "catch_up_timeout",
                           f"namespace {ns!r} not projected in time (is a worker running?)")

    async def notes(self, request: Request) -> Response:
        ns, _ = self.authorize(request, "admin")

        def read() -> dict[str, Any]:
            self.wait_projected(ns)
            return read_notes(self.client.store, ns)

        notes = await self.run(read)
        return _respond([note_row(notes[k], self.cfg) for k in sorted(notes)])

    async def read(self, request: Request) -> Response:
        """``ReadBody`` -> the notes the token's agent may see, as rows of ``/notes``."""
        ns, g = self.authorize(request, "query")
        body = await self.shaped(request, ReadRequest)
        if bool(body.note_ids) == (body.prefix is not None):
            raise ApiError(422, "invalid_request",
                           'give "note_ids" (a non-empty list) or "prefix", not both')
        agent = self.identity(g, body.agent, "read")
        return _respond(await self.run(lambda: self.client.read(ns, agent, body)))

    async def audit(self, request: Request) -> Response:
        ns, _ = self.authorize(request, "admin")
        raw_limit = request.query_params.get("limit", "100")
        if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= MAX_AUDIT:
            raise ApiError(400, "invalid_request", f"limit must be an integer 1..{MAX_AUDIT}")
        page = await self.run(lambda: audit_page(self.client.store, ns, None, int(raw_limit)))
        out = [AuditEntry(e.id.decode(), msgspec.json.decode(audit_event(e) or b"{}"))
               for e in reversed(page)]
        return _respond(out)

    async def healthz(self, request: Request) -> Response:
        return _respond(Health(True))

    async def metrics(self, request: Request) -> Response:
        """Prometheus exposition (worker/ops/metrics.py): lag, dead letters, queries per namespace.
        It names every namespace: a token with the ``metrics`` right, or ``admin`` in every
        namespace (401 without a token, 403 with another)."""
        g = self.grant(request)
        if "metrics" not in g.rights and not ("admin" in g.rights and "*" in g.namespaces):
            raise ApiError(403, "forbidden", "/metrics needs a token with the metrics right "
                           "(or admin in every namespace)")
        body = await self.run(metrics.render)
        return Response(body, media_type=metrics.CONTENT_TYPE)

    async def readyz(self, request: Request) -> Response:
        def check() -> Health:
            try:
                self.client.store.ping()
            except redis.RedisError as exc:
                return Health(False, f"store unreachable: {exc}")
            beats = heartbeat.read_beats(self.client.rq)
            # the heartbeats /metrics and `hivemind status` count too
            n = len(beats) if self.opts.workers_alive is None else self.opts.workers_alive()
            if n < 1:
                return Health(False, "no worker is running (start `hivemind worker`)")
            total = self.client.settings.shards  # the shards no live worker listens to
            served = {q for b in beats for q in b.queues}
            missing = [k for k in range(total) if query_queue_name(k, total) not in served]
            if missing and self.opts.workers_alive is None:
                return Health(False, f"shard(s) {', '.join(map(str, missing))} of {total} have "
                              "no live worker: their queries get shard_unavailable (start "
                              "`hivemind worker --shards N`)")
            if not self.opts.caught_up():
                return Health(False, "rebuilding the read model from the log")
            # namespaces a worker could not hold (memory budget): ready, but said
            cannot = [f"{f.ns}: {f.code} ({b.name})" for b in beats if b.memory is not None
                      for f in b.memory.failures]
            return Health(True, f"{n} worker(s)" + (
                "; cannot hold " + "; ".join(cannot) if cannot else ""))

        h = await self.run(check)
        return _respond(h, 200 if h.ok else 503)

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(openapi_document())

    async def docs(self, request: Request) -> Response:
        return HTMLResponse(docs_page())

    # -- admin: what the operator's CLI commands show, for a store `serve` holds -------------
    # (a memory://PATH store is locked by its one process; these read what the CLI reads,
    # through the same functions; none waits for the projection: they report what is there)
    async def dead(self, request: Request) -> Response:
        """``hivemind dead --ns NS --limit N --json``, as one object."""
        ns, _ = self.authorize(request, "admin")
        limit = _int_param(request, "limit", 1000, 1, MAX_DEAD)
        return _respond(await self.run(lambda: dead_letters(self.client.store, ns, limit)))

    async def status(self, request: Request) -> Response:
        """``hivemind status --json`` for one namespace (the workers are every live one)."""
        ns, _ = self.authorize(request, "admin")
        return _respond(await self.run(lambda: read_status(
            self.client.store, self.client.rq, datetime.now(UTC), only=[ns],
            shards=self.client.settings.shards)))

    async def note(self, request: Request) -> Response:
        """``hivemind show --ns NS NOTE_ID --json``: the note, its events, where it was served."""
        ns, _ = self.authorize(request, "admin")
        nid = request.path_params["note_id"]
        if not re.fullmatch(ID_PATTERN, nid):
            raise ApiError(404, "unknown_note", f"note id {nid!r} must match {ID_PATTERN}")
        h = await self.run(lambda: audited(lambda: note_history(self.client.store, ns, nid)))
        if h.note is None and not h.events:
            raise ApiError(404, "unknown_note", f"note {nid!r} is not in namespace {ns!r}")
        return _respond(show_of(h))

    async def erase(self, request: Request) -> Response:
        """``hivemind erase --ns NS NOTE_ID``: erase a note (admin), answered once its content
        is redacted everywhere."""
        ns, g = self.authorize(request, "admin")
        nid = request.path_params["note_id"]
        if not re.fullmatch(ID_PATTERN, nid):
            raise ApiError(404, "unknown_note", f"note id {nid!r} must match {ID_PATTERN}")
        try:
            got = await self.run(lambda: self.client.erase(
                ns, [nid], agent=g.agent or "operator", on_append=self.opts.on_write))
        except WriteRefused as exc:
            raise ApiError(exc.status, exc.code, exc.message) from exc
        except CatchUpTimeout as exc:
            raise ApiError(504, "timeout", str(exc)) from exc
        except StoreError as exc:  # another erasure held the namespace too long, say
            raise ApiError(503, "store_unavailable", str(exc)) from exc
        return _respond(Erased(nid, got.event_ids[0] if got.event_ids else None,
                               erasure_counts(got.redaction)))

    async def reproduce(self, request: Request) -> Response:
        """``hivemind audit reproduce --ns NS (QUERY_ID... | --all) --json``, as one object."""
        ns, _ = self.authorize(request, "admin")
        body = await self.shaped(request, ReproduceBody)
        if bool(body.query_ids) == body.all:
            raise ApiError(422, "invalid_request",
                           'give "query_ids" (a non-empty list) or "all": true, not both')
        ids = None if body.all else body.query_ids
        got = await self.run(lambda: audited(
            lambda: reproduce_queries(self.client.store, ns, self.cfg, ids)))
        return _respond(got)


def _int_param(request: Request, name: str, default: int, lo: int, hi: int) -> int:
    raw = request.query_params.get(name, str(default))
    if not raw.isdigit() or not lo <= int(raw) <= hi:
        raise ApiError(400, "invalid_request", f"{name} must be an integer {lo}..{hi}")
    return int(raw)


def _no_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


SENT_AS = {"used": "note_ids[{}]", "revise": "note_id", "forget": "note_id"}
"""What a refused event is called in the body of each endpoint that builds its events
(``/events`` sends them as they are: ``events[i]``, the client's own word)."""


def _as_sent(exc: WriteRefused, where: str) -> str:
    """A refusal's message naming the event as the request sent it: ``POST .../used``
    refused for its second note says ``note_ids[1] (note.used 'x'): ...``, not
    ``events[1]``, a field that body does not have."""
    prefix = f"events[{exc.index}]"
    shape = SENT_AS.get(where)
    if shape is None or not exc.message.startswith(prefix):
        return exc.message
    return shape.format(exc.index) + exc.message[len(prefix):]




MCP_AUTH_ERROR = -32001
"""JSON-RPC error code of an MCP request refused for its token (the server-defined range)."""


class _McpGate:
    """Checks the bearer token before a request reaches the MCP app.

    A refusal keeps its HTTP status (401) and carries a JSON-RPC error object as the body:
    MCP clients show that object's message ("missing token: ...", "unknown token: ..."); a
    plain body reached them as a bare "Server returned an error response". The
    ``WWW-Authenticate`` challenge is RFC 6750's (``error="invalid_token"`` for an unknown
    one), with no OAuth metadata: tokens come from the server's tokens file."""

    def __init__(self, app: ASGIApp, tokens: TokenTable | None) -> None:
        self.app, self.tokens = app, tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            hdrs = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
            try:
                grant_of(self.tokens, hdrs.get("authorization"))
            except ApiError as exc:
                await _mcp_refusal(exc, "authorization" in hdrs)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _mcp_refusal(exc: ApiError, sent_credentials: bool) -> Response:
    body = {"jsonrpc": "2.0", "id": None,
            "error": {"code": MCP_AUTH_ERROR, "message": exc.message,
                      "data": {"status": exc.status, "code": exc.code}}}
    challenge = 'Bearer realm="hivemind"'
    if sent_credentials:  # RFC 6750 3.1: no error code when none were sent
        desc = exc.message.replace('"', "'")
        challenge += f', error="invalid_token", error_description="{desc}"'
    return Response(_json.encode(body), status_code=exc.status, media_type="application/json",
                    headers={"WWW-Authenticate": challenge})


def _wrap(fn: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        try:
            return await fn(request)
        except ApiError as exc:
            return _error(exc.status, exc.code, exc.message)
        except QueryTimeout as exc:
            return _error(504, "timeout", str(exc))
        except redis.RedisError as exc:
            log.warning("store_error", error=str(exc))
            return _error(503, "store_unavailable", f"the store failed: {type(exc).__name__}")
        except StoreError as exc:  # hivemind's own words (a write that kept losing its race)
            log.warning("store_error", error=str(exc))
            return _error(503, "store_unavailable", str(exc))

    return endpoint


def create_app(client: Client, opts: ServerOptions | None = None) -> Starlette:
    """The ASGI application of ``hivemind serve``."""
    opts = opts or ServerOptions()
    api = Api(client, opts)
    metrics.watch_store(client.store, client.rq)
    ns = "/v1/ns/{ns}"
    routes: list[BaseRoute] = [
        Route(f"{ns}/whoami", _wrap(api.whoami), methods=["GET"]),
        Route(f"{ns}/events", _wrap(api.events), methods=["POST"]),
        Route(f"{ns}/remember", _wrap(api.remember), methods=["POST"]),
        Route(f"{ns}/used", _wrap(api.used), methods=["POST"]),
        Route(f"{ns}/forget", _wrap(api.forget), methods=["POST"]),
        Route(f"{ns}/revise", _wrap(api.revise), methods=["POST"]),
        Route(f"{ns}/recall", _wrap(api.recall), methods=["POST"]),
        Route(f"{ns}/query", _wrap(api.query), methods=["POST"]),
        Route(f"{ns}/queries", _wrap(api.queries), methods=["POST"]),
        Route(f"{ns}/results/{{query_id}}", _wrap(api.result), methods=["GET"]),
        Route(f"{ns}/notes", _wrap(api.notes), methods=["GET"]),
        Route(f"{ns}/read", _wrap(api.read), methods=["POST"]),
        Route(f"{ns}/audit", _wrap(api.audit), methods=["GET"]),
        Route(f"{ns}/dead", _wrap(api.dead), methods=["GET"]),
        Route(f"{ns}/status", _wrap(api.status), methods=["GET"]),
        Route(f"{ns}/notes/{{note_id}}", _wrap(api.note), methods=["GET"]),
        Route(f"{ns}/notes/{{note_id}}", _wrap(api.erase), methods=["DELETE"]),
        Route(f"{ns}/audit/reproduce", _wrap(api.reproduce), methods=["POST"]),
        Route("/healthz", _wrap(api.healthz), methods=["GET"]),
        Route("/metrics", _wrap(api.metrics), methods=["GET"]),
        Route("/readyz", _wrap(api.readyz), methods=["GET"]),
        Route("/openapi.json", _wrap(api.openapi), methods=["GET"]),
        Route("/docs", _wrap(api.docs), methods=["GET"]),
        *explorer.routes(api, _wrap),
    ]
    if opts.mcp_app is not None:
        routes.append(Route("/mcp", endpoint=_McpGate(opts.mcp_app, opts.tokens)))

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return _error(exc.status_code, code, str(exc.detail))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if opts.mcp_lifespan is not None:
            async with opts.mcp_lifespan():
                yield
        else:
            yield

    middleware = [Middleware(AccessLog, tokens=opts.tokens)]
    if opts.tokens is None:  # open mode: loopback Host, no foreign Origin, JSON writes only
        middleware.append(Middleware(OpenModeGuard))
    return Starlette(routes=routes, exception_handlers={HTTPException: http_error},
                     lifespan=lifespan, middleware=middleware)


# -- OpenAPI -----------------------------------------------------------------------------------
_EVENT_DOC = ("An event in the `hivemind ingest` format; `ns` and `agent` may be omitted (the "
              "path and the token supply them) and must match when present.")


def openapi_document() -> dict[str, Any]:
    """OpenAPI 3.1 for the API, its schemas generated from the msgspec structs."""
    (refs, comps) = msgspec.json.schema_components(
        [list[Event], QueryBody, list[QueryBody], QueryResult, Appended, ErrorResponse, Health,
         list[NoteRow], list[AuditEntry], RememberBody, Remembered, UsedBody, ForgetBody, Forgot,
         RecallBody, Recalled, ReadRequest, ReviseBody, Revised, Whoami],
        ref_template="#/components/schemas/{name}")
    whoami_ref, refs = refs[-1], refs[:-1]
    for struct in (Appended, NoteRow, Health):  # answers that always carry every field
        c = comps[struct.__name__]
        c["required"] = list(c["properties"])
    for name in ("NoteCreated", "NoteUsed", "NoteForgotten", "NoteRevised", "NoteErased"):
        c = comps[name]
        c["required"] = [f for f in c.get("required", []) if f not in ("ns", "agent")]
        c["description"] = _EVENT_DOC
    events_ref, query_ref, queries_ref, result_ref, appended_ref, error_ref, health_ref, \
        notes_ref, audit_ref, remember_ref, remembered_ref, used_ref, forget_ref, forgot_ref, \
        recall_ref, recalled_ref, read_ref, revise_ref, revised_ref = refs
    err = {"description": "error", "content": {"application/json": {"schema": error_ref}}}

    def ok(schema: dict[str, Any], desc: str = "OK") -> dict[str, Any]:
        return {"description": desc, "content": {"application/json": {"schema": schema}}}

    ns_param = {"name": "ns", "in": "path", "required": True,
                "schema": {"type": "string", "pattern": NS_PATTERN}}
    secured: list[dict[str, list[str]]] = [{"bearer": []}]
    errs = {str(s): err for s in (400, 401, 403, 404, 409, 413, 422, 503, 504)}

    def op(summary: str, responses: dict[str, Any], body: dict[str, Any] | None = None,
           params: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        o: dict[str, Any] = {"summary": summary, "parameters": [ns_param, *(params or [])],
                             "responses": {**responses, **errs}, "security": secured}
        if body is not None:
            o["requestBody"] = {"required": True,
                                "content": {"application/json": {"schema": body}}}
        return o

    p = "/v1/ns/{ns}"
    admin_paths, admin_comps = _admin_openapi(p, op, ok, err)
    comps.update(admin_comps)
    ui_paths, ui_comps = explorer.openapi_paths(op, ok, err, msgspec.json.schema_components)
    comps.update(ui_comps)
    return {
        "openapi": "3.1.0",
        "info": {"title": "hivemind", "version": "1",
                 "description": "Event-sourced shared memory for AI agents."},
        "paths": {
            f"{p}/whoami": {"get": op(
                "The token's agent, and what a note id it chooses must end with (403 "
                "foreign_note_id otherwise; \"\": any id)", {"200": ok(whoami_ref)})},
            f"{p}/events": {"post": op(
                "Append events (all or nothing; 422 names the index and field)",
                {"200": ok(appended_ref)}, body=events_ref)},
            f"{p}/remember": {"post": op(
                "Store a note, reporting its near-duplicates; a text its author already "
                "wrote is not stored again, duplicate_of names that note (409 note_exists for "
                "a reused id; 403 foreign_note_id for an id outside the token's own (see "
                "whoami), taken or not; 404 unknown_note, 403 not_allowed, 409 "
                "already_superseded for what it supersedes)", {"200": ok(remembered_ref)},
                body=remember_ref)},
            f"{p}/revise": {"post": op(
                "A new text for a note: it keeps its id, uses and tier (404 unknown_note; "
                "403 not_allowed: not its author)", {"200": ok(revised_ref)}, body=revise_ref)},
            f"{p}/used": {"post": op(
                "Report the notes the agent used (404 unknown_note: nothing recorded)",
                {"200": ok(appended_ref)}, body=used_ref)},
            f"{p}/forget": {"post": op(
                "Forget a note (404 unknown_note; 403 not_allowed: not its author)",
                {"200": ok(forgot_ref)}, body=forget_ref)},
            f"{p}/recall": {"post": op(
                "The best notes for a question, rendered as one context within the budget",
                {"200": ok(recalled_ref)}, body=recall_ref)},
            f"{p}/read": {"post": op(
                "Notes the agent may see, by id or by id prefix, including writes not yet "
                "projected", {"200": ok(notes_ref)}, body=read_ref)},
            f"{p}/query": {"post": op(
                "Ask for the best notes that fit a token budget", {"200": ok(result_ref)},
                body=query_ref)},
            f"{p}/queries": {"post": op(
                "Many queries; results (or error objects) in order",
                {"200": ok({"type": "array", "items": {}})}, body=queries_ref)},
            f"{p}/results/{{query_id}}": {"get": op(
                "A result by id (404 until it exists)", {"200": ok(result_ref)},
                params=[{"name": "query_id", "in": "path", "required": True,
                         "schema": {"type": "string"}},
                        {"name": "wait", "in": "query", "required": False,
                         "schema": {"type": "number", "minimum": 0, "maximum": MAX_WAIT_S}}])},
            f"{p}/notes": {"get": op(
                "The projected notes, once every event appended before the request is "
                "projected (admin)", {"200": ok(notes_ref)})},
            f"{p}/audit": {"get": op(
                "The newest audit entries, oldest first (admin)", {"200": ok(audit_ref)},
                params=[{"name": "limit", "in": "query", "required": False,
                         "schema": {"type": "integer", "minimum": 1, "maximum": MAX_AUDIT}}])},
            **admin_paths,
            **ui_paths,
            "/healthz": {"get": {"summary": "The process is up",
                                 "responses": {"200": ok(health_ref)}}},
            "/readyz": {"get": {"summary": "The store answers and a worker runs",
                                "responses": {"200": ok(health_ref), "503": ok(health_ref)}}},
        },
        "components": {"schemas": comps,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }


def _admin_openapi(p: str, op: Callable[..., dict[str, Any]], ok: Callable[..., dict[str, Any]],
                   err: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The admin endpoints' paths and schemas (``Api.dead``, ``status``, ``note``,
    ``reproduce``)."""
    (refs, comps) = msgspec.json.schema_components(
        [DeadLetters, Status, NoteShow, ReproduceBody, ReproduceSummary, Erased],
        ref_template="#/components/schemas/{name}")
    dead_ref, status_ref, show_ref, body_ref, summary_ref, erased_ref = refs
    bad_audit = {"500": err}  # an unreadable audit entry in the store (code bad_audit)
    note_param = {"name": "note_id", "in": "path", "required": True,
                  "schema": {"type": "string", "pattern": ID_PATTERN}}
    paths = {
        f"{p}/dead": {"get": op(
            "The dead letters, oldest first, and their total (admin; `hivemind dead`)",
            {"200": ok(dead_ref)},
            params=[{"name": "limit", "in": "query", "required": False,
                     "schema": {"type": "integer", "minimum": 1, "maximum": MAX_DEAD}}])},
        f"{p}/status": {"get": op(
            "Log length, checkpoint, lag, dead letters, queries served; live workers "
            "(admin; `hivemind status`)", {"200": ok(status_ref)})},
        f"{p}/notes/{{note_id}}": {"get": op(
            "A note, its events in log order, the served queries that returned it (admin; "
            "`hivemind show`)", {"200": ok(show_ref), **bad_audit},
            params=[note_param]), "delete": op(
            "Erase a note: its text and embedding are removed from everything hivemind wrote; "
            "answered once that is done (admin; `hivemind erase`; 404 unknown_note)",
            {"200": ok(erased_ref)}, params=[note_param])},
        f"{p}/audit/reproduce": {"post": op(
            "Re-run served queries exactly as they ran; `ok` false lists each difference "
            "(admin; `hivemind audit reproduce`)", {"200": ok(summary_ref), **bad_audit},
            body=body_ref)},
    }
    return paths, comps


def docs_page() -> str:
    """A plain page listing the endpoints (no external assets)."""
    doc = openapi_document()
    rows = "".join(
        f"<tr><td><code>{m.upper()}</code></td><td><code>{html.escape(path)}</code></td>"
        f"<td>{html.escape(o.get('summary', ''))}</td></tr>"
        for path, ops in doc["paths"].items() for m, o in ops.items())
    return ("<!doctype html><title>hivemind API</title><h1>hivemind API</h1>"
            "<p>Machine-readable: <a href='/openapi.json'>/openapi.json</a>. "
            "Send <code>Authorization: Bearer TOKEN</code>.</p>"
            f"<table>{rows}</table>")
