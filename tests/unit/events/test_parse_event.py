"""``parse_event`` (a request body's event, already decoded) says what ``parse_json_event``
says of the same object as JSON: the same event, or the same error, word for word."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from hivemind_memory.events.codec import parse_event, parse_json_event
from hivemind_memory.events.errors import EventError

BASE = {"type": "note.created", "event_id": "e1", "ns": "t", "agent": "a",
        "at": "2026-01-01T00:00:00+02:00", "note_id": "n1", "text": "hi"}
CASES: list[dict[str, Any]] = [
    BASE,
    {**BASE, "tokens": "3"},  # a string is not a number (no lax coercion)
    {**BASE, "tokens": 3.0},
    {**BASE, "tokens": True},
    {**BASE, "at": "yesterday"},
    {**BASE, "at": "2026-01-01T00:00:00"},  # no zone
    {**BASE, "text": "   "},
    {**BASE, "text": 5},
    {**BASE, "embedding": [1, 2, "x"]},
    {**BASE, "metadata": {"k": [1]}},
    {**BASE, "extra": 1},
    {**BASE, "note_id": ""},
    {**BASE, "at": "2030-01-01T00:00:00Z"},  # later than not_after
    {"type": "note.bogus", "event_id": "e1"},
    {"event_id": "e1"},
    {"type": "note.used", "event_id": "e2", "ns": "t", "agent": "a",
     "at": "2026-01-01T00:00:00Z", "note_id": "n1"},
]


def _outcome(fn: Any) -> str:
    try:
        return repr(fn())
    except EventError as exc:
        return f"EventError: {exc}"


@pytest.mark.parametrize("obj", CASES)
def test_a_decoded_object_parses_as_its_json_does(obj: dict[str, Any]) -> None:
    not_after = datetime(2027, 1, 1, tzinfo=UTC)
    want = _outcome(lambda: parse_json_event(json.dumps(obj), not_after=not_after))
    assert _outcome(lambda: parse_event(obj, not_after=not_after)) == want
