"""Event types: frozen, tagged msgspec structs in one union, with the contract's limits.

Schemas evolve by appending fields with defaults; a breaking change gets a new tag.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
from datetime import datetime
from typing import Annotated, Literal

import msgspec

ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}\Z"
r"""event_id, note_id and agent. Anchored with ``\Z``, not ``$``: ``$`` also matches before a
final newline, so ``"u9\n"`` would pass as a second, different-looking id."""
NS_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}\Z"
r"""Namespace names (also safe inside Redis key hash tags); ``\Z`` as above."""
MAX_TEXT_BYTES = 64 * 1024
"""Largest note text, in UTF-8 bytes."""
MAX_TOKENS = 1_000_000
"""Largest explicit token count of one note."""
MAX_EMBEDDING_DIM = 4096
"""Largest embedding length."""
MAX_EMBEDDING_ABS = 1e150
"""Largest magnitude of one embedding component: the squares and dot products of 4096 of them
stay finite (found by fuzzing the HTTP API: 1e200 overflowed the cosine to NaN)."""

Id = Annotated[str, msgspec.Meta(pattern=ID_PATTERN)]
Ns = Annotated[str, msgspec.Meta(pattern=NS_PATTERN)]
EventId = Annotated[str, msgspec.Meta(extra_json_schema={"pattern": ID_PATTERN})]
"""An id field of an event: the pattern is in the JSON schema and checked by ``check_ids``
(the codec runs it on every event it decodes), not by msgspec, whose regex check cost a
microsecond per event of ingest, projection and replay."""
EventNs = Annotated[str, msgspec.Meta(extra_json_schema={"pattern": NS_PATTERN})]
"""The namespace field of an event, checked the same way."""
UtcDatetime = Annotated[datetime, msgspec.Meta(tz=True)]
Tokens = Annotated[int, msgspec.Meta(ge=1, le=MAX_TOKENS)]
Text = Annotated[str, msgspec.Meta(min_length=1)]
EmbeddingComponent = Annotated[float, msgspec.Meta(ge=-MAX_EMBEDDING_ABS, le=MAX_EMBEDDING_ABS)]
Embedding = Annotated[list[EmbeddingComponent],
                      msgspec.Meta(min_length=1, max_length=MAX_EMBEDDING_DIM)]
Scope = Literal["shared", "private"]
Kind = Literal["note", "scratch"]
MAX_METADATA_KEYS = 32
"""Most keys in one note's ``metadata``."""
METADATA_KEY_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.:-]{0,63}\Z"
"""A ``metadata`` key: a letter or ``_``, then up to 63 letters, digits and ``_.:-`` (never
``$``: a filter's operators start with it)."""
MAX_METADATA_STR_BYTES = 1024
"""Largest string value in ``metadata``, in UTF-8 bytes."""
Scalar = str | int | float | bool
"""A ``metadata`` value (JSON string, integer, number or boolean; never null, a list or an
object)."""
Metadata = dict[str, Scalar]

_meta_key_ok = re.compile(METADATA_KEY_PATTERN).search


def check_metadata(meta: dict[str, Scalar], where: str = "metadata") -> None:
    """``ValueError`` naming the first key of ``meta`` that breaks a limit (key count, key
    pattern, string size, a non-finite number); its message ends with the field's path."""
    if len(meta) > MAX_METADATA_KEYS:
        raise ValueError(f"{where} has {len(meta)} keys, at most {MAX_METADATA_KEYS} allowed"
                         f" - at `$.{where}`")
    for k, v in meta.items():
        if not _meta_key_ok(k):
            raise ValueError(f"{where} key {k[:80]!r} must match {METADATA_KEY_PATTERN!r}"
                             f" - at `$.{where}`")
        if isinstance(v, str):
            n = len(v.encode("utf-8"))
            if n > MAX_METADATA_STR_BYTES:
                raise ValueError(f"{where} value is {n} bytes of UTF-8, at most "
                                 f"{MAX_METADATA_STR_BYTES} allowed - at `$.{where}.{k}`")
        elif isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"{where} value must be a finite number - at `$.{where}.{k}`")


class _Event(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="type",
             gc=False):
    """Common fields. ``gc=False``: instances hold only strings, numbers, a datetime and a list
    of floats, so they can never be part of a reference cycle; untracked, the hundreds of
    thousands a projection or an ingest decodes cost the cyclic garbage collector nothing."""

    event_id: EventId
    ns: EventNs
    note_id: EventId
    agent: EventId
    at: UtcDatetime


