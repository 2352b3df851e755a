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
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from pydantic import BaseModel, Field, ValidationError
from pydantic_core import ErrorDetails

from hivemind_memory.api_stub.protocol.messages import MAX_BUDGET
from hivemind_memory.api_stub.sdk import Memory
from hivemind_memory.api_stub.server.tokens import Right, TokenTable
from hivemind_memory.events.errors import HivemindError, QueryError, WriteRefused
from hivemind_memory.events.schema import ID_PATTERN, MAX_TEXT_BYTES, NS_PATTERN

NS_HEADER = "x-hivemind-ns"
"""Header naming the namespace of an MCP-over-HTTP call."""
AGENT_HEADER = "x-hivemind-agent"
"""Header naming the agent when ``serve`` runs without tokens (loopback, one trusted user)."""

INSTRUCTIONS = (
    "Shared long-term memory. Call `recall` with what you are about to work on and paste the "
    "returned context into your reasoning: each note in it starts with a header "
    "`[note id | date written]`. Call `used` with the ids of the notes that actually helped "
    "(notes used 5 times become permanent); `remember` anything a teammate (or you, later) "
    "should know; `forget` what is wrong or obsolete.")

MAX_USED = 1000
"""Most note ids one ``used`` call takes."""
ID_RULE = ("1 to 128 characters of A-Z a-z 0-9 _ . : @ -, starting with a letter or digit")
"""A note id, in words (the schema's ``pattern`` says the same)."""


class RecalledNote(BaseModel):
    note_id: str = Field(description="Pass it to `used` if the note helped.")
    created_at: str = Field(description="When the note was written (RFC 3339, UTC).")
    score: float = Field(description="Relevance times recency, 0 to 1.")
    tokens: int = Field(description="The note's length in tokens.")
    tier: str = Field(description="longterm (used 5+ times, never fades), short or scratch.")


class RecallResult(BaseModel):
    """The packed context (ready to paste) and what it is made of."""

    context: str = Field(description="The notes as one text, each under `[note id | date]`.")
    notes: list[RecalledNote]
    used_tokens: int = Field(description="Tokens the notes take (at most `budget`).")
    budget: int


Resolver = Callable[[Context, Right], Memory]
"""Finds the memory (namespace, agent, rights) of one tool call."""

NoteId = Annotated[str, Field(min_length=1, max_length=128, pattern=ID_PATTERN.replace("\\Z", "$"),
                              description=f"A note id: {ID_RULE}.")]
Text = Annotated[str, Field(min_length=1, max_length=MAX_TEXT_BYTES,
                            description="The note, in plain words: 1 byte to 64 KiB of UTF-8. "
                                        "Write it so it is useful without this conversation.")]
Kind = Annotated[Literal["note", "scratch"], Field(
    description="note (default): kept, fades slowly (half-life 180 days, never below 0.35); "
                "scratch: a working note that fades within days.")]
Scope = Annotated[Literal["shared", "private"], Field(
    description="shared (default): every agent of the namespace may recall it; private: only "
                "you.")]
Query = Annotated[str, Field(min_length=1, max_length=16_384,
                             description="What you are working on or need to know, in words "
                                         "(1 to 16384 characters).")]
Budget = Annotated[int, Field(ge=1, le=MAX_BUDGET, description=(
    f"The most tokens (about 4 bytes of text each) the recalled notes may take, 1 to "
    f"{MAX_BUDGET}; default 1000."))]
NoteIds = Annotated[list[NoteId], Field(min_length=1, max_length=MAX_USED, description=(
    f"Ids of the notes that helped (from `recall`), 1 to {MAX_USED}."))]


def tool_error(exc: HivemindError) -> ToolError:
    """An error in the tool's own words: the message without the event layer's framing
    (``events[0] (note.created 'x'): ``, ``line 1: invalid event: ``)."""
    msg = exc.message if isinstance(exc, QueryError) else str(exc)
    msg = re.sub(r"^events\[\d+\]( \([^)]*\))?: ", "", msg)
    msg = re.sub(r"^(line \d+: )?invalid (event|query): ", "", msg)
    msg = re.sub(r" - at `\$\.(\w+)`$", r" (\1)", msg).replace("`", "")
    if isinstance(exc, WriteRefused):
        msg += "; nothing was recorded"
    return ToolError(msg)


