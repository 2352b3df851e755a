"""The HTTP API over a real socket: the README's and the guide's curl sessions as written (and
the README's SDK snippet), token isolation, caps, validation, and a ``serve`` on
``memory://PATH`` that keeps its data across a restart."""

from __future__ import annotations

import http.client
import json
import re
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from hivemind_memory.api_stub.protocol.messages import error_json
from hivemind_memory.api_stub.server.schemas import MAX_EVENTS, MAX_QUERIES
from tests.support import IN_CI, RedisProc
from tests.support.docs import GUIDE, README, fenced, section, session
from tests.support.frontdoor import (
    ALICE,
    BOB,
    OPS,
    OTHER,
    Live,
    call,
    created,
    start_live,
    start_serve,
)

AS_OF = "2026-06-01T00:00:00Z"




# -- the docs' sessions, as written ---------------------------------------------------------
def _matches(got: str, expected: str) -> bool:
    """The output as the docs print it, where ``…`` stands for what differs from run to run
    (ids the server makes, the clock): anything but a quote or a comma."""
    pattern = "".join(r'[^",]*' if part == "…" else re.escape(part)
                      for part in re.split("(…)", expected))
    return re.fullmatch(pattern, got) is not None


def test_the_session_wildcard_matches_only_what_it_stands_for() -> None:
    assert _matches('{"event_id":"ev-0190ab"}', '{"event_id":"ev-…"}')
    assert not _matches('{"event_id":"x-0190ab"}', '{"event_id":"ev-…"}')
    assert not _matches('{"a":"1","b":"2"}', '{"a":"…"}')  # never spans fields
    assert _matches('{"n":1}', '{"n":1}') and not _matches('{"n":12}', '{"n":1}')


def _run_session(text: str, tmp_path: Path, after: Callable[[str], None] | None = None) -> None:
    """Run the session of ``text`` (its tokens file, then each ``$`` command against a
    ``hivemind serve`` on a free port) and compare every output with the text's; ``after``
    gets the server's base URL while it still runs."""
    if shutil.which("curl") is None:
        if IN_CI:
            pytest.fail("curl not found (CI=true: the docs' sessions must run)")
        pytest.skip("curl not found")
    tokens, steps = session(text)
    (tmp_path / "tokens.toml").write_text(tokens)
    serve_cmd, _ = steps[0]
    assert serve_cmd.startswith("hivemind serve ") and serve_cmd.endswith(" &")
    srv = start_serve(shlex.split(serve_cmd[len("hivemind serve "):-2]), tmp_path)
    port = srv.port
    try:
        script = ""
        for cmd, expected in steps[1:]:
            script += cmd.replace("localhost:8080", f"127.0.0.1:{port}") + "\n"
            if not expected:  # an assignment: carried into the next commands
                continue
            got = subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                                 timeout=60, check=False)
            script = "\n".join(line for line in script.splitlines()
                               if re.match(r"^[A-Z]+=", line)) + "\n"
            assert got.returncode == 0, got.stderr
            assert _matches(got.stdout.strip(), expected.strip()), (cmd, got.stdout)
        if after is not None:
            after(f"127.0.0.1:{port}")
    finally:
        srv.stop()
    # uvicorn shuts down gracefully, then re-raises SIGTERM to exit by it
    assert srv.proc.returncode in (0, -15), srv.stderr.read_text()


def test_readme_quick_start(tmp_path: Path) -> None:
    """The README's quick start: its curl session as written, then its SDK snippet against the
    same server (what it remembers comes back in the recalled context)."""
    text = section(README, "Quick start")
    snippet = fenced(text, "python")[0]  # the SDK (the rest: tests/adapters/test_doc_snippets.py)
    remembered = re.search(r'mem\.remember\("([^"]+)"', snippet)
    assert remembered

    def sdk(host: str) -> None:
        got = subprocess.run([sys.executable, "-c", snippet.replace("localhost:8080", host)],
                             capture_output=True, text=True, timeout=60, cwd=tmp_path,
                             check=False)
        assert got.returncode == 0, got.stderr
        assert remembered.group(1) in got.stdout

    _run_session(text, tmp_path, after=sdk)


def test_guide_curl_session(tmp_path: Path) -> None:
    _run_session(section(GUIDE, "A curl session"), tmp_path)


