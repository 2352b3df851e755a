"""``remember`` through the doors users take (HTTP, the SDK over HTTP, the SDK on a store):
the same sentence written three times is one note and two answers naming it; the check leaves
nothing behind (no audit entry, result, query embedding or job); when it cannot be trusted the
answer says so and the note is written."""

from __future__ import annotations

from pathlib import Path

from hivemind_memory import Memory
from hivemind_memory.projections.store import keys
from tests.support.frontdoor import ALICE, BOB, OPS, Live, call

SENTENCE = "The on-call engineer is paged after two failed health checks."


def _remember(live: Live, body: dict[str, object], token: str = ALICE) -> dict[str, object]:
    st, got = call(live.base, "POST", "/v1/ns/team-a/remember", body, token=token)
    assert st == 200, got
    assert isinstance(got, dict)
    return got


def _notes_saying(live: Live, text: str, token: str = ALICE) -> list[str]:
    st, got = call(live.base, "POST", "/v1/ns/team-a/read", {"prefix": "", "limit": 1000},
                   token=token)
    assert st == 200, got
    return sorted(n["note_id"] for n in got if n["text"] == text)


def test_the_same_sentence_three_times_over_http_is_one_note(live: Live) -> None:
    first = _remember(live, {"text": SENTENCE})
    assert first["duplicates_checked"] is True and "duplicate_of" not in first
    second = _remember(live, {"text": "the on-call ENGINEER is paged after two failed "
                                      "health checks.  "})
    third = _remember(live, {"text": SENTENCE, "note_id": "mine@@alice"})
    for again in (second, third):
        assert again["duplicate_of"] == again["note_id"] == first["note_id"]
        assert again["duplicates"] == [{"note_id": first["note_id"], "overlap": 1.0}]
    assert _notes_saying(live, SENTENCE) == [first["note_id"]]
    # "keep" stores it anyway; another agent's same words are its own note
    kept = _remember(live, {"text": SENTENCE, "duplicates": "keep"})
    assert "duplicate_of" not in kept and kept["note_id"] != first["note_id"]
    bobs = _remember(live, {"text": SENTENCE}, token=BOB)
    assert "duplicate_of" not in bobs
    assert {d["note_id"] for d in bobs["duplicates"]} == {first["note_id"], kept["note_id"]}
    assert len(_notes_saying(live, SENTENCE)) == 3
    # the write checks left nothing: no audited query, result, query embedding or job
    st, audit = call(live.base, "GET", "/v1/ns/team-a/audit", token=OPS)
    assert st == 200 and audit == [], audit
    r = live.served.client.store
    assert r.xlen(keys.audit("team-a")) == 0 and r.xlen(keys.query_embeddings("team-a")) == 0
    assert not list(r.scan_iter(match=keys.result("team-a", "*")))
    rq = live.served.client.rq
    assert {rq.hget(k, "origin") for k in rq.scan_iter(match="rq:job:*")} <= {b"hivemind-project"}
    assert rq.llen("rq:queue:hivemind-query") == 0


def test_the_same_sentence_three_times_through_the_sdk(live: Live, tmp_path: Path) -> None:
    for mem in (Memory(live.base, ns="team-a", token=ALICE),
                Memory(f"memory://{tmp_path / 'own'}", ns="team-a", agent="alice")):
        with mem:
            a = mem.remember(SENTENCE)
            b = mem.remember(SENTENCE.upper())
            c = mem.remember(" " + SENTENCE)
            assert a.duplicate_of is None and a.duplicates_checked
            assert b == c == a and b.duplicate_of == c.duplicate_of == str(a)
            assert [n.note_id for n in mem.notes("")] == [str(a)]
            d = mem.remember(SENTENCE, duplicates="ignore")
            assert d != a and d.duplicates is None and not d.duplicates_checked
            assert d.duplicates_unchecked is None


def test_a_lookup_that_cannot_be_trusted_is_said_so(live: Live) -> None:
    first = _remember(live, {"text": SENTENCE})
    r = live.served.client.store
    assert live.served.client.wait_projected("team-a", 30)
    assert r.get(keys.dupspec("team-a")) is not None
    r.set(keys.dupspec("team-a"), "minhash1 plain 8x2")
    got = _remember(live, {"text": SENTENCE})
    assert got["duplicates_checked"] is False and got["duplicates"] is None
    assert str(got["duplicates_unchecked"]).startswith("index_mismatch: ")
    assert got["note_id"] != first["note_id"]  # written, unchecked, and the answer says so
