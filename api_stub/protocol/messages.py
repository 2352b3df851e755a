"""The query protocol shared by the client, the CLI and the worker: requests, results, errors.

Results are encoded with msgspec (fixed field order, no whitespace), so the same log, the same
query and the same ``as_of`` give the same bytes.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from datetime import UTC, datetime
from typing import Annotated, Any

import msgspec

from hivemind_memory.events.errors import ConfigError, QueryError
from hivemind_memory.events.schema import ID_PATTERN, NS_PATTERN, Embedding, Id, Ns, UtcDatetime
from hivemind_memory.events.times import to_utc
from hivemind_memory.projections.ranking.config import (
    DEFAULT,
    RankingConfig,
    id_digest,
    with_overrides,
)
from hivemind_memory.projections.ranking.filters import Condition, parse_filter
from hivemind_memory.projections.ranking.rank_result import NoteSignals, TimeWindowShown, Why

MAX_BUDGET = 1_000_000
"""Largest token budget of one query."""
AGENT_PATTERN = r"^\Z|" + ID_PATTERN
"""A query's agent: an id, or empty (anonymous: sees no private notes)."""
ID_PREFIX_PATTERN = r"^[A-Za-z0-9_.:@-]{0,128}\Z"
"""A query's ``id_prefix``: the start of a note id (empty: every note)."""
IdPrefix = Annotated[str, msgspec.Meta(pattern=ID_PREFIX_PATTERN, max_length=128)]
MAX_READ = 1000
"""Most notes one read (``POST .../read``) names or returns."""


class QueryRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """One query, as submitted (JSON Lines for ``hivemind batch`` use the same fields)."""

    ns: Ns
    text: Annotated[str, msgspec.Meta(min_length=1, max_length=16_384)]
    budget: Annotated[int, msgspec.Meta(ge=1, le=MAX_BUDGET)]
    agent: Annotated[str, msgspec.Meta(pattern=AGENT_PATTERN)] = ""
    as_of: UtcDatetime | None = None
    explain: bool = False
    embedding: Embedding | None = None
    config: dict[str, Any] | None = None
    """Per-query overrides of the ranking config (unknown keys are an error)."""
    context: bool = False
    """Render the packed notes as one ``context`` text, each under a header (id, date) whose
    cost counts in the note's cost (``projections.ranking.render``)."""
    id_prefix: IdPrefix = ""
    """Only notes whose id starts with this are candidates (a namespace within the namespace,
    e.g. one LangGraph namespace); relevance statistics stay those of every note seen."""
    filter: dict[str, Any] | None = None
    """Only notes whose metadata matches are candidates (``projections.ranking.filters``:
    LangGraph's form), decided before the most relevant are kept and packed."""

    def __post_init__(self) -> None:
        if not self.text.strip():
            raise ValueError("text must not be empty or only whitespace")
        if self.filter is not None:
            parse_filter(self.filter)

    def conditions(self) -> tuple[Condition, ...]:
        """The filter's conditions (none without a filter)."""
        return () if not self.filter else parse_filter(self.filter)


class ReadRequest(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """Notes by id (``note_ids``) or by id prefix (``prefix``, paged by ``after`` and
    ``limit``): those the token's agent may see (live; shared or its own), as they stand
    after every write made before the request (no worker needed to see them)."""

    note_ids: Annotated[list[Id], msgspec.Meta(max_length=MAX_READ)] = []
    prefix: IdPrefix | None = None
    after: IdPrefix = ""
    """With ``prefix``: only ids that sort after this one (the last id of the previous page)."""
    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_READ)] = 100
    """With ``prefix``: at most this many notes, in id order."""
    agent: Annotated[str, msgspec.Meta(pattern="^$|" + ID_PATTERN)] | None = None
    """As in a query: the token's agent (may be omitted; another agent is refused)."""


class Envelope(msgspec.Struct, frozen=True):
    """What a query job carries per query: the id, the submission position, the request."""

    query_id: str
    position: str
    request: dict[str, Any]


