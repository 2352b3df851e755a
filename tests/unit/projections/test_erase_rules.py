"""The fold's erasure rules and the redacted form of content events (pure: no Redis)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hivemind_memory.events.codec import decode_event, encode_event, parse_json_event
from hivemind_memory.events.errors import EventError
from hivemind_memory.events.schema import (
    NoteCreated,
    NoteRevised,
    content_digest,
    redacted,
    token_estimate,
)
from hivemind_memory.projections.reduce import Projection, Rejected, apply_event
from tests.support.factories import T0, created, ev, forgotten, iso, used

KEY = bytes(range(32))
"""A digest secret (the store makes a random one: ``erasure.digest_key``)."""


def erased(nid: str, eid: str = "x1", *, admin: bool = True, agent: str = "ops",
           at: Any = T0 + timedelta(days=3)) -> dict[str, Any]:
    return {"type": "note.erased", "event_id": eid, "ns": "t", "note_id": nid, "agent": agent,
            "at": iso(at), "as_admin": admin}


def revised(nid: str, eid: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"type": "note.revised", "event_id": eid, "ns": "t", "note_id": nid, "agent": "a",
            "at": iso(T0 + timedelta(days=1)), "text": text, **extra}


def _fold(dicts: list[dict[str, Any]]) -> Projection:
    p = Projection()
    p.feed([(f"{i + 1}-0", ev(d), b"") for i, d in enumerate(dicts)])
    return p


def test_erase_needs_the_admin_right() -> None:
    p = _fold([created("n", text="the secret"), erased("n", admin=False)])
    assert not p.notes["n"].erased and p.notes["n"].text == "the secret"
    assert [d.reason for d in p.dead] == ["note.erased: not_allowed: only an admin may erase "
                                          "a note"]


def test_erase_removes_text_and_embedding_and_keeps_the_rest() -> None:
    p = _fold([created("n", text="the secret", embedding=[0.25, 0.5], tokens=7),
               used("n", "u1"), erased("n")])
    n = p.notes["n"]
    assert (n.text, n.embedding, n.erased, n.redacted) == ("", None, True, True)
    assert (n.tokens, n.uses, n.agent) == (7, 1, "a")
    assert not n.active


@pytest.mark.parametrize("admin", [True, False])
def test_erase_applies_to_a_forgotten_note_and_a_private_one(admin: bool) -> None:
    """An admin erases any note; only the admin right matters, not scope or forgetting."""
    p = _fold([created("n", agent="alice", scope="private", text="hidden"),
               forgotten("n", "f1", agent="alice"), erased("n", admin=admin, agent="bob")])
    assert p.notes["n"].erased == admin
    assert (p.notes["n"].text == "") == admin


@pytest.mark.parametrize("later", [
    used("n", "u9"), forgotten("n", "f9"), revised("n", "r9", "new secret"),
    erased("n", "x9"), created("n", eid="c-again", text="reused id")])
def test_every_later_event_on_an_erased_note_is_a_dead_letter(later: dict[str, Any]) -> None:
    p = _fold([created("n", text="secret"), erased("n"), later])
    n = p.notes["n"]
    assert n.erased and n.text == "" and n.uses == 0
    code = [d.reason.split(": ")[1] for d in p.dead]
    assert code == ["erased_note"]


def test_a_redacted_created_folds_but_is_never_active() -> None:
    orig = ev(created("n", text="the secret text", embedding=[0.5]))
    assert isinstance(orig, NoteCreated)
    red = redacted(orig, KEY)
    res = apply_event(None, red)
    assert not isinstance(res, Rejected)
    assert res.redacted and not res.erased and not res.active
    assert res.tokens == token_estimate("the secret text") and res.text == ""


def test_redacted_keeps_every_field_but_the_content_and_sets_tokens_explicitly() -> None:
    orig = ev(created("n", text="hunter2 is the password", embedding=[0.1, 0.2],
                      scope="private", kind="scratch"))
    assert isinstance(orig, NoteCreated) and orig.tokens is None
    red = redacted(orig, KEY)
    assert isinstance(red, NoteCreated)
    assert (red.text, red.embedding) == ("", None)
    assert red.tokens == token_estimate("hunter2 is the password")
    assert red.redacted == content_digest("hunter2 is the password", [0.1, 0.2], KEY)
    assert red.redacted is not None and red.redacted.startswith("hmac-sha256:")
    assert msgspec.structs.replace(red, text=orig.text, embedding=orig.embedding, tokens=None,
                                   redacted=None) == orig
    assert redacted(red, KEY) is red  # already redacted: unchanged
    assert decode_event(encode_event(red)) == red  # through the stream encoding
    assert b"hunter2" not in encode_event(red)


def test_a_redacted_revision_keeps_the_token_count_of_its_text() -> None:
    rev = ev(revised("n", "r1", "a much longer revised secret text than before"))
    assert isinstance(rev, NoteRevised)
    p = _fold([created("n", text="short"), revised("n", "r1", rev.text)])
    q = Projection()
    q.feed([("1-0", redacted(ev(created("n", text="short")), KEY), b""),  # type: ignore[arg-type]
            ("2-0", redacted(rev, KEY), b"")])
    assert q.notes["n"].tokens == p.notes["n"].tokens == token_estimate(rev.text)
    assert q.notes["n"].version == p.notes["n"].version == 2


def test_a_replay_of_the_redacted_log_equals_the_live_fold() -> None:
    """What the erasure's log rewrite relies on: live (original log) and replay (rewritten
    log) agree note for note once the ``note.erased`` is folded."""
    log = [created("n", text="secret", embedding=[0.5, 0.25]), used("n", "u1"),
           revised("n", "r1", "secret v2", embedding=[0.75]), created("m", text="keep me"),
           created("n", eid="c-dup", text="dup secret"), erased("n")]
    live = _fold(log)
    rewritten = []
    for d in log:
        e = ev(d)
        rewritten.append(redacted(e, KEY) if isinstance(e, NoteCreated | NoteRevised)
                         and e.note_id == "n" else e)
    again = Projection()
    again.feed([(f"{i + 1}-0", e, b"") for i, e in enumerate(rewritten)])
    assert again.notes == live.notes
    assert [d.reason for d in again.dead] == [d.reason for d in live.dead]


@pytest.mark.parametrize(("extra", "word"), [
    ({"text": "still here", "redacted": "sha256:" + "0" * 64}, "redacted"),
    ({"text": "", "redacted": "sha256:" + "0" * 64, "embedding": [0.5]}, "redacted"),
    ({"text": "", "redacted": "sha256:abc"}, "redacted"),
    ({"text": ""}, "text")])
def test_bad_redacted_events_are_refused_naming_the_field(extra: dict[str, Any],
                                                          word: str) -> None:
    with pytest.raises(EventError, match=word):
        parse_json_event(msgspec.json.encode(created("n") | extra))


_OPS = st.lists(st.tuples(st.sampled_from(["create", "use", "revise", "forget", "erase",
                                           "erase_no_admin"]),
                          st.sampled_from(["n1", "n2", "n3"]),
                          st.sampled_from(["a", "b"])), max_size=25)


@settings(max_examples=150, deadline=None)
@given(ops=_OPS, cut=st.integers(min_value=0, max_value=25))
def test_any_log_folds_the_same_after_its_erased_notes_are_redacted(
        ops: list[tuple[str, str, str]], cut: int) -> None:
    """Random logs of creations, uses, revisions, forgets and erasures (by admins and not):
    the log with every content event of each erased note redacted (what the erasure writes)
    folds to the live state, in any batching, with the same dead letters."""
    log: list[dict[str, Any]] = []
    for i, (op, nid, agent) in enumerate(ops):
        eid = f"e{i}"
        if op == "create":
            log.append(created(nid, eid=eid, agent=agent, text=f"text {i} of {nid}",
                               embedding=[0.5, float(i)]))
        elif op == "use":
            log.append(used(nid, eid, agent=agent))
        elif op == "revise":
            log.append(revised(nid, eid, f"revised {i}") | {"agent": agent})
        elif op == "forget":
            log.append(forgotten(nid, eid, agent=agent))
        else:
            log.append(erased(nid, eid, admin=op == "erase", agent=agent))
    live = _fold(log)
    gone = {nid for nid, n in live.notes.items() if n.erased}
    rewritten = []
    for d in log:
        e = ev(d)
        rewritten.append(redacted(e, KEY) if isinstance(e, NoteCreated | NoteRevised)
                         and e.note_id in gone else e)
    entries = [(f"{i + 1}-0", e, b"") for i, e in enumerate(rewritten)]
    again = Projection()
    k = min(cut, len(entries))
    again.feed(entries[:k])
    again.feed(entries[k:])
    assert again.notes == live.notes
    assert [d.reason for d in again.dead] == [d.reason for d in live.dead]
    assert all(not n.text and n.embedding is None for nid, n in again.notes.items()
               if nid in gone)
