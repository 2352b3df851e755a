"""Whose note ids are whose: the id a writer may choose for a new note.

Ids are never reused, so a create whose id is taken cannot succeed; if any caller could pick
any id, the refusal would confirm that an id is taken, even by another agent's private note
the caller may not see (an oracle). So a caller whose view is restricted (a token without the
``admin`` right: ``hivemind serve --tokens``, over REST and MCP) creates notes only with ids of
its own space, and is refused the same way for every other id, taken or free:

- the ids hivemind makes (``n-`` and 28 lowercase hex digits: a µs clock, a counter and 40
  random bits; what a create without ``note_id`` gets): anyone's;
- ``KEY@@AGENT``: ends with ``@@`` and the caller's own agent, ``KEY`` not empty. An agent
  whose name holds ``@@`` has no such ids (so each id has at most one owner).

Callers that see every note (a store URL, open mode, an ``admin`` token) choose any id: a 409
``note_exists`` tells them nothing they could not read.
"""

from __future__ import annotations

import re

OWNER_MARK = "@@"
"""What separates a chosen id's key from its owner's agent."""
GENERATED_NOTE_ID = re.compile(r"n-[0-9a-f]{28}\Z")
"""The form of the ids hivemind makes (``sdk.new_id("n")``)."""


def id_suffix(agent: str) -> str:
    """What an id chosen by ``agent`` must end with ("" when it has no space of its own)."""
    return "" if not agent or OWNER_MARK in agent else OWNER_MARK + agent


def may_choose(note_id: str, agent: str) -> bool:
    """True if ``agent`` (a restricted caller) may create a note with id ``note_id``."""
    if GENERATED_NOTE_ID.match(note_id):
        return True
    suffix = id_suffix(agent)
    return bool(suffix) and note_id.endswith(suffix) and len(note_id) > len(suffix)


def foreign_message(where: str, agent: str) -> str:
    """The refusal of a create whose id is not ``agent``'s: the same bytes for a taken id and
    a free one, and for every foreign id (it names only where and who; the caller knows the
    id it sent)."""
    suffix = id_suffix(agent)
    mine = (f"or end with {suffix!r} (KEY{suffix}, e.g. 'notes{suffix}')" if suffix else
            f"(agent {agent!r} holds {OWNER_MARK!r}, so it has no ids of its own)")
    return (f"{where}: this note id is not one agent {agent!r} may choose: a new note's id is "
            f"one hivemind makes (leave note_id out) {mine}")