def argument_error(err: ErrorDetails) -> str:
    """One rejected argument in words: which, what it must be, what was sent."""
    loc = [str(p) for p in err["loc"]]
    field = loc[0] + "".join(f"[{p}]" for p in loc[1:])
    ctx: dict[str, Any] = dict(err.get("ctx") or {})
    got = err.get("input")
    kind = err["type"]
    if kind == "missing":
        return f"{field} is required"
    if kind == "string_pattern_mismatch":
        return f"{field} {got!r} is not a valid note id: a note id is {ID_RULE}"
    if kind == "string_too_short":
        return f"{field} must not be empty"
    if kind == "string_too_long":
        return f"{field} is longer than {ctx.get('max_length')} characters"
    if kind in ("greater_than_equal", "less_than_equal"):
        lo, hi = BOUNDS.get(loc[0], (None, None))
        return f"{field} must be {lo} to {hi}, got {got!r}"
    if kind in ("too_short", "too_long"):
        lo, hi = BOUNDS.get(loc[0], (None, None))
        return f"{field} must hold {lo} to {hi} items"
    if kind == "literal_error":
        return f"{field} must be one of {ctx.get('expected')}, got {got!r}"
    return f"{field}: {err['msg'].lower()}, got {got!r}"


BOUNDS = {"budget": (1, MAX_BUDGET), "note_ids": (1, MAX_USED)}
"""Bounds of numeric and list arguments (the schema's), for their error messages."""


class _Server(MCPServer):
    """``MCPServer`` whose tool errors are in the tool's own words: rejected arguments named
    one by one (not pydantic's report), and no ``Error executing tool NAME:`` framing."""

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Context[Any, Any] | None = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError:
            raise
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError):
                msg = "; ".join(argument_error(e) for e in cause.errors())
                raise ToolError(f"{name}: {msg}") from cause
            raise ToolError(str(exc).removeprefix(f"Error executing tool {name}: ")) from cause


def build_server(resolve: Resolver) -> MCPServer:
    """The MCP server; ``resolve`` turns a call's context into the caller's ``Memory``."""
    server = _Server("hivemind", instructions=INSTRUCTIONS)

    def mem(ctx: Context, right: Right) -> Memory:
        try:
            return resolve(ctx, right)
        except HivemindError as exc:
            raise tool_error(exc) from exc

    @server.tool(description=(
        "Store a note for later recall by you and your teammates; returns its note id. Use "
        "kind=scratch for working notes that should fade within days, scope=private for notes "
        "only you may recall."))
    def remember(text: Text, ctx: Context, kind: Kind = "note", scope: Scope = "shared",
                 note_id: Annotated[NoteId | None, Field(description=(
                     f"Optional id for the new note ({ID_RULE}); ids are never reused, even "
                     "after forgetting. Default: a new unique id."))] = None) -> str:
        try:
            return mem(ctx, "write").remember(text, kind=kind, scope=scope, note_id=note_id)
        except HivemindError as exc:
            raise tool_error(exc) from exc

    @server.tool(description=(
        "The most useful notes for a query that fit in a token budget, as one text to paste "
        "into your prompt (each note under a [note id | date] header), with each note's id, "
        "date, score and size."))
    def recall(query: Query, ctx: Context, budget: Budget = 1000) -> RecallResult:
        try:
            got = mem(ctx, "query").recall(query, budget)
        except HivemindError as exc:
            raise tool_error(exc) from exc
        return RecallResult(
            context=got.context,
            notes=[RecalledNote(note_id=n.note_id, created_at=n.created_at, score=n.score,
                                tokens=n.tokens, tier=n.tier) for n in got.notes],
            used_tokens=got.used_tokens, budget=got.budget)

    @server.tool(description=(
        "Tell memory which recalled notes you actually used; notes used 5 times become "
        "permanent. Returns how many uses were recorded (none if one id is unknown)."))
    def used(note_ids: NoteIds, ctx: Context) -> int:
        try:
            return mem(ctx, "write").used(*note_ids)
        except HivemindError as exc:
            raise tool_error(exc) from exc

    @server.tool(description=(
        "Remove a note you wrote from every future recall (it stays in the history). Only its "
        "author (or an admin) may forget a note."))
    def forget(note_id: Annotated[NoteId, Field(description=(
            f"The id of the note to forget ({ID_RULE})."))], ctx: Context) -> str:
        try:
            mem(ctx, "write").forget(note_id)
        except HivemindError as exc:
            raise tool_error(exc) from exc
        return f"forgot {note_id}"

    return server


def fixed_resolver(memory: Memory) -> Resolver:
    """stdio: every call uses ``memory``."""
    return lambda ctx, right: memory


def token_resolver(tokens: TokenTable | None,
                   make: Callable[[str, str, bool], Memory]) -> Resolver:
    """HTTP: the memory of the request's bearer token (``make(ns, agent, admin)`` builds it;
    ``admin``: the token has the admin right in the namespace)."""
    from hivemind_memory.api_stub.server.http import ApiError, grant_of
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
