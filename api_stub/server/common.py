"""What every endpoint module of ``hivemind serve`` shares: the error answered as the
contract's error object (with its ``Retry-After``), a struct answered as JSON, the grant of a
bearer token, and the rule for an unreadable audit entry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import msgspec
from starlette.responses import Response

from hivemind_memory.api_stub.client import SHARD_RETRY_AFTER_S
from hivemind_memory.api_stub.server.schemas import ErrorDetail, ErrorResponse
from hivemind_memory.api_stub.server.tokens import OPEN_GRANT, Grant, TokenTable, bearer_secret
from hivemind_memory.events.errors import WARMING_RETRY_S, QueryError


class ApiError(Exception):
    """An error answered as the contract's ``{"error": {"code", "message"}}``."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


_json = msgspec.json.Encoder()


def respond(obj: Any, status: int = 200) -> Response:
    """``obj`` (a struct, or builtins) answered as JSON."""
    return Response(_json.encode(obj), status_code=status, media_type="application/json")


RETRY_AFTER_S = {"shard_unavailable": SHARD_RETRY_AFTER_S, "index_warming": WARMING_RETRY_S}
"""Error codes answered 503 with a ``Retry-After`` (seconds): the query was right, no worker
could take it now."""


def retry_after(code: str) -> dict[str, str] | None:
    s = RETRY_AFTER_S.get(code)
    return None if s is None else {"Retry-After": str(s)}


def error_response(status: int, code: str, message: str) -> Response:
    """The contract's error object (a 401 with its ``WWW-Authenticate`` challenge)."""
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else retry_after(code)
    return Response(_json.encode(ErrorResponse(ErrorDetail(code, message))), status_code=status,
                    media_type="application/json", headers=headers)


def grant_of(tokens: TokenTable | None, authorization: str | None) -> Grant:
    """The grant of an ``Authorization`` header value (401 ``ApiError`` when it has none)."""
    if tokens is None:
        return OPEN_GRANT
    secret = bearer_secret(authorization)
    if secret is None:
        raise ApiError(401, "unauthorized", "missing token: send Authorization: Bearer <token>")
    g = tokens.lookup(secret)
    if g is None:
        raise ApiError(401, "unauthorized", "unknown token: this server has no such token")
    return g


_T = TypeVar("_T")


def audited(fn: Callable[[], _T]) -> _T:
    """``fn()``, with an unreadable audit entry (``QueryError('bad_audit')``) as a 500 that
    names it: the request was fine, the stored audit is not."""
    try:
        return fn()
    except QueryError as exc:
        raise ApiError(500, exc.code, exc.message) from exc