# -- tokens bind identity ---------------------------------------------------------------------
def test_tokens_isolate_namespaces_agents_and_private_notes(live: Live) -> None:
    b = live.base
    ok = call(b, "POST", "/v1/ns/team-a/events", [
        created("e1", "shared-deploy@@alice", "deploys happen on tuesday"),
        created("e2", "secret@@alice", "alice private deploy password hint", scope="private"),
    ], token=ALICE)
    assert ok == (200, {"appended": 2, "event_ids": ["e1", "e2"], "already": 0})

    # wrong namespace: neither write nor read
    st, body = call(b, "POST", "/v1/ns/team-b/events", [created("x", "x", "x")], token=ALICE)
    assert st == 403 and body["error"]["code"] == "forbidden"
    st, body = call(b, "POST", "/v1/ns/team-a/query", {"text": "deploy", "budget": 100},
                    token=OTHER)
    assert st == 403
    assert call(b, "GET", "/v1/ns/team-a/notes", token=ALICE)[0] == 403  # admin only
    # no token, unknown token
    assert call(b, "POST", "/v1/ns/team-a/query", {"text": "d", "budget": 1})[0] == 401
    assert call(b, "POST", "/v1/ns/team-a/query", {"text": "d", "budget": 1},
                token="nope-nope-nope-nope")[0] == 401

    # a body claiming another agent is refused, for events and for queries
    st, body = call(b, "POST", "/v1/ns/team-a/events",
                    [created("e3", "n3", "bob pretends", agent="alice")], token=BOB)
    assert st == 403 and body["error"]["code"] == "forbidden_agent"
    st, body = call(b, "POST", "/v1/ns/team-a/query",
                    {"text": "password", "budget": 100, "agent": "alice"}, token=BOB)
    assert st == 403 and body["error"]["code"] == "forbidden_agent"
    st, body = call(b, "POST", "/v1/ns/team-a/queries",
                    [{"text": "deploy", "budget": 100},
                     {"text": "password", "budget": 100, "agent": "alice"}], token=BOB)
    assert st == 403

    # bob never gets alice's private note: not in notes, not among explained candidates
    for q in ({"text": "alice private deploy password hint", "budget": 1000, "explain": True},
              {"text": "deploy", "budget": 1000, "as_of": AS_OF, "explain": True}):
        st, res = call(b, "POST", "/v1/ns/team-a/query", q, token=BOB)
        assert st == 200, res
        seen = {n["note_id"] for n in res["notes"]} | {
            c["note_id"] for c in res.get("candidates") or []}
        assert "secret@@alice" not in seen
        assert res["agent"] == "bob"
    st, res = call(b, "POST", "/v1/ns/team-a/query", {"text": "password", "budget": 1000},
                   token=ALICE)
    assert st == 200 and [n["note_id"] for n in res["notes"]] == ["secret@@alice"]
    # ... nor alice's answer by its id
    qid = res["query_id"]
    assert call(b, "GET", f"/v1/ns/team-a/results/{qid}", token=ALICE)[1] == res
    st, body = call(b, "GET", f"/v1/ns/team-a/results/{qid}", token=BOB)
    assert st == 404 and "secret@@alice" not in json.dumps(body)
    assert call(b, "GET", f"/v1/ns/team-a/results/{qid}", token=OPS)[0] == 200  # admin

    # the events carry the token's agent
    st, rows = call(b, "GET", "/v1/ns/team-a/notes", token=OPS)
    assert st == 200 and {r["note_id"]: r["agent"] for r in rows} == {
        "shared-deploy@@alice": "alice", "secret@@alice": "alice"}


