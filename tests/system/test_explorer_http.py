"""The JSON the browser explorer reads, over HTTP without a browser: who may read it (admin
only; ``/v1/namespaces`` lists only the token's admin namespaces), what an explanation of a
served query says over the wire, the curves and a note's recency, and the refusals."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hivemind_memory.api_stub.server.tokens import TokenTable
from tests.support.frontdoor import ALICE, BOB, OPS, TOKENS, Live, call, start_live

TEAM_ADMIN = "team-a-admin-000000000"
AS_OF = "2026-06-01T00:00:00Z"


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    entries = [{"secret": TEAM_ADMIN, "ns": ["team-a"], "agent": "lead",
                "rights": ["query", "admin"]}]
    tokens = TokenTable({**TOKENS.by_digest, **TokenTable.from_entries(entries).by_digest})
    srv = start_live(f"memory://{tmp_path / 'store'}", tokens=tokens)
    yield srv
    srv.stop()


def _seed(live: Live) -> str:
    b = live.base
    for ns, token in (("team-a", ALICE), ("team-b", OPS)):
        assert call(b, "POST", f"/v1/ns/{ns}/events", [
            {"type": "note.created", "event_id": f"{ns}-1", "note_id": "deploys@@alice",
             "at": "2026-05-01T09:00:00Z", "text": "deploys happen on tuesday", "tokens": 10},
            # over the budget, and whole (the query asks for 128-token passages)
            {"type": "note.created", "event_id": f"{ns}-2", "note_id": "runbook@@alice",
             "at": "2026-05-02T09:00:00Z", "text": "deploys runbook " * 40, "tokens": 120},
            {"type": "note.created", "event_id": f"{ns}-3", "note_id": "key@@alice",
             "at": "2026-05-02T09:00:00Z", "text": "alice deploys key", "scope": "private"}],
            token=token)[0] == 200
    for _ in range(5):
        assert call(b, "POST", "/v1/ns/team-a/used", {"note_ids": ["deploys@@alice"]},
                    token=BOB)[0] == 200
    st, res = call(b, "POST", "/v1/ns/team-a/query",
                   {"text": "deploys", "budget": 100, "as_of": AS_OF,
                    "config": {"passage_tokens": 128}}, token=BOB)
    assert st == 200, res
    assert call(b, "GET", "/v1/ns/team-a/notes", token=OPS)[0] == 200  # waits: all projected
    return str(res["query_id"])


def test_only_admins_read_it_and_only_their_namespaces(live: Live) -> None:
    qid = _seed(live)
    b = live.base
    for path in ("/v1/namespaces", f"/v1/ns/team-a/audit/{qid}/explain",
                 "/v1/ns/team-a/curves", "/v1/ns/team-a/notes/deploys@@alice/recency"):
        assert call(b, "GET", path)[0] == 401
        assert call(b, "GET", path, token=BOB)[0] == 403
    st, got = call(b, "GET", "/v1/namespaces", token=TEAM_ADMIN)
    assert st == 200 and [n["ns"] for n in got["namespaces"]] == ["team-a"]
    assert got["workers"] and got["workers"][0]["kind"] == "in-process"
    st, got = call(b, "GET", "/v1/namespaces", token=OPS)
    assert st == 200 and [n["ns"] for n in got["namespaces"]] == ["team-a", "team-b"]
    assert call(b, "GET", f"/v1/ns/team-b/audit/{qid}/explain", token=TEAM_ADMIN)[0] == 403


def test_an_explanation_over_the_wire(live: Live) -> None:
    qid = _seed(live)
    st, e = call(live.base, "GET", f"/v1/ns/team-a/audit/{qid}/explain?note=key@@alice",
                 token=TEAM_ADMIN)
    assert st == 200, e
    assert e["agent"] == "bob" and e["chosen"][0][0] == "deploys@@alice"
    d = e["derived"]
    assert d["identical"] and d["recorded_why"] == "matches"
    assert {n["note_id"]: n["outcome"] for n in d["notes"]} == {
        "deploys@@alice": "shown", "runbook@@alice": "over_budget",
        "key@@alice": "private"}
    assert d["note"]["outcome"] == "private" and "private to alice" in d["note"]["detail"]
    assert e["recorded"]["counts"] == {"over_budget": 1}
    st, e = call(live.base, "GET", f"/v1/ns/team-a/audit/{qid}/explain?derive=false",
                 token=OPS)
    assert st == 200 and e["derived"] is None
    assert e["recorded"]["left_out"][0][0] == "runbook@@alice"


def test_curves_and_a_notes_recency(live: Live) -> None:
    st, c = call(live.base, "GET", "/v1/ns/team-a/curves", token=OPS)
    assert st == 200 and c["source"] == "server"  # nothing served yet
    _seed(live)
    st, c = call(live.base, "GET", "/v1/ns/team-a/curves", token=OPS)
    assert st == 200 and c["source"] == "worker"
    i = c["ages"].index(180)
    assert c["tiers"]["short"][i] == pytest.approx(0.675)
    assert c["tiers"]["longterm"][i] == 1.0
    assert c["tiers"]["five_percent"][i] < 1e-4
    st, r = call(live.base, "GET", "/v1/ns/team-a/notes/deploys@@alice/recency", token=OPS)
    assert st == 200 and r["tier"] == "longterm" and len(r["uses"]) == 5
    # before the fifth use it decays as a short note; from then on it is 1
    tiers = [p[3] for p in r["points"]]
    assert tiers[0] == "short" and tiers[-1] == "longterm"
    assert all(p[4] == 1.0 for p in r["points"] if p[3] == "longterm")


def test_refusals(live: Live) -> None:
    qid = _seed(live)
    b = live.base
    assert call(b, "GET", "/v1/ns/team-a/audit/team-a.000/explain", token=OPS)[0] == 404
    assert call(b, "GET", "/v1/ns/team-a/audit/nonsense/explain", token=OPS)[0] == 404
    assert call(b, "GET", f"/v1/ns/team-a/audit/{qid}/explain?note=bad%20id",
                token=OPS)[0] == 400
    assert call(b, "GET", f"/v1/ns/team-a/audit/{qid}/explain?derive=maybe",
                token=OPS)[0] == 400
    assert call(b, "GET", "/v1/ns/team-a/notes/nope/recency", token=OPS)[0] == 404
    doc = call(b, "GET", "/openapi.json")[1]
    assert "/v1/ns/{ns}/audit/{query_id}/explain" in doc["paths"]
    assert "/v1/namespaces" in doc["paths"]
