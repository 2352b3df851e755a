"""The bodies and answers of ``hivemind serve``'s JSON API, as msgspec structs (those every
door shares, recalled notes, remembered, duplicates, are ``protocol.answers``'s): the handlers
(``http.Api``) validate requests with them and encode answers with them, and the OpenAPI
document (``openapi.py``) is generated from them; with the limits those bodies are checked
against."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

import msgspec

from hivemind_memory.api_stub.protocol import answers
from hivemind_memory.api_stub.protocol.answers import (
    RECALLED_HTTP,
    projection,
)
from hivemind_memory.api_stub.protocol.messages import MAX_BUDGET, IdPrefix
from hivemind_memory.events.schema import ID_PATTERN, NS_PATTERN, Embedding, UtcDatetime

MAX_BODY_BYTES = 1024 * 1024
"""Largest request body (bytes) by default; ``--max-body`` changes it. Over it: 413."""
MAX_EVENTS = 1000
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


if TYPE_CHECKING:
    class RecalledNote(msgspec.Struct):
        """(for the type checker: the struct below)"""
else:
    RecalledNote = projection("RecalledNote", answers.RecalledNote, RECALLED_HTTP,
                              [("cost", int)])
    """A note of ``/recall``'s answer: ``protocol.answers.RecalledNote``'s id, date, score,
    tokens, ``passage`` (null for a whole note), ``stands_for`` and ``updates`` (empty when
    none), and ``cost``: ``tokens`` plus the note's header in the context."""


class Recalled(msgspec.Struct):
    """What ``recall`` answers: ``context`` is ready to paste into a prompt."""

    query_id: str
    context: str
    notes: list[RecalledNote]
    used_tokens: int
    budget: int
    nothing_relevant: bool = False
    """No note was likely enough to be needed: the empty context is the answer."""
    unknown_words: list[str] | None = None
    """The query's words no note the caller may see holds (``unknown_word_factor`` under 1)."""


class Revised(msgspec.Struct):
    note_id: str
    event_id: str


class Forgot(msgspec.Struct):
    note_id: str
    event_id: str


class Erased(msgspec.Struct):
    """What ``DELETE .../notes/{note_id}`` answers once the note's content is gone from
    everything hivemind wrote: the event that erased it (null: it was erased before, and
    only the redaction ran again); ``redacted``: what this call rewrote, by kind
    (``log_entries``, ``dead_letters``, ``audit_entries``, ``query_embeddings``, ``results``,
    ``jobs``, ``snapshot_keys``, ``file_records``), none of what the worker's redaction job
    (queued when the projector folds the erasure) or an earlier erasure rewrote first;
    ``redacted_in_all``: the copies of the note's content the namespace now holds redacted,
    whoever redacted them (``log_entries``, ``dead_letters``, ``audit_entries``,
    ``query_embeddings``): the same whichever ran first."""

    note_id: str
    event_id: str | None
    redacted: dict[str, int]
    redacted_in_all: dict[str, int]


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