def test_bodies_over_the_cap_get_413(live: Live) -> None:
    host, port = live.base.removeprefix("http://").split(":")
    big = json.dumps([created("e", "n", "x" * (65 * 1024))]).encode()
    # with a Content-Length
    st, body = call(live.base, "POST", "/v1/ns/team-a/events", raw=big, token=ALICE)
    assert st == 413 and body["error"]["code"] == "too_large"
    # chunked, no Content-Length: the server counts while it reads
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.putrequest("POST", "/v1/ns/team-a/events")
    conn.putheader("Authorization", f"Bearer {ALICE}")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    for i in range(0, len(big), 8192):
        part = big[i:i + 8192]
        conn.send(f"{len(part):x}\r\n".encode() + part + b"\r\n")
    conn.send(b"0\r\n\r\n")
    resp = conn.getresponse()
    assert resp.status == 413 and json.loads(resp.read())["error"]["code"] == "too_large"
    conn.close()
    # too many events or queries in one request
    st, body = call(live.base, "POST", "/v1/ns/team-a/events", [{}] * (MAX_EVENTS + 1),
                    token=ALICE)
    assert st == 413 and f"at most {MAX_EVENTS}" in body["error"]["message"]
    st, body = call(live.base, "POST", "/v1/ns/team-a/queries",
                    [{"text": "x", "budget": 1}] * (MAX_QUERIES + 1), token=ALICE)
    assert st == 413 and f"at most {MAX_QUERIES}" in body["error"]["message"]
    assert call(live.base, "GET", "/v1/ns/team-a/notes", token=OPS) == (200, [])


def test_invalid_events_name_index_and_field_and_append_nothing(live: Live) -> None:
    b = live.base
    st, body = call(b, "POST", "/v1/ns/team-a/events", [
        created("e1", "n1@@alice", "fine"),
        created("e2", "n2@@alice", "bad tokens", tokens=0),
    ], token=ALICE)
    assert st == 422
    assert body["error"]["message"].startswith("events[1]: ")
    assert "$.tokens" in body["error"]["message"]
    st, body = call(b, "POST", "/v1/ns/team-a/events",
                    [created("e1", "n1@@alice", "other ns", ns="team-b")], token=ALICE)
    assert st == 422 and "events[0].ns" in body["error"]["message"]
    st, body = call(b, "POST", "/v1/ns/team-a/events", raw=b"[{", token=ALICE)
    assert st == 400 and body["error"]["code"] == "malformed_json"
    st, body = call(b, "POST", "/v1/ns/team-a/query", {"text": " ", "budget": 5}, token=ALICE)
    assert st == 422 and "text" in body["error"]["message"]
    st, body = call(b, "POST", "/v1/ns/team-a/query", {"text": "x", "budget": 0}, token=ALICE)
    assert st == 422 and "$.budget" in body["error"]["message"]
    assert call(b, "GET", "/v1/ns/team-a/notes", token=OPS) == (200, [])
    st, body = call(b, "GET", "/v1/ns/team-a/results/team-a.0000?wait=0.1", token=ALICE)
    assert st == 404 and body["error"]["code"] == "not_found"
    assert call(b, "GET", "/v1/ns/team-a/results/team-b.00?wait=0", token=ALICE)[0] == 404
    assert call(b, "GET", "/v1/ns/team-a/results/team-a.00?wait=99", token=ALICE)[0] == 400
    assert call(b, "DELETE", "/v1/ns/team-a/events", token=ALICE)[0] == 405


def test_batch_queries_in_order_and_read_your_writes(live: Live) -> None:
    b = live.base
    assert call(b, "POST", "/v1/ns/team-a/events", [
        created("e1", "redis@@bob", "redis persistence with aof"),
        created("e2", "deploy@@bob", "deploy on tuesdays"),
    ], token=BOB)[0] == 200
    st, res = call(b, "POST", "/v1/ns/team-a/queries", [
        {"text": "redis aof", "budget": 100}, {"text": "tuesdays", "budget": 100},
        # nearest off: in a namespace this small a query that finds nothing by its words
        # answers with its nearest notes by meaning (calibration.nearest)
        {"text": "nothing matches this", "budget": 100, "as_of": AS_OF,
         "config": {"calibration": {"nearest": 0}}}], token=BOB)
    assert st == 200
    assert [[n["note_id"] for n in r["notes"]] for r in res] == [
        ["redis@@bob"], ["deploy@@bob"], []]
    st, audit = call(b, "GET", "/v1/ns/team-a/audit?limit=2", token=OPS)
    assert st == 200 and len(audit) == 2
    assert {a["event"]["query_id"] for a in audit} <= {r["query_id"] for r in res}
    st, h = call(b, "GET", "/readyz")
    assert st == 200 and h["ok"]


