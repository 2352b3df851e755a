"""``hivemind mcp``: memory tools for agents over MCP (the official ``mcp`` SDK, 2.x).

Tools: ``remember`` (text, kind, scope, optional note id, supersedes, duplicates -> note id
and near-duplicates), ``recall`` (query, token budget -> the packed context as text ready to
paste into a prompt, plus note ids and scores), ``used`` (note ids the agent used),
``revise`` (note id, new text), ``forget`` (note id).

Two transports, one set of tools:
- stdio (``hivemind mcp --ns NS --agent A --redis-url URL``): one namespace and agent, fixed
  at start;
- streamable HTTP, mounted by ``hivemind serve`` at ``/mcp``: each call is authorised by the
  request's bearer token (the agent is the token's); the namespace is the
  ``X-Hivemind-Ns`` header, or the token's only namespace.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any

import msgspec
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from pydantic import BaseModel, Field, ValidationError, create_model

from hivemind_memory.api_stub.protocol import answers
from hivemind_memory.api_stub.sdk import Memory
from hivemind_memory.api_stub.server.tokens import Right, TokenTable
from hivemind_memory.api_stub.tool_spec import (
    DESCRIPTIONS,
    ID_RULE,
    INSTRUCTIONS,
    Budget,
    Duplicates,
    ExpectedVersion,
    ExpiresAt,
    FilterArg,
    Kind,
    MetadataArg,
    NoteId,
    NoteIds,
    OptionalNoteId,
    Query,
    ReviseText,
    Scope,
    Supersedes,
    Text,
    arguments_message,
    remembered_message,
    tool_message,
)
from hivemind_memory.events.errors import HivemindError
from hivemind_memory.events.schema import NS_PATTERN
from hivemind_memory.projections.ranking.rank_result import Passage as PassageStruct

NS_HEADER = "x-hivemind-ns"
"""Header naming the namespace of an MCP-over-HTTP call."""
AGENT_HEADER = "x-hivemind-agent"
"""Header naming the agent when ``serve`` runs without tokens (loopback, one trusted user)."""

def _model(name: str, struct: type[msgspec.Struct], fields: Sequence[str],
           descriptions: dict[str, str], types: dict[str, Any] | None = None,
           optional: Sequence[str] = ()) -> type[BaseModel]:
    """A pydantic model named ``name`` with ``struct``'s ``fields`` (their types, in this
    order, unless ``types`` narrows one), each described by ``descriptions``; ``optional``
    ones default to null. The MCP SDK needs pydantic models for a tool's output schema; the
    shape itself is the one struct's (``protocol.answers``)."""
    own = {f.name: f.type for f in msgspec.structs.fields(struct)}
    types = types or {}
    missing = [f for f in fields if f not in own]
    if missing:
        raise TypeError(f"{struct.__name__} has no field {', '.join(missing)}")
    spec: dict[str, Any] = {}
    for f in fields:
        kind = types.get(f, own[f])
        spec[f] = ((kind | None, Field(default=None, description=descriptions[f]))
                   if f in optional else (kind, Field(description=descriptions[f])))
    return create_model(name, __module__=__name__, **spec)


if TYPE_CHECKING:  # the models are built below; to mypy, pydantic models
    class Passage(BaseModel): ...

    class RecalledNote(BaseModel): ...
else:
    Passage = _model("Passage", PassageStruct, PassageStruct.__struct_fields__, {
        "index": "Which passage of the note, counted from 0.",
        "count": "How many passages the note has.",
        "start": "Where the passage starts in the note's text (characters).",
        "end": "Where it ends (characters, exclusive).",
        "rank": "Its place among the note's passages that match, by their match (absent: "
                "the best one); its score was lowered for it (passage_repeat).",
    }, optional=("rank",))
    """The one ``Passage`` struct as a pydantic model (the MCP tool's output schema)."""

    RecalledNote = _model("RecalledNote", answers.RecalledNote, answers.RECALLED_MCP, {
        "note_id": "Pass it to `used` if the note helped.",
        "created_at": "When the note was written (RFC 3339, UTC).",
        "score": "Relevance times recency, 0 to 1.",
        "tokens": "The note's length in tokens.",
        "tier": "longterm (used 5+ times, never fades), short or scratch.",
        "metadata": "The note's metadata, if it has some.",
        "passage": "Set when only a passage of a long note was packed: "
                   "its place in the note (the text shown is that passage).",
        "stands_for": "Near-identical notes this one stands for (not packed beside it).",
        "updates": "Older versions of the same fact this newer note won over.",
    }, types={"metadata": dict[str, str | int | float | bool], "passage": Passage},
        optional=("metadata", "passage"))
    """What the MCP ``recall`` tool shows of the one ``RecalledNote`` (``RECALLED_MCP``):
    ``metadata`` null when empty, with scalar values; ``passage`` the pydantic ``Passage``."""


class RecallResult(BaseModel):
    """The packed context (ready to paste) and what it is made of."""

    context: str = Field(description="The notes as one text, each under `[note id | date]`.")
    notes: list[RecalledNote]
    used_tokens: int = Field(description="Tokens the notes take (at most `budget`).")
    budget: int
    nothing_relevant: bool = Field(False, description=(
        "True: no note was likely enough to be needed; the empty context is the answer."))
    unknown_words: list[str] | None = Field(None, description=(
        "The query's words that no note you may see holds (when the server's "
        "`unknown_word_factor` is under 1)."))


