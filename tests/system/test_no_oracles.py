"""Issue 32's smaller findings, through the doors users take: JSON nested too deep is a 400
``malformed_json``; a whitespace-only note is refused; an ``at`` more than the allowed skew in
the future is refused (HTTP, SDK, MCP's SDK path, ``ingest``), while old dates still ingest."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from hivemind_memory.events.errors import HivemindError
from hivemind_memory.projections.store import keys
from tests.support import HIVEMIND
from tests.support.factories import created as created_line
from tests.support.factories import jsonl
from tests.support.frontdoor import ALICE, Live, call, created


def _logged(live: Live, ns: str = "team-a") -> int:
    return int(live.served.client.store.xlen(keys.stream(ns)))


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")


def test_json_nested_too_deep_is_malformed_json(live: Live) -> None:
    for depth in (1000, 30_000):
        raw = b"[" * depth + b"]" * depth
        for path in ("/events", "/query", "/queries", "/remember"):
            st, body = call(live.base, "POST", f"/v1/ns/team-a{path}", raw=raw, token=ALICE)
            assert st == 400, (path, depth, body)
            assert body["error"]["code"] == "malformed_json"
    st, _ = call(live.base, "POST", "/v1/ns/team-a/events", raw=b"[" * 10 + b"]" * 10,
                 token=ALICE)
    assert st == 422  # shallow nesting is JSON: an array of arrays is not events


@pytest.mark.parametrize("text", [" ", "\n\t  \r\n", "\u00a0\u2003", "\u3000"])
def test_a_whitespace_only_note_is_refused(live: Live, text: str) -> None:
    st, body = call(live.base, "POST", "/v1/ns/team-a/events", [created("e1", "n1@@alice", text)],
                    token=ALICE)
    assert st == 422 and "whitespace" in body["error"]["message"], body
    st, body = call(live.base, "POST", "/v1/ns/team-a/remember", {"text": text}, token=ALICE)
    assert st == 422 and "whitespace" in body["error"]["message"], body
    assert _logged(live) == 0
    st, _ = call(live.base, "POST", "/v1/ns/team-a/remember", {"text": f" x{text}"},
                 token=ALICE)
    assert st == 200  # one visible character is a note
    st, body = call(live.base, "POST", "/v1/ns/team-a/events", [created("e2", "n2@@alice", "real")],
                    token=ALICE)
    assert st == 200
    st, body = call(live.base, "POST", "/v1/ns/team-a/revise",
                    {"note_id": "n2@@alice", "text": text}, token=ALICE)
    assert st == 422 and "whitespace" in body["error"]["message"], body
    assert _logged(live) == 2


def test_an_at_in_the_future_is_refused_past_the_skew(live: Live) -> None:
    now = datetime.now(UTC)
    for at in (now + timedelta(seconds=400), datetime(9999, 12, 31, tzinfo=UTC)):
        st, body = call(live.base, "POST", "/v1/ns/team-a/events",
                        [created("e1", "n1@@alice", "from the future", at=_iso(at))], token=ALICE)
        assert st == 422 and "in the future" in body["error"]["message"], body
        st, body = call(live.base, "POST", "/v1/ns/team-a/remember",
                        {"text": "from the future", "at": _iso(at)}, token=ALICE)
        assert st == 422 and "`$.at`" in body["error"]["message"], body
    assert _logged(live) == 0
    for i, at in enumerate((now + timedelta(seconds=200), datetime(2001, 1, 1, tzinfo=UTC))):
        st, body = call(live.base, "POST", "/v1/ns/team-a/events",
                        [created(f"ok{i}", f"ok{i}@@alice", "within the skew", at=_iso(at))],
                        token=ALICE)
        assert st == 200, body
    assert _logged(live) == 2


def test_the_sdk_refuses_whitespace_and_the_future(tmp_path: Path) -> None:
    from hivemind_memory import Memory

    with Memory(f"memory://{tmp_path / 's'}", ns="t", agent="a") as mem:
        with pytest.raises(HivemindError, match="whitespace"):
            mem.remember("   \n")
        far = _iso(datetime.now(UTC) + timedelta(days=1))
        with pytest.raises(HivemindError, match="in the future"):
            mem.append([{"type": "note.created", "note_id": "f1", "at": far, "text": "later"}])
        assert mem.remember("a real note")


def test_ingest_refuses_the_future_and_takes_the_past(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIVEMIND_")}
    env["HIVEMIND_REDIS_URL"] = f"memory://{tmp_path / 'store'}"
    f = tmp_path / "ev.jsonl"
    f.write_text(jsonl([created_line("old", at=datetime(1999, 1, 1, tzinfo=UTC)),
                        created_line("late", at=datetime.now(UTC) + timedelta(hours=1))]))
    r = subprocess.run([*HIVEMIND, "ingest", str(f)], capture_output=True, text=True, env=env,
                       timeout=120, check=False)
    assert r.returncode == 1 and "line 2" in r.stderr and "in the future" in r.stderr, r.stderr
    r = subprocess.run([*HIVEMIND, "ingest", str(f), "--skip-invalid"], capture_output=True,
                       text=True, env={**env, "HIVEMIND_MAX_FUTURE_SKEW": "7200"}, timeout=120,
                       check=False)
    assert r.returncode == 0 and "appended 2" in r.stderr, r.stderr


WRITER = "writer-only-secret-0000"
SCRAPER = "scraper-secret-00000000"


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[Live]:
    """The test tokens plus a write-only token and a metrics-only one."""
    from hivemind_memory.api_stub.server.tokens import TokenTable
    from tests.support.frontdoor import BOB, OPS, start_live

    table = TokenTable.from_entries([
        {"secret": ALICE, "ns": ["team-a"], "agent": "alice", "rights": ["write", "query"]},
        {"secret": BOB, "ns": ["team-a"], "agent": "bob", "rights": ["write", "query"]},
        {"secret": OPS, "ns": ["*"], "agent": "ops", "rights": ["write", "query", "admin"]},
        {"secret": WRITER, "ns": ["team-a"], "agent": "w", "rights": ["write"]},
        {"secret": SCRAPER, "ns": ["team-b"], "agent": "prom", "rights": ["metrics"]},
    ])
    srv = start_live(f"memory://{tmp_path / 'g'}", tokens=table)
    yield srv
    srv.stop()


def test_metrics_need_a_metrics_or_global_admin_token(guarded: Live) -> None:
    import urllib.error
    import urllib.request

    from tests.support.frontdoor import OPS

    def get(token: str | None) -> tuple[int, str]:
        req = urllib.request.Request(guarded.base + "/metrics")
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    assert call(guarded.base, "POST", "/v1/ns/team-a/events", [created("e1", "n1@@alice", "x")],
                token=ALICE)[0] == 200
    for token, status in ((None, 401), ("not-a-token-000000000", 401), (ALICE, 403),
                          (WRITER, 403)):
        st, text = get(token)
        assert st == status and "team-a" not in text, (token, st, text)
    for token in (SCRAPER, OPS):
        st, text = get(token)
        assert st == 200 and "hivemind_" in text, token


def test_duplicates_are_reported_only_to_a_token_that_may_query(guarded: Live) -> None:
    from tests.support.frontdoor import BOB

    text = "the staging deploy key rotates every monday at nine"
    st, body = call(guarded.base, "POST", "/v1/ns/team-a/remember",
                    {"text": text, "note_id": "bobs@@bob"}, token=BOB)
    assert st == 200
    st, body = call(guarded.base, "POST", "/v1/ns/team-a/remember",
                    {"text": text + " sharp"}, token=ALICE)
    assert st == 200 and [d["note_id"] for d in body["duplicates"]] == ["bobs@@bob"], body
    for mode in ("report", "supersede"):
        st, body = call(guarded.base, "POST", "/v1/ns/team-a/remember",
                        {"text": text + f" ({mode})", "duplicates": mode}, token=WRITER)
        assert st == 200 and body.get("duplicates") is None, body
        assert "bobs" not in str(body)


def test_a_batch_is_bounded_by_its_total_work(live: Live) -> None:
    """``POST .../queries``: budgets summed, an ``as_of`` query 30 times its budget, at most
    ``HIVEMIND_BATCH_MAX_WORK`` (10,000,000 by default); one over is refused whole (413 naming
    the work and the bound), the bound itself is answered."""
    assert call(live.base, "POST", "/v1/ns/team-a/events",
                [created("e1", "n1@@alice", "deploys happen on tuesdays")], token=ALICE)[0] == 200
    q = {"text": "deploys", "budget": 1_000_000}
    st, got = call(live.base, "POST", "/v1/ns/team-a/queries", [q] * 10, token=ALICE)
    assert st == 200 and len(got) == 10 and all("error" not in r for r in got), got
    st, body = call(live.base, "POST", "/v1/ns/team-a/queries",
                    [q] * 10 + [{"text": "deploys", "budget": 1}], token=ALICE)
    assert st == 413 and body["error"]["code"] == "batch_too_costly", body
    assert "10,000,001" in body["error"]["message"] and "10,000,000" in body["error"]["message"]
    past = {"text": "deploys", "budget": 333_334, "as_of": "2026-06-01T00:00:00Z"}
    st, body = call(live.base, "POST", "/v1/ns/team-a/queries", [past], token=ALICE)
    assert st == 413 and "10,000,020" in body["error"]["message"], body
    st, got = call(live.base, "POST", "/v1/ns/team-a/queries",
                   [{**past, "budget": 333_333}], token=ALICE)
    assert st == 200 and "error" not in got[0], got


def test_a_taken_note_id_answers_the_same_whoever_holds_it(live: Live) -> None:
    """``remember`` with a taken id: 409 ``note_exists`` in the same words for another agent's
    private note, a shared one, a forgotten one and an erased one: it says the id is taken,
    never by whom, in which scope or whether the note lives (ids are never reused)."""
    from tests.support.frontdoor import BOB, OPS

    # ids hivemind made for bob's notes (the ids any token may send: under the default owned
    # ids, a chosen id of bob's space is refused to alice before it is looked up)
    ids: dict[str, str] = {}
    for key, extra in (("bp", {"scope": "private"}), ("bs", {}), ("bf", {}), ("be", {})):
        st, body = call(live.base, "POST", "/v1/ns/team-a/remember",
                        {"text": f"bob's note {key}", **extra}, token=BOB)
        assert st == 200, body
        ids[key] = body["note_id"]
    assert call(live.base, "POST", "/v1/ns/team-a/forget", {"note_id": ids["bf"]},
                token=BOB)[0] == 200
    assert call(live.base, "DELETE", f"/v1/ns/team-a/notes/{ids['be']}", token=OPS)[0] == 200
    answers = set()
    for nid in ids.values():
        st, body = call(live.base, "POST", "/v1/ns/team-a/remember",
                        {"text": "alice's guess", "note_id": nid}, token=ALICE)
        assert st == 409 and body["error"]["code"] == "note_exists", body
        answers.add(body["error"]["message"].replace(repr(nid), "ID"))
    assert len(answers) == 1, answers
    assert "private" not in next(iter(answers)) and "bob" not in next(iter(answers))


def _raw(base: str, path: str, body: Any, token: str) -> tuple[int, bytes]:
    """Status and the exact bytes of the answer."""
    import json
    import urllib.error
    import urllib.request

    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json",
                                          "Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _mcp_remember(live: Live, token: str, args: dict[str, Any]) -> tuple[bool, str]:
    import anyio
    from mcp import Client as McpClient
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async def main() -> tuple[bool, str]:
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}",
                                               "X-Hivemind-Ns": "team-a"})
        async with http, McpClient(streamable_http_client(live.base + "/mcp", http_client=http),
                                   read_timeout_seconds=60) as client:
            got = await client.call_tool("remember", args)
            return bool(got.is_error), str(got.content[0].text)  # type: ignore[union-attr]

    return anyio.run(main)


@pytest.fixture
def owned(tmp_path: Path) -> Iterator[Live]:
    """``serve`` with the test tokens and the default note ids (``owned``: nothing set)."""
    from tests.support.frontdoor import start_live

    srv = start_live(f"memory://{tmp_path / 'owned'}")
    yield srv
    srv.stop()


def test_a_create_never_confirms_another_agents_private_id(owned: Live) -> None:
    """By default (``HIVEMIND_NOTE_IDS=owned``), a token that may not see every note creates
    notes only with ids of its own space (ids hivemind makes, or ``KEY@@AGENT`` of its own
    agent): any other id is refused with the
    same bytes whether it is taken by another agent's private note or free, through HTTP
    (both write routes), the SDK and MCP. Before (and with the opt-out ``any``), a taken id
    answered 409 and a free one 200."""
    from hivemind_memory import ForeignNoteId, Memory
    from tests.support.frontdoor import BOB, OPS

    st, _ = call(owned.base, "POST", "/v1/ns/team-a/remember",
                 {"text": "bob's door code is 4711", "note_id": "door@@bob",
                  "scope": "private"}, token=BOB)
    assert st == 200
    # a private note whose id has no owner (written before ids had owners, or by a door
    # that sees everything)
    owned.served.client.append_checked([created_line(
        "legacy-door", ns="team-a", agent="bob", scope="private", text="bob's old code")])
    taken_and_free = [("door@@bob", "free@@bob"), ("legacy-door", "never-used")]
    for path, body in (("/v1/ns/team-a/remember", lambda nid: {"text": "guess", "note_id": nid}),
                       ("/v1/ns/team-a/events", lambda nid: [created("e-guess", nid, "guess")])):
        answers = {_raw(owned.base, path, body(nid), ALICE)
                   for pair in taken_and_free for nid in pair}
        assert len(answers) == 1, answers
        [(status, raw)] = answers
        assert status == 403 and b'"foreign_note_id"' in raw and b"@@alice" in raw, raw
    with Memory(owned.base, ns="team-a", token=ALICE) as alice:
        said = set()
        for nid in (n for pair in taken_and_free for n in pair):
            with pytest.raises(ForeignNoteId) as exc:
                alice.remember("guess", note_id=nid)
            said.add(str(exc.value))
        assert len(said) == 1, said
        assert alice.id_suffix() == "@@alice"
        assert alice.remember("mine", note_id="mine@@alice") == "mine@@alice"  # its own space
        assert alice.remember("made for me").startswith("n-")  # ids hivemind makes
    mcp_said = {_mcp_remember(owned, ALICE, {"text": "guess", "note_id": nid})
                for pair in taken_and_free for nid in pair}
    assert len(mcp_said) == 1 and next(iter(mcp_said))[0], mcp_said
    assert "this note id is not one agent 'alice' may choose" in next(iter(mcp_said))[1]
    # nothing of the probes reached the log; bob's notes are untouched
    assert _logged(owned) == 4  # bob's two, alice's two of her own
    # an admin sees every note: it may choose any id, and a taken one is 409 note_exists
    st, body = call(owned.base, "POST", "/v1/ns/team-a/remember",
                    {"text": "ops choice", "note_id": "ops-choice"}, token=OPS)
    assert st == 200, body
    st, body = call(owned.base, "POST", "/v1/ns/team-a/remember",
                    {"text": "ops guess", "note_id": "legacy-door"}, token=OPS)
    assert st == 409 and body["error"]["code"] == "note_exists", body


def test_any_ids_stay_an_opt_out_that_reopens_the_oracle(tmp_path: Path) -> None:
    """``HIVEMIND_NOTE_IDS=any`` (not the default): a token chooses any id, ``whoami`` says
    so, and a guessed id that another agent's private note holds answers 409 ``note_exists``
    while a free one is taken: the oracle the default closes, documented as re-opened."""
    from hivemind_memory import Memory
    from tests.support.frontdoor import BOB, start_live

    srv = start_live(f"memory://{tmp_path / 'any'}", env={"HIVEMIND_NOTE_IDS": "any"})
    try:
        st, _ = call(srv.base, "POST", "/v1/ns/team-a/remember",
                     {"text": "bob's door code is 4711", "note_id": "door-code",
                      "scope": "private"}, token=BOB)
        assert st == 200
        with Memory(srv.base, ns="team-a", token=ALICE) as alice:
            assert alice.id_suffix() == ""
            assert alice.remember("free form", note_id="free-form") == "free-form"
        st, body = call(srv.base, "POST", "/v1/ns/team-a/remember",
                        {"text": "guess", "note_id": "door-code"}, token=ALICE)
        assert st == 409 and body["error"]["code"] == "note_exists", body
    finally:
        srv.stop()


def test_a_batch_answer_is_bounded_in_bytes(tmp_path: Path) -> None:
    """Answers that would take a batch past ``HIVEMIND_BATCH_MAX_ANSWER_BYTES`` are each
    replaced by an ``answer_too_large`` error object naming the bound; those before it stay."""
    import json

    from tests.support.frontdoor import start_live

    srv = start_live(f"memory://{tmp_path / 'b'}",
                     env={"HIVEMIND_BATCH_MAX_ANSWER_BYTES": "4000"})
    try:
        text = "deploys " + "happen on tuesdays after lunch " * 40
        assert call(srv.base, "POST", "/v1/ns/team-a/events", [created("e1", "n1@@alice", text)],
                    token=ALICE)[0] == 200
        q = {"text": "deploys tuesdays", "budget": 5000}
        st, got = call(srv.base, "POST", "/v1/ns/team-a/queries", [q] * 6, token=ALICE)
        assert st == 200 and len(got) == 6
        sizes = [len(json.dumps(r)) for r in got]
        ok = [r for r in got if "error" not in r]
        refused = [r for r in got if "error" in r]
        assert ok and refused and got[0] in ok, got
        assert all(r["error"]["code"] == "answer_too_large" and "4,000" in
                   r["error"]["message"] for r in refused)
        assert sum(sizes) < 4000 + 6 * 400, sizes
        assert len({r["query_id"] for r in got}) == 6  # each query has its own answer in place
    finally:
        srv.stop()
