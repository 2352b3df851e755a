"""``hivemind serve``: the handlers of the HTTP JSON API (Starlette on uvicorn). No ranking
here: every endpoint validates, checks the token, and calls the Python client or reads the
store. The route table and the app are in ``routes.py``, the bodies and answers in
``schemas.py``, the OpenAPI document in ``openapi.py``.

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
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

import anyio.to_thread
import msgspec
import structlog
from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.types import ASGIApp

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.jobs import query_queue_name
from hivemind_memory.api_stub.protocol.messages import (
    QueryRequest,
    ReadRequest,
    error_json,
    ns_of,
    parse_request,
)
from hivemind_memory.api_stub.protocol.stamps import filled, new_id
from hivemind_memory.api_stub.server.common import (
    RETRY_AFTER_S,
    ApiError,
    audited,
    grant_of,
    respond,
    retry_after,
)
from hivemind_memory.api_stub.server.openapi import docs_page, openapi_document
from hivemind_memory.api_stub.server.schemas import (
    MAX_AUDIT,
    MAX_BODY_BYTES,
    MAX_DEAD,
    MAX_EVENTS,
    MAX_QUERIES,
    MAX_WAIT_S,
    Appended,
    AuditEntry,
    Erased,
    ForgetBody,
    Forgot,
    Health,
    RecallBody,
    Recalled,
    RecalledNote,
    RememberBody,
    ReproduceBody,
    ReviseBody,
    Revised,
    UsedBody,
    Whoami,
)
from hivemind_memory.api_stub.server.tokens import Grant, Right, TokenTable
from hivemind_memory.events import noteids
from hivemind_memory.events.codec import parse_event
from hivemind_memory.events.errors import (
    CatchUpTimeout,
    EventError,
    ForeignNoteId,
    QueryError,
    QueryTimeout,
    StoreError,
    WriteRefused,
)
from hivemind_memory.events.schema import ID_PATTERN, NS_PATTERN, Event, NoteCreated
from hivemind_memory.projections.ranking.rank_result import Passage
from hivemind_memory.projections.state import NoteRow
from hivemind_memory.worker.service import METRICS_CONTENT_TYPE, WorkerService

log = structlog.get_logger("hivemind.http")
_T = TypeVar("_T")


class _ErrorHead(msgspec.Struct):
    code: str
    message: str


class _ResultHead(msgspec.Struct):
    """What ``Api.result`` reads of a stored answer: whose it is, or the error it is."""

    agent: str | None = None
    error: _ErrorHead | None = None


_head = msgspec.json.Decoder(_ResultHead)

ADMIN_EVENTS = ("note.forgotten", "note.revised", "note.erased")
"""Events whose ``as_admin`` the server sets from the token's ``admin`` right."""
MEMORY_STATUS = {"namespace_too_large": 507, "worker_out_of_memory": 503,
                 "index_load_failed": 503}
"""HTTP status of the errors of a worker that cannot hold a namespace's index (its memory
budget, ``worker.memory``): 507 Insufficient Storage when the namespace does not fit the
budget at all, 503 when a load failed (a retry may find memory free or another worker)."""


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