class QueryResult(msgspec.Struct, frozen=True, omit_defaults=True):
    """The contract's result object (``candidates`` only with ``explain``)."""

    query_id: str
    ns: str
    agent: str
    text: str
    as_of: datetime
    budget: int
    used: int
    method: str
    notes: list[NoteSignals]
    upper_bound: float = 0.0
    candidates: list[Any] | None = None
    context: str | None = None
    """The packed notes rendered in context order (only when the request asked for it)."""
    hint: str | None = None
    """Set when the namespace has no note at all (as of the answer's time): most often a
    mistyped namespace name."""
    nothing_relevant: bool = False
    """No note was likely enough to be needed (``calibration.floor``): the empty context is
    the answer, not a failure."""
    unknown_words: list[str] | None = None
    """The query's words that no note the asker may see contains (``unknown_word_factor``
    under 1): the memory was never told about them, so notes matching only the rest of
    the query were held back."""
    time_windows: list[TimeWindowShown] | None = None
    """With ``explain``: the time windows the question named ("two weeks ago"), the logit
    their notes gained and the candidates written in them
    (``calibration.time_window_weight``)."""


class QueryServed(msgspec.Struct, frozen=True, tag="query.served", tag_field="type"):
    """Audit event: what an agent was shown, when, and under which config."""

    query_id: str
    agent: str
    text: str
    as_of: datetime
    budget: int
    position: str
    config_digest: str
    method: str
    chosen: list[tuple[str, float]]
    # Appended for audit replay (defaults: events written before it still decode).
    served_at: datetime | None = None
    """The wall clock when the worker published the answer."""
    requested_as_of: datetime | None = None
    """The request's ``as_of`` (None: a live query, ``as_of`` above is then the clock)."""
    seen: str = ""
    """Log position of the state it was ranked on: for a live query the worker index's
    checkpoint (every entry up to it, whatever its ``at``), for an as-of query ``position``
    (entries up to it with ``at <= as_of``). Empty in events written before audit replay."""
    base_digest: str = ""
    """Digest of the worker's own config (``config_digest`` adds the per-query overrides)."""
    overrides: dict[str, Any] | None = None
    """The request's per-query config overrides."""
    explain: bool = False
    embedding_digest: str = ""
    """Digest of the query's embedding (stored in the namespace's embedding hash); empty: none."""
    used: int = 0
    upper_bound: float = 0.0
    result_digest: str = ""
    """SHA-256 of the result's JSON bytes: a reproduction must hash to the same."""
    context: bool = False
    """The request asked for a rendered context (headers counted in the costs)."""
    id_prefix: str = ""
    """The request's ``id_prefix`` (empty: every note was a candidate)."""
    why: Why | None = None
    """The shown notes' signals, the strongest notes left out and the reason, how many were
    left out per reason (``projections.ranking.why``; None in entries written before it)."""
    embedder_digest: str = ""
    """Digest of the embedder whose vectors ranked it (``Embedder.digest``); empty: none
    (``bm25`` relevance, or no embedder)."""
    redacted: str = ""
    """Non-empty: an erasure removed this query's text (``text`` is empty), because it was a
    version of that note (its id), and its filed embedding; written by the erasure only
    (``projections.store.erasure``)."""
    filter: dict[str, Any] | None = None
    """The request's metadata filter (None: none)."""


class ErrorBody(msgspec.Struct, frozen=True):
    code: str
    message: str


class QueryErrorResult(msgspec.Struct, frozen=True):
    """The contract's error object."""

    query_id: str
    error: ErrorBody


_enc = msgspec.json.Encoder()


def encode(obj: Any) -> bytes:
    """Canonical JSON bytes of a result or error object."""
    return _enc.encode(obj)


def error_json(query_id: str, code: str, message: str) -> bytes:
    """The error object as JSON bytes."""
    return encode(QueryErrorResult(query_id, ErrorBody(code, message)))