Resolver = Callable[[Context, Right], Memory]
"""Finds the memory (namespace, agent, rights) of one tool call."""

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
                raise ToolError(arguments_message(name, cause)) from cause
            raise ToolError(str(exc).removeprefix(f"Error executing tool {name}: ")) from cause


def build_server(resolve: Resolver) -> MCPServer:
    """The MCP server; ``resolve`` turns a call's context into the caller's ``Memory``."""
    server = _Server("hivemind", instructions=INSTRUCTIONS)

    def mem(ctx: Context, right: Right) -> Memory:
        try:
            return resolve(ctx, right)
        except HivemindError as exc:
            raise ToolError(tool_message(exc)) from exc

    @server.tool(description=DESCRIPTIONS["remember"])
    def remember(text: Text, ctx: Context, kind: Kind = "note", scope: Scope = "shared",
                 note_id: OptionalNoteId = None, supersedes: Supersedes = [],  # noqa: B006
                 duplicates: Duplicates = "report", metadata: MetadataArg = None,
                 expires_at: ExpiresAt = None) -> str:
        try:
            m = mem(ctx, "write")
            may_query = _may(resolve, ctx, "query")  # overlaps are reads: only to readers
            if duplicates == "report" and not may_query:
                duplicates = "ignore"
            got = m.remember(text, kind=kind, scope=scope, note_id=note_id,
                             supersedes=supersedes, duplicates=duplicates,
                             metadata=metadata, expires_at=expires_at)
        except HivemindError as exc:
            raise ToolError(tool_message(exc)) from exc
        dups = None if got.duplicates is None or not may_query else [
            (d.note_id, d.overlap) for d in got.duplicates]
        return remembered_message(str(got), dups, got.superseded, got.duplicate_of,
                                  got.duplicates_unchecked)

    @server.tool(description=DESCRIPTIONS["revise"])
    def revise(note_id: Annotated[NoteId, Field(description=(
            f"The id of the note to revise ({ID_RULE})."))],
               text: ReviseText, ctx: Context, expected_version: ExpectedVersion = None,
               metadata: MetadataArg = None) -> str:
        try:
            mem(ctx, "write").revise(note_id, text, expected_version=expected_version,
                                     metadata=metadata)
        except HivemindError as exc:
            raise ToolError(tool_message(exc)) from exc
        return f"revised {note_id}"

    @server.tool(description=DESCRIPTIONS["recall"])
    def recall(query: Query, ctx: Context, budget: Budget = 1000,
               filter: FilterArg = None) -> RecallResult:
        try:
            got = mem(ctx, "query").recall(query, budget, filter=filter)
        except HivemindError as exc:
            raise ToolError(tool_message(exc)) from exc
        return RecallResult(
            context=got.context,
            notes=[_recalled(n) for n in got.notes],
            used_tokens=got.used_tokens, budget=got.budget,
            nothing_relevant=got.nothing_relevant, unknown_words=got.unknown_words or None)

    @server.tool(description=DESCRIPTIONS["used"])
    def used(note_ids: NoteIds, ctx: Context) -> int:
        try:
            return mem(ctx, "write").used(*note_ids)
        except HivemindError as exc:
            raise ToolError(tool_message(exc)) from exc

    @server.tool(description=DESCRIPTIONS["forget"])
    def forget(note_id: Annotated[NoteId, Field(description=(
            f"The id of the note to forget ({ID_RULE})."))], ctx: Context) -> str:
        try:
            mem(ctx, "write").forget(note_id)
        except HivemindError as exc:
            raise ToolError(tool_message(exc)) from exc
        return f"forgot {note_id}"

    return server


def _recalled(n: answers.RecalledNote) -> RecalledNote:
    """The MCP view of one recalled note."""
    shown: dict[str, Any] = {f: getattr(n, f) for f in answers.RECALLED_MCP}
    shown["metadata"] = n.metadata or None
    shown["passage"] = None if n.passage is None else Passage(**msgspec.structs.asdict(n.passage))
    return RecalledNote(**shown)


def _may(resolve: Resolver, ctx: Context, right: Right) -> bool:
    """Whether the caller of this tool call also has ``right``."""
    try:
        resolve(ctx, right)
    except HivemindError:
        return False
    return True


def fixed_resolver(memory: Memory) -> Resolver:
    """stdio: every call uses ``memory``."""
    return lambda ctx, right: memory


def token_resolver(tokens: TokenTable | None,
                   make: Callable[[str, str, bool], Memory], owned_ids: bool = False) -> Resolver:
    """HTTP: the memory of the request's bearer token (``make(ns, agent, admin)`` builds it;
    ``admin``: the token has the admin right in the namespace). ``owned_ids``
    (``HIVEMIND_NOTE_IDS=owned``): a token without ``admin`` creates notes only with ids of
    its own space (``events.noteids``)."""
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
        m = make(ns, agent, g.may(ns, "admin"))
        # a token's agent without admin sees only what it may: it chooses ids of its own
        # (events.noteids), so a create never confirms another agent's private id
        m.own_ids = owned_ids and bool(g.agent) and not g.may(ns, "admin")
        return m

    return resolve
