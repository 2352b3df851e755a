"""Event builders for tests: every field can vary."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from hivemind_memory.events.codec import parse_json_event
from hivemind_memory.events.schema import Event

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def created(nid: str, *, ns: str = "t", agent: str = "a", at: datetime = T0,
            text: str | None = None, eid: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"type": "note.created", "event_id": eid or f"c-{nid}", "ns": ns, "note_id": nid,
            "agent": agent, "at": iso(at), "text": text or f"note {nid} about redis", **extra}


def used(nid: str, eid: str, *, ns: str = "t", agent: str = "b",
         at: datetime = T0 + timedelta(days=1)) -> dict[str, Any]:
    return {"type": "note.used", "event_id": eid, "ns": ns, "note_id": nid, "agent": agent,
            "at": iso(at)}


def forgotten(nid: str, eid: str, *, ns: str = "t", at: datetime = T0 + timedelta(days=2),
              agent: str = "a") -> dict[str, Any]:
    """Forgotten by ``agent``: the note's author (``created``'s default) unless said."""
    return {"type": "note.forgotten", "event_id": eid, "ns": ns, "note_id": nid,
            "agent": agent, "at": iso(at)}


def ev(d: dict[str, Any]) -> Event:
    return parse_json_event(json.dumps(d))


def jsonl(dicts: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(d) + "\n" for d in dicts)


def revised(nid: str, eid: str, *, ns: str = "t", agent: str = "a",
            at: datetime = T0 + timedelta(days=1), text: str | None = None,
            **extra: Any) -> dict[str, Any]:
    """A revision by ``agent`` (the note's author, ``created``'s default, unless said)."""
    return {"type": "note.revised", "event_id": eid, "ns": ns, "note_id": nid, "agent": agent,
            "at": iso(at), "text": text or f"note {nid} revised by {eid}", **extra}


def erased(nid: str, eid: str, *, ns: str = "t", agent: str = "ops",
           at: datetime = T0 + timedelta(days=3), as_admin: bool = True) -> dict[str, Any]:
    """An erasure (an admin's unless ``as_admin=False``)."""
    return {"type": "note.erased", "event_id": eid, "ns": ns, "note_id": nid, "agent": agent,
            "at": iso(at), "as_admin": as_admin}