@pytest.mark.parametrize("answered_first", [0, 1])
def test_a_store_failure_mid_stream_keeps_the_array_whole(
        live: Live, monkeypatch: pytest.MonkeyPatch, answered_first: int) -> None:
    """The status line of a streamed batch is sent before its answers are read: a store that
    fails after it (here after ``answered_first`` runs) leaves the answers sent as they were
    and an error object in place of each query not answered yet, in a valid JSON array."""
    import redis

    b = live.base
    assert call(b, "POST", "/v1/ns/team-a/events", [
        created(f"e{i}", f"n{i}@@bob", f"redis stream number {i}") for i in range(5)
    ], token=BOB)[0] == 200
    client = live.served.client
    real = client.batch_result_runs

    def failing(ids: Any, timeout: float = 300.0) -> Any:
        got = real(ids, timeout)
        for _ in range(answered_first):
            yield [next(got)[0]]  # one answer a run
        raise redis.ConnectionError("Connection reset by peer")

    monkeypatch.setattr(client, "batch_result_runs", failing)
    reqs = [{"text": f"redis {i}", "budget": 50} for i in range(4)]
    st, got = call(b, "POST", "/v1/ns/team-a/queries", reqs, token=BOB)
    assert st == 200 and len(got) == 4
    assert [("error" in r) for r in got] == [False] * answered_first + [True] * (4 - answered_first)
    assert all(r["budget"] == 50 for r in got[:answered_first])
    for r in got[answered_first:]:
        assert r["error"]["code"] == "store_unavailable"
        assert "ConnectionError" in r["error"]["message"]
    assert len({r["query_id"] for r in got}) == 4


