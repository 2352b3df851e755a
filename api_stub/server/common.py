"""What every endpoint module of ``hivemind serve`` shares: the error answered as the
contract's error object, the grant of a bearer token, and the rule for an unreadable audit
entry."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from hivemind_memory.api_stub.server.tokens import OPEN_GRANT, Grant, TokenTable, bearer_secret
from hivemind_memory.events.errors import QueryError


class ApiError(Exception):
    """An error answered as the contract's ``{"error": {"code", "message"}}``."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


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
