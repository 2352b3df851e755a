"""Event filling, the one place the SDK and the HTTP server fill what an event left out."""

from __future__ import annotations

from datetime import datetime

from hivemind_memory.api_stub.protocol.stamps import filled


def test_what_is_missing_is_filled_and_what_is_given_is_kept() -> None:
    got = filled({"type": "note.used", "note_id": "n1"}, "team", "alice")
    assert got["event_id"].startswith("ev-") and got["ns"] == "team" and got["agent"] == "alice"
    assert datetime.fromisoformat(got["at"].replace("Z", "+00:00")).tzinfo is not None
    given = {"type": "note.used", "note_id": "n1", "event_id": "e-7", "at": "2026-01-01T00:00:00Z",
             "ns": "other", "agent": "bob"}
    assert filled(given, "team", "alice") == given


def test_no_agent_is_named_when_there_is_none_and_ids_differ() -> None:
    a, b = filled({}, "team", ""), filled({}, "team", "")
    assert "agent" not in a
    assert a["event_id"] != b["event_id"] and a["event_id"] < b["event_id"]  # time-ordered
