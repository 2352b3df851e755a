"""The browser explorer of ``hivemind serve``: ``/ui`` (static files shipped in the package,
``ui/``: one HTML page, a script and a style sheet, nothing fetched from elsewhere) and the
JSON it reads besides the admin endpoints the CLI shares: ``GET /v1/namespaces`` (every
namespace the token is admin of, with its status and the live workers), ``GET
.../audit/{query_id}/explain`` (``hivemind audit explain``), ``GET .../curves`` and ``GET
.../notes/{note_id}/recency``.

The page itself holds no data and is served to anyone who asks, like ``/docs``; everything it
shows comes from the JSON API with the admin token the person typed into its login form, kept
in the tab's ``sessionStorage`` and sent as ``Authorization: Bearer`` (see docs/ui.md). No
cookie, so no request is authorised by the browser on its own (nothing to forge across sites).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from importlib import resources
from typing import Any, Protocol

import msgspec
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from hivemind_memory.api_stub.server.common import ApiError, audited, grant_of
from hivemind_memory.api_stub.server.tokens import Grant, Right, TokenTable
from hivemind_memory.events.errors import QueryError
from hivemind_memory.events.schema import ID_PATTERN
from hivemind_memory.worker.service import (
    Curves,
    Explanation,
    NoteRecency,
    Status,
    WorkerService,
)

UI_FILES = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
            "app.css": "text/css; charset=utf-8", "favicon.svg": "image/svg+xml"}
"""The files under ``/ui/`` and their content types (anything else: 404)."""
UI_HEADERS = {
    "Content-Security-Policy": ("default-src 'self'; script-src 'self'; style-src 'self'; "
                                "img-src 'self' data:; connect-src 'self'; frame-ancestors "
                                "'none'; base-uri 'none'; form-action 'self'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
"""Sent with every file of the explorer: its own script only, no frames, no referrer."""
QUERY_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}\.[A-Za-z0-9]{1,64}\Z")
"""A query id as the server makes them (``<ns>.<hex>``)."""


def _ui_file(name: str) -> bytes:
    return (resources.files(__package__) / "ui" / name).read_bytes()


Handler = Callable[[Request], Awaitable[Response]]
_json = msgspec.json.Encoder()


class Host(Protocol):
    """What the explorer's endpoints need of the API (``http.Api``)."""

    worker: WorkerService

    @property
    def tokens(self) -> TokenTable | None: ...

    def authorize(self, request: Request, right: Right) -> tuple[str, Grant]: ...

    async def run(self, fn: Callable[[], Any]) -> Any: ...


def _respond(obj: Any) -> Response:
    return Response(_json.encode(obj), media_type="application/json")


