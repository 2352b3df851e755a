"""What an agent reads about the memory tools, in one place for every framework that offers
them (MCP, LangChain, LlamaIndex): the instructions, each tool's description, each parameter's
type with its bounds and description (pydantic ``Annotated`` types, so a JSON schema carries
them), and errors in the tools' own words."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, ValidationError
from pydantic_core import ErrorDetails

from hivemind_memory.api_stub.protocol.messages import MAX_BUDGET
from hivemind_memory.events.errors import HivemindError, QueryError, WriteRefused
from hivemind_memory.events.schema import (
    ID_PATTERN,
    MAX_METADATA_KEYS,
    MAX_METADATA_STR_BYTES,
    MAX_SUPERSEDES,
    MAX_TEXT_BYTES,
    METADATA_KEY_PATTERN,
)

INSTRUCTIONS = (
    "Shared long-term memory. Call `recall` with what you are about to work on and paste the "
    "returned context into your reasoning: each note in it starts with a header "
    "`[note id | date written]`. Call `used` with the ids of the notes that actually helped "
    "(notes used 5 times become permanent); `remember` anything a teammate (or you, later) "
    "should know (it tells you of notes that already say nearly the same: `revise` one of "
    "those instead of adding a twin); `revise` a note whose fact changed; `forget` what is "
    "wrong.")

METADATA_LIMITS = (METADATA_KEY_PATTERN, MAX_METADATA_KEYS, MAX_METADATA_STR_BYTES)
"""A metadata key's pattern, the most keys and the longest string value (UTF-8 bytes), for
the adapters that map their own values to metadata."""

MAX_USED = 1000
"""Most note ids one ``used`` call takes."""
ID_RULE = ("1 to 128 characters of A-Z a-z 0-9 _ . : @ -, starting with a letter or digit")
"""A note id, in words (the schema's ``pattern`` says the same)."""


DESCRIPTIONS = {
    "remember": (
        "Store a note for later recall by you and your teammates; returns its note id, and the "
        "ids of existing notes that say nearly the same (revise one of those rather than keep "
        "twins). Use kind=scratch for working notes that should fade within days, "
        "scope=private for notes only you may recall, supersedes to replace notes you wrote."),
    "recall": (
        "The most useful notes for a query that fit in a token budget, as one text to paste "
        "into your prompt (each note under a [note id | date] header), with each note's id, "
        "date, score and size."),
    "used": (
        "Tell memory which recalled notes you actually used; notes used 5 times become "
        "permanent. Returns how many uses were recorded (none if one id is unknown)."),
    "forget": (
        "Remove a note you wrote from every future recall (it stays in the history). Only its "
        "author (or an admin) may forget a note."),
    "revise": (
        "Replace the text of a note you wrote with a corrected or updated one; the note keeps "
        "its id, uses and tier, and answers as of an earlier time still show the old text."),
}
"""Each tool's description, one line of plain prose."""

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


def tool_message(exc: HivemindError) -> str:
    """An error in the tool's own words: the message without the event layer's framing
    (``events[0] (note.created 'x'): ``, ``line 1: invalid event: ``)."""
    msg = exc.message if isinstance(exc, QueryError) else str(exc)
    msg = re.sub(r"^events\[\d+\]( \([^)]*\))?: ", "", msg)
    msg = re.sub(r"^(line \d+: )?invalid (event|query): ", "", msg)
    msg = re.sub(r" - at `\$\.(\w+)`$", r" (\1)", msg).replace("`", "")
    if isinstance(exc, WriteRefused):
        msg += "; nothing was recorded"
    return msg


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




OptionalNoteId = Annotated[NoteId | None, Field(description=(
    f"Optional id for the new note ({ID_RULE}); ids are never reused, even after forgetting. "
    "Default: a new unique id."))]


ReviseText = Annotated[str, Field(min_length=1, max_length=MAX_TEXT_BYTES, description=(
    "The note's new text, in plain words: 1 byte to 64 KiB of UTF-8."))]
Supersedes = Annotated[list[NoteId], Field(max_length=MAX_SUPERSEDES, description=(
    f"Ids of notes you wrote that this note replaces (0 to {MAX_SUPERSEDES}): they leave "
    "every future recall and their uses carry over to the new note. Default: none."))]
Duplicates = Annotated[Literal["report", "supersede", "ignore", "keep"], Field(description=(
    "What to do about existing notes that say nearly the same: report (default) lists their "
    "ids, supersede also replaces those of them you wrote, keep lists them and stores the "
    "note even when you already wrote the very same text, ignore does not look. Except with "
    "keep and ignore, a note whose text you already wrote (same words, case and spacing "
    "aside) is not stored again: the answer names the existing note."))]


MetadataArg = Annotated[dict[str, str | int | float | bool] | None, Field(description=(
    f"Optional labels to filter on later: up to {MAX_METADATA_KEYS} keys (a letter or _, "
    "then letters, digits, _ . : -; at most 64 characters) to a string (at most "
    f"{MAX_METADATA_STR_BYTES} bytes), number or boolean, e.g. {{\"project\": \"apollo\"}}."))]
ExpiresAt = Annotated[str | None, Field(description=(
    "Optional RFC 3339 time with a timezone (2026-05-01T12:00:00Z) from which the note is in "
    "no recall; default: it does not expire."))]
FilterArg = Annotated[dict[str, Any] | None, Field(description=(
    "Optional: only notes whose metadata matches, e.g. {\"project\": \"apollo\", "
    "\"prio\": {\"$gte\": 2}}; operators $eq $ne $in $gt $gte $lt $lte, every condition "
    "must hold; a note without the key matches only $ne."))]
ExpectedVersion = Annotated[int | None, Field(ge=1, description=(
    "Optional: revise only if the note is still at this version (1 when created, +1 per "
    "revision); otherwise nothing is written and you are told it moved on."))]


class RememberArgs(BaseModel):
    """The arguments of ``remember``."""

    text: Text
    kind: Kind = "note"
    scope: Scope = "shared"
    note_id: OptionalNoteId = None
    supersedes: Supersedes = []
    duplicates: Duplicates = "report"
    metadata: MetadataArg = None
    expires_at: ExpiresAt = None


def remembered_message(note_id: str, duplicates: list[tuple[str, float]] | None,
                       superseded: list[str], duplicate_of: str | None = None,
                       unchecked: str | None = None) -> str:
    """What ``remember`` tells an agent: the new id (or the existing note it is a twin of),
    then what it superseded and the notes that say nearly the same (with their word
    overlap), or why they could not be looked for."""
    if duplicate_of is not None:
        return (f"{duplicate_of}; not stored again: you already wrote this very text as "
                f"{duplicate_of}")
    out = note_id
    if unchecked is not None:
        out += f"; near-duplicates were not checked ({unchecked})"
    if superseded:
        out += f"; it supersedes {', '.join(superseded)}"
    rest = [(n, o) for n, o in duplicates or [] if n not in superseded]
    if rest:
        out += ("; existing notes say nearly the same: "
                + ", ".join(f"{n} (overlap {o:.2f})" for n, o in rest)
                + ". If one states the same fact, revise it and forget the new one")
    return out


class RecallArgs(BaseModel):
    """The arguments of ``recall``."""

    query: Query
    budget: Budget = 1000
    filter: FilterArg = None


class UsedArgs(BaseModel):
    """The arguments of ``used``."""

    note_ids: NoteIds


class ForgetArgs(BaseModel):
    """The arguments of ``forget``."""

    note_id: Annotated[NoteId, Field(description=f"The id of the note to forget ({ID_RULE}).")]


def arguments_message(tool: str, exc: ValidationError) -> str:
    """A rejected call's arguments in words (``argument_error`` for each)."""
    return f"{tool}: " + "; ".join(argument_error(e) for e in exc.errors())


class ReviseArgs(BaseModel):
    """The arguments of ``revise``."""

    note_id: Annotated[NoteId, Field(description=f"The id of the note to revise ({ID_RULE}).")]
    text: ReviseText
    expected_version: ExpectedVersion = None
    metadata: MetadataArg = None