class Api:
    """The endpoints, bound to one client and options."""

    def __init__(self, client: Client, opts: ServerOptions) -> None:
        self.client = client
        self.opts = opts
        self.cfg = client.config()
        """The ranking config (the notes' tiers; the fallback of the audit views)."""
        self.worker = WorkerService(client.store, client.rq, self.cfg, client.settings.shards)
        """What only the worker knows (status, dead letters, audit views, heartbeats)."""

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
                      ) -> QueryRequest | QueryError:
        """The request to submit, parsed once (the client submits the struct as it is), or
        (in a batch) the ``QueryError`` that takes its place.

        Who and where (agent, namespace) are checked for the whole request; a batch item that
        is otherwise invalid gets its error object in place, as in ``hivemind batch``."""
        if not isinstance(obj, dict):
            raise ApiError(422, "invalid_request", f"{where} must be a JSON object")
        self.same_ns(ns, obj.get("ns"), where)
        req = {**obj, "ns": ns, "agent": self.identity(g, obj.get("agent"), where)}
        try:
            return parse_request(req)
        except QueryError as exc:
            err = QueryError(exc.code, f"{where}: {exc.message}")
            if where == "query":
                raise ApiError(422, err.code, err.message) from exc
            return err

    def check_work(self, reqs: list[QueryRequest | QueryError]) -> None:
        """413 ``batch_too_costly`` when a batch asks for more work than ``batch_max_work``
        (budgets summed, an ``as_of`` query ``batch_as_of_weight`` times its budget)."""
        s = self.client.settings
        work = sum(r.budget * (s.batch_as_of_weight if r.as_of is not None else 1)
                   for r in reqs if isinstance(r, QueryRequest))
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
        return respond(await self.write(ns, g, data, "events"))

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
        agent = self.identity(g, obj.get("agent"), where)  # both checked: a null is unnamed
        ev = filled({k: v for k, v in obj.items()
                     if not (v is None and (k == "ns" or (k == "agent" and agent)))}, ns, agent)
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
            return parse_event(ev, not_after=self.client.not_after())
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
        return respond(Whoami(g.agent or None,
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
        # overlaps are reads: only to a token with the query right
        return respond(got.answer(ev, show_duplicates=g.may(ns, "query")))

    async def revise(self, request: Request) -> Response:
        """A new text for a note -> its id and the event id (``note.revised``)."""
        ns, g = self.authorize(request, "write")
        body = await self.shaped(request, ReviseBody)
        ev = {"type": "note.revised", **msgspec.to_builtins(body)}
        got = await self.write(ns, g, [ev], "revise")
        return respond(Revised(body.note_id, got.event_ids[0]))

    async def used(self, request: Request) -> Response:
        """The notes the agent used -> how many uses were recorded."""
        ns, g = self.authorize(request, "write")
        body = await self.shaped(request, UsedBody)
        evs = [_no_none({"type": "note.used", "note_id": n, "agent": body.agent})
               for n in body.note_ids]
        return respond(await self.write(ns, g, evs, "used"))

    async def forget(self, request: Request) -> Response:
        """A note -> its id and the event id that forgot it."""
        ns, g = self.authorize(request, "write")
        body = await self.shaped(request, ForgetBody)
        ev = _no_none({"type": "note.forgotten", "note_id": body.note_id, "agent": body.agent})
        got = await self.write(ns, g, [ev], "forget")
        return respond(Forgot(body.note_id, got.event_ids[0]))

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
        notes = [RecalledNote(note_id=n["note_id"], created_at=n["created_at"],
                              score=n["score"], tokens=n["tokens"],
                              passage=None if n.get("passage") is None
                              else msgspec.convert(n["passage"], Passage),
                              stands_for=n.get("stands_for", []),
                              updates=n.get("updates", []), cost=n["cost"])
                 for n in res["notes"]]
        return respond(Recalled(res["query_id"], res["context"], notes, res["used"],
                                 res["budget"], res.get("nothing_relevant", False),
                                 res.get("unknown_words")))

    async def _answer(self, reqs: list[QueryRequest | QueryError]) -> list[bytes]:
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
                            headers=retry_after(code))
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
            except (RedisError, StoreError) as exc:
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
            try:  # the client's wait: a shard no worker serves answers shard_unavailable
                return self.client.result_json(qid, wait)
            except QueryTimeout:
                return None

        body = await self.run(get)
        head = None if body is None else _head.decode(body)
        if head is not None and head.error is not None and head.error.code == "shard_unavailable":
            # still queued, and no worker to answer it for now (the client's words)
            raise ApiError(503, "shard_unavailable", head.error.message)
        if (head is not None and g.agent and "admin" not in g.rights
                and head.agent is not None and head.agent != g.agent):
            body = None  # another agent's answer (it may hold their private notes)
        if body is None:
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

        def read() -> list[NoteRow]:
            self.wait_projected(ns)
            return self.client.notes(ns)

        return respond(await self.run(read))

    async def read(self, request: Request) -> Response:
        """``ReadBody`` -> the notes the token's agent may see, as rows of ``/notes``."""
        ns, g = self.authorize(request, "query")
        body = await self.shaped(request, ReadRequest)
        if bool(body.note_ids) == (body.prefix is not None):
            raise ApiError(422, "invalid_request",
                           'give "note_ids" (a non-empty list) or "prefix", not both')
        agent = self.identity(g, body.agent, "read")
        return respond(await self.run(lambda: self.client.read(ns, agent, body)))

    async def audit(self, request: Request) -> Response:
        ns, _ = self.authorize(request, "admin")
        raw_limit = request.query_params.get("limit", "100")
        if not raw_limit.isdigit() or not 1 <= int(raw_limit) <= MAX_AUDIT:
            raise ApiError(400, "invalid_request", f"limit must be an integer 1..{MAX_AUDIT}")
        page = await self.run(lambda: self.client.audit(ns, int(raw_limit)))
        return respond([AuditEntry(i, msgspec.json.decode(ev or b"{}")) for i, ev in page])

    async def healthz(self, request: Request) -> Response:
        return respond(Health(True))

    async def metrics(self, request: Request) -> Response:
        """Prometheus exposition (worker/ops/metrics.py): lag, dead letters, queries per namespace.
        It names every namespace: a token with the ``metrics`` right, or ``admin`` in every
        namespace (401 without a token, 403 with another)."""
        g = self.grant(request)
        if "metrics" not in g.rights and not ("admin" in g.rights and "*" in g.namespaces):
            raise ApiError(403, "forbidden", "/metrics needs a token with the metrics right "
                           "(or admin in every namespace)")
        body = await self.run(self.worker.metrics)
        return Response(body, media_type=METRICS_CONTENT_TYPE)

    async def readyz(self, request: Request) -> Response:
        def check() -> Health:
            try:
                self.client.ping()
            except RedisError as exc:
                return Health(False, f"store unreachable: {exc}")
            beats = self.worker.beats()
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
        return respond(h, 200 if h.ok else 503)

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
        return respond(await self.run(lambda: self.worker.dead(ns, limit)))

    async def status(self, request: Request) -> Response:
        """``hivemind status --json`` for one namespace (the workers are every live one)."""
        ns, _ = self.authorize(request, "admin")
        return respond(await self.run(lambda: self.worker.status(datetime.now(UTC), only=[ns])))

    async def note(self, request: Request) -> Response:
        """``hivemind show --ns NS NOTE_ID --json``: the note, its events, where it was served."""
        ns, _ = self.authorize(request, "admin")
        nid = request.path_params["note_id"]
        if not re.fullmatch(ID_PATTERN, nid):
            raise ApiError(404, "unknown_note", f"note id {nid!r} must match {ID_PATTERN}")
        got = await self.run(lambda: audited(lambda: self.worker.show(ns, nid)))
        if got is None:
            raise ApiError(404, "unknown_note", f"note {nid!r} is not in namespace {ns!r}")
        return respond(got)

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
        return respond(Erased(nid, got.event_ids[0] if got.event_ids else None,
                               got.counts, got.in_all))

    async def reproduce(self, request: Request) -> Response:
        """``hivemind audit reproduce --ns NS (QUERY_ID... | --all) --json``, as one object."""
        ns, _ = self.authorize(request, "admin")
        body = await self.shaped(request, ReproduceBody)
        if bool(body.query_ids) == body.all:
            raise ApiError(422, "invalid_request",
                           'give "query_ids" (a non-empty list) or "all": true, not both')
        ids = None if body.all else body.query_ids
        got = await self.run(lambda: audited(lambda: self.worker.reproduce(ns, ids)))
        return respond(got)


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