MAX_SUPERSEDES = 64
"""Most notes one ``note.created`` may supersede."""
DIGEST_PATTERN = r"^(hmac-sha256|sha256):[0-9a-f]{64}\Z"
"""``redacted``: the digest of the content an erasure removed from the event
(``hmac-sha256:``, keyed with the store's secret; ``sha256:`` in logs erased before it was
keyed, still read)."""

Digest = Annotated[str, msgspec.Meta(pattern=DIGEST_PATTERN)]


def _check_content(text: str, embedding: list[float] | None, redacted: str | None) -> None:
    """The rules shared by every event that carries a note's content: at most
    ``MAX_TEXT_BYTES`` of text, finite embeddings; a redacted event (its content erased) has
    an empty text and no embedding, any other at least one byte of text."""
    if redacted is not None:
        if text or embedding is not None:
            raise ValueError("a redacted event keeps no text and no embedding - at `$.redacted`")
        return
    if not text:
        raise ValueError("Expected `str` of length >= 1 - at `$.text`")
    n = len(text.encode("utf-8"))
    if n > MAX_TEXT_BYTES:
        raise ValueError(f"text is {n} bytes of UTF-8, at most {MAX_TEXT_BYTES} allowed")
    if embedding is not None and not all(math.isfinite(x) for x in embedding):
        raise ValueError("embedding must contain only finite floats")


class NoteCreated(_Event, frozen=True, gc=False, tag="note.created", omit_defaults=True):
    """A new note; its id is never reused in the namespace, even after forgetting.

    ``supersedes``: notes this one replaces (they leave future answers; their uses carry
    over). ``redacted``: set, with the text emptied and the embedding dropped, when the note
    was erased (the log is rewritten; the digest is of the content that was removed)."""

    text: str
    tokens: Tokens | None = None
    scope: Scope = "shared"
    kind: Kind = "note"
    embedding: Embedding | None = None
    supersedes: Annotated[list[EventId], msgspec.Meta(max_length=MAX_SUPERSEDES)] = []
    redacted: Digest | None = None
    metadata: Metadata | None = None
    """String keys to scalar values (``check_metadata``'s limits); filters match on them."""
    expires_at: UtcDatetime | None = None
    """From this instant on the note is in no answer (as-of queries before it still see it);
    its events stay in the log."""

    def __post_init__(self) -> None:
        _check_content(self.text, self.embedding, self.redacted)
        if self.metadata is not None:
            check_metadata(self.metadata)


class NoteUsed(_Event, frozen=True, gc=False, tag="note.used"):
    """An agent used a note (it counts toward promotion to ``longterm``)."""


class NoteForgotten(_Event, frozen=True, gc=False, tag="note.forgotten", omit_defaults=True):
    """The note is gone from every future answer; it stays in the log. Only the note's
    author may forget it, or a writer with the ``admin`` right (``as_admin``: set by the
    server from the token, never taken from a request body)."""

    as_admin: bool = False


class NoteRevised(_Event, frozen=True, gc=False, tag="note.revised", omit_defaults=True):
    """A new text (and optionally tokens, embedding, kind) for an existing note, by its
    author or an ``admin`` (``as_admin``, set by the server from the token). The note keeps
    its id, uses and tier; an answer as of before the revision shows the text before it.
    ``tokens`` absent: estimated from the new text; ``embedding`` absent: the note has none
    after the revision; ``kind`` absent: unchanged. ``redacted`` as on ``note.created``
    (an erasure also drops ``metadata``)."""

    text: str
    tokens: Tokens | None = None
    embedding: Embedding | None = None
    kind: Kind | None = None
    as_admin: bool = False
    redacted: Digest | None = None
    metadata: Metadata | None = None
    """The note's metadata from now on (absent: unchanged; ``{}``: none)."""
    expected_version: Annotated[int, msgspec.Meta(ge=1)] | None = None
    """Apply only if the note's ``version`` is this one, else the revision is refused
    (``version_conflict``); absent: whatever the version."""

    def __post_init__(self) -> None:
        _check_content(self.text, self.embedding, self.redacted)
        if self.metadata is not None:
            check_metadata(self.metadata)