def is_error_json(body: bytes, query_id: str) -> bool:
    """Whether ``body`` (a result key's JSON) is the error object of ``query_id``, read from
    its first bytes: an error object starts with its ``query_id`` then ``error`` (the order of
    ``QueryErrorResult``'s fields), a result with ``query_id`` then ``ns``."""
    return body.startswith(b'{"query_id":' + encode(query_id) + b',"error":')


def parse_request(data: dict[str, Any] | bytes | str) -> QueryRequest:
    """Validate a request; ``QueryError('invalid_request', ...)`` names the field."""
    try:
        if isinstance(data, dict):
            req = msgspec.convert(data, QueryRequest)
        else:
            req = msgspec.json.decode(data, type=QueryRequest)
    except msgspec.ValidationError as exc:
        raise QueryError("invalid_request", f"invalid query: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise QueryError("invalid_request", f"malformed query JSON: {exc}") from exc
    if req.as_of is not None and req.as_of.tzinfo is not UTC:
        try:
            req = msgspec.structs.replace(req, as_of=to_utc(req.as_of, "as_of"))
        except ValueError as exc:
            raise QueryError("invalid_request", f"invalid query: {exc} - at `$.as_of`") from None
    effective_config(DEFAULT, req.config)  # unknown keys / bad values: fail early
    return req


def effective_config(base: RankingConfig, overrides: dict[str, Any] | None) -> RankingConfig:
    """``base`` with a query's overrides applied; unknown keys or bad values are errors."""
    if not overrides:
        return base
    if "embedder" in overrides:
        raise QueryError("invalid_request", "invalid query: config: embedder is the "
                         "worker's setting (its config file), not a per-query override")
    try:
        cfg = with_overrides(base, overrides)
    except msgspec.ValidationError as exc:
        raise QueryError("invalid_request", f"invalid query: config: {exc}") from exc
    if cfg.exact_max_cells > base.exact_max_cells:
        # one query must not make the worker allocate a huge DP table
        raise QueryError("invalid_request",
                         f"invalid query: config: exact_max_cells may not exceed the worker's "
                         f"{base.exact_max_cells}")
    return cfg


def new_query_id(req: QueryRequest, log_length: int) -> str:
    """``<ns>.<hex>``. ``as_of`` queries get an id derived from the request and the number of
    log entries it may see (the log is append-only, so that names the log prefix on any
    machine: same log + same query -> same id and bytes); live ones a random id."""
    if req.as_of is None:
        return f"{req.ns}.{uuid.uuid4().hex[:24]}"
    # canonical: the config overrides as the config they make (key order and restated
    # defaults do not matter)
    canon = msgspec.structs.replace(req, config=None)
    try:
        digest = id_digest(req.config)
    except msgspec.ValidationError as exc:
        raise QueryError("invalid_request", f"invalid query: config: {exc}") from exc
    h = hashlib.sha256(encode(canon) + b"#" + digest.encode() + b"@" +
                       str(log_length).encode()).hexdigest()[:24]
    return f"{req.ns}.{h}"


def ns_of(query_id: str) -> str:
    """The namespace part of a query id (raises ``QueryError`` if it has none)."""
    ns, dot, rest = query_id.partition(".")
    if not dot or not rest or not re.fullmatch(NS_PATTERN, ns):
        raise QueryError("invalid_request", f"malformed query id {query_id!r}")
    return ns


def digest_bytes(data: bytes) -> str:
    """The hex SHA-256 of some bytes (result and embedding digests)."""
    return hashlib.sha256(data).hexdigest()


def embedding_digest(embedding: list[float]) -> str:
    """Digest of an embedding, over its canonical JSON (floats round-trip exactly)."""
    return digest_bytes(encode(embedding))[:32]


def utcnow() -> datetime:
    """The wall clock, read at the edge (live queries only)."""
    return datetime.now(UTC)


__all__ = ["ConfigError", "Envelope", "QueryRequest", "QueryResult", "encode", "error_json",
           "is_error_json",
           "new_query_id", "ns_of", "parse_request"]