def routes(api: Host, wrap: Callable[[Handler], Handler]) -> list[BaseRoute]:
    """The explorer's routes (``wrap``: the API's error handling)."""

    async def ui_root(request: Request) -> Response:
        return RedirectResponse("/ui/", status_code=307)

    async def ui(request: Request) -> Response:
        name = request.path_params.get("name") or "index.html"
        if name not in UI_FILES:
            raise ApiError(404, "not_found", f"no file {name!r} in /ui/")
        return Response(_ui_file(name), media_type=UI_FILES[name], headers=UI_HEADERS)

    async def all_namespaces(request: Request) -> Response:
        g = grant_of(api.tokens, request.headers.get("authorization"))

        def read() -> Status:
            return api.worker.status_of(datetime.now(UTC), lambda ns: g.may(ns, "admin"))

        if "admin" not in g.rights:
            raise ApiError(403, "forbidden", "this token has the admin right in no namespace")
        return _respond(await api.run(read))

    async def explained(request: Request) -> Response:
        ns, _ = api.authorize(request, "admin")
        qid = request.path_params["query_id"]
        if not QUERY_ID.fullmatch(qid):
            raise ApiError(404, "not_found", f"malformed query id {qid!r}")
        note = request.query_params.get("note") or None
        if note is not None and not re.fullmatch(ID_PATTERN, note):
            raise ApiError(400, "invalid_request", f"note must match {ID_PATTERN}")
        derive = request.query_params.get("derive", "true")
        if derive not in ("true", "false"):
            raise ApiError(400, "invalid_request", "derive must be true or false")

        def go() -> Explanation:
            try:
                return api.worker.explain(ns, qid, note, derive == "true")
            except QueryError as exc:
                if exc.code == "not_found":
                    raise ApiError(404, "not_found", exc.message) from exc
                raise

        return _respond(await api.run(lambda: audited(go)))

    async def curves_of(request: Request) -> Response:
        ns, _ = api.authorize(request, "admin")
        return _respond(await api.run(lambda: audited(lambda: api.worker.curves(ns))))

    async def recency_of(request: Request) -> Response:
        ns, _ = api.authorize(request, "admin")
        nid = request.path_params["note_id"]
        if not re.fullmatch(ID_PATTERN, nid):
            raise ApiError(404, "unknown_note", f"note id {nid!r} must match {ID_PATTERN}")

        got = await api.run(lambda: audited(lambda: api.worker.recency(ns, nid,
                                                                      datetime.now(UTC))))
        if got is None:
            raise ApiError(404, "unknown_note", f"note {nid!r} is not in namespace {ns!r}")
        return _respond(got)

    p = "/v1/ns/{ns}"
    return [
        Route("/ui", wrap(ui_root), methods=["GET"]),
        Route("/ui/", wrap(ui), methods=["GET"]),
        Route("/ui/{name}", wrap(ui), methods=["GET"]),
        Route("/v1/namespaces", wrap(all_namespaces), methods=["GET"]),
        Route(f"{p}/audit/{{query_id}}/explain", wrap(explained), methods=["GET"]),
        Route(f"{p}/curves", wrap(curves_of), methods=["GET"]),
        Route(f"{p}/notes/{{note_id}}/recency", wrap(recency_of), methods=["GET"]),
    ]


def openapi_paths(op: Callable[..., dict[str, Any]], ok: Callable[..., dict[str, Any]],
                  err: dict[str, Any], schema_components: Callable[..., Any]
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The explorer's JSON endpoints in the OpenAPI document."""
    (refs, comps) = schema_components([Explanation, Curves, NoteRecency, Status],
                                      ref_template="#/components/schemas/{name}")
    explain_ref, curves_ref, recency_ref, status_ref = refs
    p = "/v1/ns/{ns}"
    ns_free = op("Every namespace this token is admin of, with its status, and the live "
                 "workers", {"200": ok(status_ref)})
    ns_free["parameters"] = []
    paths = {
        "/v1/namespaces": {"get": ns_free},
        f"{p}/audit/{{query_id}}/explain": {"get": op(
            "Why a served query got these notes and not others (admin; `hivemind audit "
            "explain`)", {"200": ok(explain_ref), "500": err},
            params=[{"name": "query_id", "in": "path", "required": True,
                     "schema": {"type": "string", "pattern": QUERY_ID.pattern}},
                    {"name": "note", "in": "query", "required": False,
                     "schema": {"type": "string", "pattern": ID_PATTERN}},
                    {"name": "derive", "in": "query", "required": False,
                     "schema": {"type": "string", "enum": ["true", "false"]}}])},
        f"{p}/curves": {"get": op(
            "The recency curves of the config in force beside 5 % a day (admin)",
            {"200": ok(curves_ref), "500": err})},
        f"{p}/notes/{{note_id}}/recency": {"get": op(
            "A note's recency from its creation to now, with its uses and tier (admin)",
            {"200": ok(recency_ref), "500": err},
            params=[{"name": "note_id", "in": "path", "required": True,
                     "schema": {"type": "string", "pattern": ID_PATTERN}}])},
    }
    return paths, comps


__all__ = ["UI_FILES", "Host", "openapi_paths", "routes"]
