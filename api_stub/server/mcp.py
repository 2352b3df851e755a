"""``hivemind mcp``: memory tools for agents over MCP (the official ``mcp`` SDK, 2.x).

Tools: ``remember`` (text, kind, scope, optional note id -> note id), ``recall`` (query,
token budget -> the packed context as text ready to paste into a prompt, plus note ids and
scores), ``used`` (note ids the agent used), ``forget`` (note id).

Two transports, one set of tools:
- stdio (``hivemind mcp --ns NS --agent A --redis-url URL``): one namespace and agent, fixed
  at start;
- streamable HTTP, mounted by ``hivemind serve`` at ``/mcp``: each call is authorised by the
  request's bearer token (the agent is the token's); the namespace is the
  ``X-Hivemind-Ns`` header, or the token's only namespace.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel

from hivemind_memory.api_stub.sdk import Memory
from hivemind_memory.api_stub.server.tokens import Right, TokenTable
from hivemind_memory.events.errors import HivemindError
from hivemind_memory.events.schema import NS_PATTERN

NS_HEADER = "x-hivemind-ns"
"""Header naming the namespace of an MCP-over-HTTP call."""
AGENT_HEADER = "x-hivemind-agent"
"""Header naming the agent when ``serve`` runs without tokens (loopback, one trusted user)."""

INSTRUCTIONS = (
    "Shared long-term memory. Call `recall` with what you are about to work on and paste the "
    "returned context into your reasoning; call `used` with the note ids that actually helped "
    "(they become permanent); `remember` anything a teammate (or you, later) should know; "
    "`forget` what is wrong or obsolete.")


class RecalledNote(BaseModel):
    note_id: str
    score: float
    tokens: int


class RecallResult(BaseModel):
    """The packed context (ready to paste) and what it is made of."""

    context: str
    notes: list[RecalledNote]
    used_tokens: int
    budget: int


Resolver = Callable[[Context, Right], Memory]
"""Finds the memory (namespace, agent, rights) of one tool call."""


def build_server(resolve: Resolver) -> MCPServer:
    """The MCP server; ``resolve`` turns a call's context into the caller's ``Memory``."""
    server = MCPServer("hivemind", instructions=INSTRUCTIONS)

    def mem(ctx: Context, right: Right) -> Memory:
        try:
            return resolve(ctx, right)
        except HivemindError as exc:
            raise ToolError(str(exc)) from exc

    @server.tool()
    def remember(text: str, ctx: Context, kind: Literal["note", "scratch"] = "note",
                 scope: Literal["shared", "private"] = "shared",
                 note_id: str | None = None) -> str:
        """Store a note for later recall; returns its note id. kind=scratch fades within days;
        scope=private is only ever recalled by you."""
        try:
            return mem(ctx, "write").remember(text, kind=kind, scope=scope, note_id=note_id)
        except HivemindError as exc:
            raise ToolError(str(exc)) from exc

    @server.tool()
    def recall(query: str, ctx: Context, budget: int = 1000) -> RecallResult:
        """The most useful notes for `query` that fit in `budget` tokens, as one text to paste
        into your prompt, with each note's id and score."""
        try:
            got = mem(ctx, "query").recall(query, budget)
        except HivemindError as exc:
            raise ToolError(str(exc)) from exc
        return RecallResult(
            context=got.context,
            notes=[RecalledNote(note_id=n.note_id, score=n.score, tokens=n.tokens)
                   for n in got.notes],
            used_tokens=got.used_tokens, budget=got.budget)

    @server.tool()
    def used(note_ids: list[str], ctx: Context) -> int:
        """Tell memory which recalled notes you actually used (notes used often become
        permanent). Returns how many were recorded."""
        try:
            return mem(ctx, "write").used(*note_ids)
        except HivemindError as exc:
            raise ToolError(str(exc)) from exc

    @server.tool()
    def forget(note_id: str, ctx: Context) -> str:
        """Remove a note from every future recall (it stays in the history)."""
        try:
            mem(ctx, "write").forget(note_id)
        except HivemindError as exc:
            raise ToolError(str(exc)) from exc
        return f"forgot {note_id}"

    return server


def fixed_resolver(memory: Memory) -> Resolver:
    """stdio: every call uses ``memory``."""
    return lambda ctx, right: memory


def token_resolver(tokens: TokenTable | None,
                   make: Callable[[str, str, bool], Memory]) -> Resolver:
    """HTTP: the memory of the request's bearer token (``make(ns, agent, admin)`` builds it;
    ``admin``: the token has the admin right in the namespace)."""
    from hivemind_memory.api_stub.server.common import ApiError, grant_of
    from hivemind_memory.events.errors import AccessDenied

    def resolve(ctx: Context, right: Right) -> Memory:
        headers = {k.lower(): v for k, v in (ctx.headers or {}).items()}
        try:
            g = grant_of(tokens, headers.get("authorization"))
        except ApiError as exc:
            raise AccessDenied(exc.message) from None
        ns = headers.get(NS_HEADER)
        if ns is None:
            named = sorted(n for n in g.namespaces if n != "*")
            if len(named) != 1 or "*" in g.namespaces:
                raise AccessDenied(f"name the namespace with the {NS_HEADER} header")
            ns = named[0]
        if not re.match(NS_PATTERN, ns):
            raise AccessDenied(f"namespace {ns!r} must match {NS_PATTERN}")
        if not g.may(ns, right):
            raise AccessDenied(f"this token lacks the {right} right in namespace {ns!r}")
        agent = g.agent or headers.get(AGENT_HEADER, "")
        if not agent:
            raise AccessDenied(f"no agent: send the {AGENT_HEADER} header")
        return make(ns, agent, g.may(ns, "admin"))

    return resolve