class NoteErased(_Event, frozen=True, gc=False, tag="note.erased", omit_defaults=True):
    """The note's content (every version's text and embedding) becomes unrecoverable from
    everything hivemind wrote; the note leaves every answer, as of any time. ``admin`` only
    (``as_admin``, set by the server from the token or by the operator's CLI)."""

    as_admin: bool = False


Event = NoteCreated | NoteUsed | NoteForgotten | NoteRevised | NoteErased
EVENT_TYPES = ("note.created", "note.used", "note.forgotten", "note.revised", "note.erased")
CONTENT_EVENTS = (NoteCreated, NoteRevised)
"""The event types that carry a note's content (``text``, ``embedding``): what an erasure
redacts."""


def content_digest(text: str, embedding: list[float] | None, key: bytes) -> str:
    """The ``redacted`` digest of the content an erasure removes from an event: HMAC-SHA256,
    keyed with the store's secret ``key`` (``projections.store.erasure.digest_key``), of the
    canonical JSON ``[text, embedding]`` (``hmac-sha256:<64 hex>``). Whoever holds the key
    and the content can prove it is the one erased; without the key the digest gives nothing
    back, not even a short text (a door code) by guessing."""
    body = msgspec.json.encode([text, embedding])
    return "hmac-sha256:" + hmac.new(key, body, hashlib.sha256).hexdigest()


def redacted(ev: NoteCreated | NoteRevised, key: bytes) -> NoteCreated | NoteRevised:
    """``ev`` with its content removed: the same fields, ``text`` empty, no embedding nor
    metadata,
    ``tokens`` the count the original had (explicit: an absent one is estimated from the
    text) and ``redacted`` the keyed digest of what was removed. Already redacted:
    unchanged."""
    if ev.redacted is not None:
        return ev
    tokens = ev.tokens if ev.tokens is not None else token_estimate(ev.text)
    return msgspec.structs.replace(ev, text="", embedding=None, tokens=tokens, metadata=None,
                                   redacted=content_digest(ev.text, ev.embedding, key))


def token_estimate(text: str) -> int:
    """Tokens of a note whose event gives none: ``ceil(utf8_bytes / 4)``."""
    return max(1, -(-len(text.encode("utf-8")) // 4))


def event_type(ev: Event) -> str:
    """The ``type`` tag of an event (``note.created`` ...)."""
    return str(type(ev).__struct_config__.tag)


_id_ok = re.compile(ID_PATTERN).search
_ns_ok = re.compile(NS_PATTERN).search
_GOOD_IDS: set[str] = set()
"""Note ids and agents already checked (they repeat; event ids do not, so are not kept)."""
_GOOD_NS: set[str] = set()
"""Namespaces already checked."""
GOOD_MAX = 100_000
"""Bound of each of those sets (cleared when full)."""


def _regex_error(pattern: str, field: str) -> msgspec.ValidationError:
    """msgspec's own wording for a pattern mismatch, so messages are as before."""
    return msgspec.ValidationError(f"Expected `str` matching regex {pattern!r} - at `$.{field}`")


def _good(known: set[str], value: str) -> None:
    if len(known) >= GOOD_MAX:
        known.clear()
    known.add(value)


def check_ids(ev: Event) -> None:
    """Raise ``msgspec.ValidationError`` naming the first of ``event_id``, ``ns``, ``note_id``,
    ``agent`` that does not match its pattern (field order, msgspec's wording)."""
    if not _id_ok(ev.event_id):
        raise _regex_error(ID_PATTERN, "event_id")
    ns = ev.ns
    if ns not in _GOOD_NS:
        if not _ns_ok(ns):
            raise _regex_error(NS_PATTERN, "ns")
        _good(_GOOD_NS, ns)
    note_id = ev.note_id
    if note_id not in _GOOD_IDS:
        if not _id_ok(note_id):
            raise _regex_error(ID_PATTERN, "note_id")
        _good(_GOOD_IDS, note_id)
    agent = ev.agent
    if agent not in _GOOD_IDS:
        if not _id_ok(agent):
            raise _regex_error(ID_PATTERN, "agent")
        _good(_GOOD_IDS, agent)
    if type(ev) is NoteCreated:
        for i, sid in enumerate(ev.supersedes):
            if not _id_ok(sid):
                raise _regex_error(ID_PATTERN, f"supersedes[{i}]")
