"""JSON Lines in (with validation that names the line and field), compact msgpack for the stream."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import msgspec

from hivemind_memory.events.errors import EventError
from hivemind_memory.events.schema import Event, NoteCreated, NoteRevised, check_ids
from hivemind_memory.events.times import to_utc

_json_decode = msgspec.json.Decoder(Event).decode
_pack = msgspec.msgpack.Encoder().encode
_unpack = msgspec.msgpack.Decoder(Event).decode


def _to_utc(ev: Event) -> Event:
    """``ev`` with ``at`` (and ``expires_at``) in UTC; ``ValueError`` if that is out of range
    (checked first)."""
    if type(ev) is NoteCreated and ev.expires_at is not None and \
            ev.expires_at.tzinfo is not UTC:
        ev = msgspec.structs.replace(ev, expires_at=to_utc(ev.expires_at, "expires_at"))
    if ev.at.tzinfo is UTC:
        return ev
    return msgspec.structs.replace(ev, at=to_utc(ev.at, "at"))


def _decoded(ev: Event) -> Event:
    """A freshly decoded event, its ids checked (``msgspec.ValidationError``) and ``at`` in
    UTC (``ValueError``)."""
    check_ids(ev)
    return _to_utc(ev)


def parse_json_event(line: str | bytes, lineno: int | None = None,
                     not_after: datetime | None = None) -> Event:
    """One JSON object -> a validated event with ``at`` in UTC.

    Raises ``EventError`` whose message starts with ``line N:`` and names the field
    (msgspec's ``at `$.field``` path). Besides the schema: a note's text must hold more than
    whitespace, and with ``not_after`` (the caller's clock plus the allowed skew: this layer
    reads no clock) ``at`` may not be later than it. Past times are always fine (``ingest``
    of an old log).
    """
    where = f"line {lineno}: " if lineno is not None else ""
    try:
        ev = _json_decode(line)
        check_ids(ev)
    except msgspec.ValidationError as exc:
        raise EventError(f"{where}invalid event: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise EventError(f"{where}malformed JSON: {exc}") from exc
    except RecursionError:  # msgspec's own depth limit: nesting no event has
        raise EventError(f"{where}malformed JSON: nested too deeply") from None
    return _checked(ev, where, not_after)


def parse_event(obj: Mapping[str, Any], not_after: datetime | None = None) -> Event:
    """``parse_json_event`` of an object already decoded from JSON (a request body's), with
    the same checks and words, without encoding it back to JSON first."""
    try:
        ev = msgspec.convert(obj, Event)
        check_ids(ev)
    except msgspec.ValidationError as exc:
        raise EventError(f"invalid event: {exc}") from exc
    except RecursionError:  # as deep as the JSON decoder takes, deeper than any event
        raise EventError("invalid event: nested too deeply") from None
    return _checked(ev, "", not_after)


def _checked(ev: Event, where: str, not_after: datetime | None) -> Event:
    """A decoded event's checks beyond the schema (text, ``at`` in UTC and not too late)."""
    if isinstance(ev, NoteCreated | NoteRevised) and ev.redacted is None and \
            not ev.text.strip():
        raise EventError(f"{where}invalid event: text is only whitespace - at `$.text`")
    try:
        ev = _to_utc(ev)
    except ValueError as exc:
        field = "expires_at" if "expires_at" in str(exc) else "at"
        raise EventError(f"{where}invalid event: {exc} - at `$.{field}`") from None
    if not_after is not None and ev.at > not_after:
        raise EventError(f"{where}invalid event: at {ev.at.isoformat()} is in the future "
                         f"(later than {not_after.isoformat()}, the clock plus the allowed "
                         "skew) - at `$.at`")
    return ev


def encode_event(ev: Event) -> bytes:
    """The compact stream encoding (msgpack, tagged)."""
    return _pack(ev)


def decode_event(data: bytes) -> Event:
    """Inverse of ``encode_event`` (``at`` in UTC); raises msgspec errors for entries this
    version can't read and ``ValueError`` for an ``at`` out of range in UTC."""
    return _decoded(_unpack(data))

