"""The access log of ``hivemind serve``: one structlog line per HTTP request, event
``http_request``, for every request, answered or refused (401 forged token, 403, 404 unknown
path, 413, 5xx), the API's and ``/mcp``'s alike.

Fields: ``method``, ``path`` (without the query string), ``status``, ``error`` (the code of
the ``{"error": {"code"}}`` body, or of a JSON-RPC error, else None), ``agent`` (the token's
agent; in open mode the ``X-Hivemind-Agent`` header; None for a missing or unknown token),
``auth`` (``token``, ``missing``, ``unknown`` or ``open``), ``ns`` (the path's namespace, or
the ``X-Hivemind-Ns`` header of an MCP call), ``client`` (peer address) and ``duration_ms``.
Never a token, a header value other than those two names, or a body: the secret is only
hashed for the look-up, as the endpoints do.

A pure ASGI middleware (not Starlette's ``BaseHTTPMiddleware``), so streamed and MCP
responses pass through untouched; only the first 4 KiB of an error body are kept, to read
its code.
"""

from __future__ import annotations

import re
import time
from typing import Any

import msgspec
import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hivemind_memory.api_stub.server.tokens import TokenTable, bearer_secret

log = structlog.get_logger("hivemind.http")

ERROR_BODY_PEEK = 4096
"""Bytes of an error response read for its code."""
LONGEST_FIELD = 256
"""A path or header logged longer than this is cut (a fuzzer's paths are long)."""
_NS_PATH = re.compile(r"^/v1/ns/([^/]+)")
AGENT_HEADER = b"x-hivemind-agent"
"""``mcp.AGENT_HEADER``: the agent of an open-mode (no tokens) request."""
NS_HEADER = b"x-hivemind-ns"
"""``mcp.NS_HEADER``: the namespace of an MCP call."""


def who(tokens: TokenTable | None, authorization: str | None,
        open_agent: str | None) -> tuple[str | None, str]:
    """``(agent, auth)`` of a request, as the endpoints will judge it."""
    if tokens is None:
        return open_agent or None, "open"
    secret = bearer_secret(authorization)
    if secret is None:
        return None, "missing"
    g = tokens.lookup(secret)
    return (None, "unknown") if g is None else (g.agent, "token")


def error_code(body: bytes) -> str | None:
    """The code of an error body: ours, or a JSON-RPC error's (its ``data.code`` when the
    gate of ``/mcp`` put ours there); None if it has none."""
    try:
        obj = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return None
    err = obj.get("error") if isinstance(obj, dict) else None
    if not isinstance(err, dict):
        return None
    data = err.get("data")
    code = data.get("code") if isinstance(data, dict) and "code" in data else err.get("code")
    return None if code is None else str(code)


class AccessLog:
    """Logs ``http_request`` once per HTTP request that passes through."""

    def __init__(self, app: ASGIApp, tokens: TokenTable | None) -> None:
        self.app, self.tokens = app, tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        sent: dict[str, Any] = {"status": 500, "json": False}
        peek = bytearray()

        async def watch(message: Message) -> None:
            if message["type"] == "http.response.start":
                sent["status"] = int(message["status"])
                ctype = dict(message.get("headers", [])).get(b"content-type", b"")
                sent["json"] = ctype.startswith(b"application/json")
            elif (message["type"] == "http.response.body" and sent["status"] >= 400
                  and sent["json"] and len(peek) < ERROR_BODY_PEEK):
                peek.extend(message.get("body", b"")[:ERROR_BODY_PEEK - len(peek)])
            await send(message)

        try:
            await self.app(scope, receive, watch)
        finally:
            self._log(scope, sent["status"], bytes(peek), time.perf_counter() - t0)

    def _log(self, scope: Scope, status: int, peek: bytes, seconds: float) -> None:
        headers: dict[bytes, bytes] = {}
        for k, v in scope.get("headers", []):
            headers.setdefault(k.lower(), v)
        auth = headers.get(b"authorization")
        agent, how = who(self.tokens, auth.decode("latin-1") if auth is not None else None,
                         _header(headers, AGENT_HEADER))
        path = str(scope.get("path", ""))[:LONGEST_FIELD]
        m = _NS_PATH.match(path)
        client = scope.get("client")
        (log.warning if status >= 500 else log.info)(
            "http_request", method=scope.get("method"), path=path, status=status,
            error=error_code(peek) if peek else None, agent=agent, auth=how,
            ns=m.group(1) if m else _header(headers, NS_HEADER),
            client=client[0] if client else None, duration_ms=round(seconds * 1000, 1))


def _header(headers: dict[bytes, bytes], name: bytes) -> str | None:
    v = headers.get(name)
    return v.decode("latin-1")[:LONGEST_FIELD] if v is not None else None
