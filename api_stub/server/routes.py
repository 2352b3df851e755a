"""The ASGI application of ``hivemind serve``: the route table (``http.Api``'s handlers, the
explorer's, ``/mcp`` behind its token gate), the errors every route answers in the
contract's shape, the middleware (access log, open-mode guard) and the lifespan."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import msgspec
import structlog
from redis.exceptions import RedisError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.server import explorer
from hivemind_memory.api_stub.server.access import AccessLog
from hivemind_memory.api_stub.server.common import ApiError, error_response, grant_of
from hivemind_memory.api_stub.server.guard import OpenModeGuard
from hivemind_memory.api_stub.server.http import Api, ServerOptions
from hivemind_memory.api_stub.server.tokens import TokenTable
from hivemind_memory.events.errors import QueryTimeout, StoreError

log = structlog.get_logger("hivemind.http")

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
    return Response(msgspec.json.encode(body), status_code=exc.status,
                    media_type="application/json", headers={"WWW-Authenticate": challenge})


def _wrap(fn: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        try:
            return await fn(request)
        except ApiError as exc:
            return error_response(exc.status, exc.code, exc.message)
        except QueryTimeout as exc:
            return error_response(504, "timeout", str(exc))
        except RedisError as exc:
            log.warning("store_error", error=str(exc))
            return error_response(503, "store_unavailable",
                                  f"the store failed: {type(exc).__name__}")
        except StoreError as exc:  # hivemind's own words (a write that kept losing its race)
            log.warning("store_error", error=str(exc))
            return error_response(503, "store_unavailable", str(exc))

    return endpoint


def create_app(client: Client, opts: ServerOptions | None = None) -> Starlette:
    """The ASGI application of ``hivemind serve``."""
    opts = opts or ServerOptions()
    api = Api(client, opts)
    api.worker.watch()
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
        return error_response(exc.status_code, code, str(exc.detail))

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