def test_batch_answers_are_the_workers_bytes_streamed_in_input_order(live: Live) -> None:
    # the array is the result keys' bytes joined as they are (never decoded and re-encoded),
    # an invalid item's error object in its place, sent as a chunked (streamed) response
    b = live.base
    assert call(b, "POST", "/v1/ns/team-a/events", [
        created(f"e{i}", f"n{i}@@bob", f"redis stream number {i}") for i in range(30)
    ], token=BOB)[0] == 200
    reqs: list[dict[str, Any]] = [{"text": f"redis {i}", "budget": 7 + i} for i in range(25)]
    reqs[3] = {"text": "", "budget": 10}
    req = urllib.request.Request(b + "/v1/ns/team-a/queries", data=json.dumps(reqs).encode(),
                                 method="POST", headers={"Authorization": f"Bearer {BOB}"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status == 200 and resp.headers.get("Transfer-Encoding") == "chunked"
        raw = resp.read()
    got = json.loads(raw)
    assert [r["budget"] for i, r in enumerate(got) if i != 3] == \
        [q["budget"] for i, q in enumerate(reqs) if i != 3]
    assert got[3]["error"]["code"] == "invalid_request" and "queries[3]" in \
        got[3]["error"]["message"]
    err = got[3]["error"]  # at a key of the pseudo-namespace of invalid requests
    stored = [error_json(got[3]["query_id"], err["code"], err["message"])]
    for r in got[:3] + got[4:]:
        one = urllib.request.Request(b + f"/v1/ns/team-a/results/{r['query_id']}",
                                     headers={"Authorization": f"Bearer {BOB}"})
        with urllib.request.urlopen(one, timeout=60) as resp:
            stored.append(resp.read())
    stored = stored[1:4] + stored[:1] + stored[4:]  # back in input order
    assert raw == b"[" + b",".join(stored) + b"]"


def test_serve_without_tokens_refuses_a_public_address(tmp_path: Path) -> None:
    from tests.support import HIVEMIND

    got = subprocess.run([*HIVEMIND, "serve", "--host", "0.0.0.0", "--redis-url", "memory://"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert got.returncode == 2 and "without --tokens" in got.stderr


# -- memory://PATH across a restart -----------------------------------------------------------
def test_serve_on_memory_path_keeps_events_and_audit_across_restart(tmp_path: Path) -> None:
    (tmp_path / "tokens.toml").write_text(
        f'[[token]]\nsecret = "{OPS}"\nns = ["*"]\nagent = "ops"\n'
        'rights = ["write", "query", "admin"]\n')
    args = ["--redis-url", "memory://data", "--tokens", "tokens.toml"]
    srv = start_serve(args, tmp_path)
    try:
        events = [created(f"e{i}", f"n{i}", f"note {i} about redis and aof and deploys " * (i + 1),
                          **({"scope": "private"} if i % 3 == 0 else {})) for i in range(12)]
        events.append({"type": "note.used", "event_id": "u1", "note_id": "n2", "at": AS_OF})
        events.append({"type": "note.forgotten", "event_id": "f1", "note_id": "n5", "at": AS_OF})
        assert call(srv.base, "POST", "/v1/ns/t1/events", events, token=OPS)[0] == 200
        assert call(srv.base, "POST", "/v1/ns/t2/events", events[:3], token=OPS)[0] == 200
        q = {"text": "redis aof deploys", "budget": 120, "as_of": AS_OF, "explain": True}
        st, first = call(srv.base, "POST", "/v1/ns/t1/query", q, token=OPS)
        assert st == 200 and first["notes"]
        raw_first = _raw(srv.base, "/v1/ns/t1/query", q)
        # an as-of query folds the log itself; a live one waits for the projection (read
        # your writes), after which the notes view is complete
        assert call(srv.base, "POST", "/v1/ns/t1/query", {"text": "redis", "budget": 9},
                    token=OPS)[0] == 200
        notes1 = call(srv.base, "GET", "/v1/ns/t1/notes", token=OPS)[1]
        assert len(notes1) == 12
        audit1 = call(srv.base, "GET", "/v1/ns/t1/audit?limit=1000", token=OPS)[1]
        assert audit1 and audit1[0]["event"]["query_id"] == first["query_id"]
    finally:
        srv.stop()
    assert (tmp_path / "data" / "streams.log").stat().st_size > 0

    srv = start_serve(args, tmp_path)
    try:
        # the same as-of query gives the same bytes (it waits for t1 to be rebuilt)
        assert _raw(srv.base, "/v1/ns/t1/query", q) == raw_first
        # ready once the worker has rebuilt every namespace from the replayed log
        deadline = time.monotonic() + 60
        while call(srv.base, "GET", "/readyz")[0] != 200:
            assert time.monotonic() < deadline, call(srv.base, "GET", "/readyz")
            time.sleep(0.05)  # waiting for another process's worker thread
        notes2 = call(srv.base, "GET", "/v1/ns/t1/notes", token=OPS)[1]
        assert notes2 == notes1, (notes1, notes2)
        assert len(call(srv.base, "GET", "/v1/ns/t2/notes", token=OPS)[1]) == 3
        audit2 = call(srv.base, "GET", "/v1/ns/t1/audit?limit=1000", token=OPS)[1]
        # every entry still there with the same id, then the one of the answer just given
        assert audit2[:len(audit1)] == audit1
        assert len(audit2) == len(audit1) + 1
    finally:
        srv.stop()


def _raw(base: str, path: str, body: Any) -> bytes:
    import urllib.request

    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST")
    req.add_header("Authorization", f"Bearer {OPS}")
    with urllib.request.urlopen(req, timeout=60) as resp:
        data: bytes = resp.read()
        return data


# -- on Redis: no worker, no store -------------------------------------------------------------
@pytest.mark.redis_server
def test_on_redis_without_worker_or_store_503(
        redis_factory: Callable[..., RedisProc]) -> None:
    rp = redis_factory(appendonly=False)
    srv = start_live(rp.url, query_timeout_s=1.0)
    try:
        st, h = call(srv.base, "GET", "/readyz")
        assert st == 503 and "no worker" in h["detail"]
        assert call(srv.base, "POST", "/v1/ns/team-a/events", [created("e1", "n1@@alice", "text")],
                    token=ALICE) == (200, {"appended": 1, "event_ids": ["e1"], "already": 0})
        st, body = call(srv.base, "POST", "/v1/ns/team-a/query", {"text": "text", "budget": 9},
                        token=ALICE)
        assert st == 503 and body["error"]["code"] == "shard_unavailable"  # at once, no 504
        rp.stop(sig_kill=True)
        with capture_logs() as logs:
            st, body = call(srv.base, "POST", "/v1/ns/team-a/events",
                            [created("e2", "n2@@alice", "text")], token=ALICE)
        assert st == 503 and body["error"]["code"] == "store_unavailable"
        assert [e for e in logs if e["event"] == "store_error"]
        st, h = call(srv.base, "GET", "/readyz")
        assert st == 503 and "store unreachable" in h["detail"]
    finally:
        srv.stop()


def test_open_mode_takes_the_agent_from_the_body(tmp_path: Path) -> None:
    srv = start_live(f"memory://{tmp_path / 'open'}", tokens=None)
    try:
        st, body = call(srv.base, "POST", "/v1/ns/n/events", [created("e1", "n1", "x")])
        assert st == 422 and "agent" in body["error"]["message"]
        assert call(srv.base, "POST", "/v1/ns/n/events", [
            created("e1", "mine", "private thing", agent="al", scope="private")])[0] == 200
        st, res = call(srv.base, "POST", "/v1/ns/n/query",
                       {"text": "private thing", "budget": 50, "agent": "al"})
        assert st == 200 and [n["note_id"] for n in res["notes"]] == ["mine"]
        st, res = call(srv.base, "POST", "/v1/ns/n/query", {"text": "private thing",
                                                            "budget": 50})
        assert st == 200 and res["notes"] == [] and res["agent"] == ""
    finally:
        srv.stop()


def test_recall_renders_a_context_within_the_budget_that_reproduces(live: Live) -> None:
    """``POST .../recall`` (and the SDK's ``recall`` over it): each note under
    ``[note_id | date]``, headers counted, so the context's own token estimate fits the
    budget; the served query reproduces exactly (the audit records that it was rendered)."""
    from hivemind_memory import Memory

    b = live.base
    for i, words in enumerate(["deploys happen on tuesdays after lunch",
                               "deploys are frozen during the incident review week",
                               "the staging deploy key rotates every monday " * 3]):
        assert call(b, "POST", "/v1/ns/team-a/remember", {"text": words, "note_id": f"d{i}@@alice"},
                    token=ALICE)[0] == 200
    st, got = call(b, "POST", "/v1/ns/team-a/recall", {"query": "when are deploys",
                                                        "budget": 40}, token=ALICE)
    assert st == 200, got
    assert got["notes"] and got["used_tokens"] <= got["budget"] == 40
    assert -(-len(got["context"].encode()) // 4) <= 40
    for n in got["notes"]:
        assert f"[{n['note_id']} | {n['created_at'][:10]}]\n" in got["context"]
        assert n["cost"] > n["tokens"]  # the header is part of the cost
    mem = Memory(b, ns="team-a", token=ALICE)
    again = mem.recall("when are deploys", budget=40)
    assert again.context == got["context"] and again.note_ids == [n["note_id"]
                                                                 for n in got["notes"]]
    st, rep = call(b, "POST", "/v1/ns/team-a/audit/reproduce", {"all": True}, token=OPS)
    assert st == 200 and rep["ok"] is True, rep
    st, bad = call(b, "POST", "/v1/ns/team-a/recall", {"query": "x", "top_k": 3}, token=ALICE)
    assert st == 422 and "top_k" in bad["error"]["message"]


def test_a_query_within_an_id_prefix_ranks_only_those_notes_and_reproduces(live: Live) -> None:
    """``id_prefix`` makes only the notes under it candidates; the audit records it, so the
    served query reproduces exactly; a prefix outside the id charset is refused."""
    b = live.base
    for nid in ("a.x:1@@alice", "a.x:2@@alice", "a.xy:1@@alice", "b:1@@alice"):
        assert call(b, "POST", "/v1/ns/team-a/remember",
                    {"text": f"release notes {nid}", "note_id": nid, "duplicates": "ignore"},
                    token=ALICE)[0] == 200
    st, got = call(b, "POST", "/v1/ns/team-a/query",
                   {"text": "release notes", "budget": 500, "id_prefix": "a.x:"}, token=ALICE)
    assert st == 200 and sorted(n["note_id"] for n in got["notes"]) == [
        "a.x:1@@alice", "a.x:2@@alice"]
    st, every = call(b, "POST", "/v1/ns/team-a/query", {"text": "release notes", "budget": 500},
                     token=ALICE)
    assert st == 200 and len(every["notes"]) == 4
    st, rep = call(b, "POST", "/v1/ns/team-a/audit/reproduce", {"all": True}, token=OPS)
    assert st == 200 and rep["ok"] is True and rep["identical"] == 2, rep
    st, bad = call(b, "POST", "/v1/ns/team-a/query",
                   {"text": "x", "budget": 5, "id_prefix": "no spaces"}, token=ALICE)
    assert st == 422 and "id_prefix" in bad["error"]["message"]
