"""Admin over HTTP what the CLI does (issue 21, item 5): dead letters, status, a note's history,
audit reproduction, for a ``serve`` that holds its ``memory://PATH`` store; and the CLI, locked
out of that store, names these endpoints."""

from __future__ import annotations

import json
import subprocess
import time

import msgspec
import pytest

from hivemind_memory.projections.store.log import append
from hivemind_memory.worker.audit.reproduce import note_history, show_of
from hivemind_memory.worker.ops.status import dead_letters
from tests.support import HIVEMIND
from tests.support.factories import ev, used
from tests.support.frontdoor import ALICE, BOB, OPS, Live, call, created

AS_OF = "2026-06-01T00:00:00Z"




def _seed(live: Live) -> str:
    """Two notes, a dead letter (an event for a note the namespace never saw, appended to the
    log past the front door), one served query; returns its id once all is projected."""
    b = live.base
    assert call(b, "POST", "/v1/ns/team-a/events", [
        created("e1", "deploys@@alice", "deploys happen on tuesday"),
        created("e2", "secret@@alice", "alice private deploy key", scope="private")],
        token=ALICE)[0] == 200
    append(live.served.client.store, [ev(used("ghost", "u-ghost", ns="team-a"))])
    live.served.client.schedule(["team-a"])
    assert live.served.worker is not None
    live.served.worker.kick()
    st, res = call(b, "POST", "/v1/ns/team-a/query", {"text": "deploys", "budget": 100,
                                                      "as_of": AS_OF}, token=BOB)
    assert st == 200 and [n["note_id"] for n in res["notes"]] == ["deploys@@alice"]
    assert call(b, "GET", "/v1/ns/team-a/notes", token=OPS)[0] == 200  # waits: all projected
    return str(res["query_id"])


def test_dead_status_show_and_reproduce_need_admin(live: Live) -> None:
    b = live.base
    for method, path, body in (("GET", "/v1/ns/team-a/dead", None),
                               ("GET", "/v1/ns/team-a/status", None),
                               ("GET", "/v1/ns/team-a/notes/deploys@@alice", None),
                               ("POST", "/v1/ns/team-a/audit/reproduce", {"all": True})):
        assert call(b, method, path, body)[0] == 401
        st, err = call(b, method, path, body, token=ALICE)
        assert st == 403 and err["error"]["code"] == "forbidden", path
        assert call(b, method, path, body, token=OPS)[0] in (200, 404), path


def test_dead_letters_as_the_cli_lists_them(live: Live) -> None:
    _seed(live)
    st, got = call(live.base, "GET", "/v1/ns/team-a/dead", token=OPS)
    assert st == 200
    assert (got["ns"], got["total"], got["shown"], got["truncated"]) == ("team-a", 1, 1, False)
    [d] = got["dead"]
    assert "unknown_note" in d["reason"] and set(d) == {"id", "entry", "reason", "at_ms"}
    # the same function as `hivemind dead`
    assert got == json.loads(msgspec.json.encode(
        dead_letters(live.served.client.store, "team-a", 1000)))
    assert call(live.base, "GET", "/v1/ns/team-b/dead?limit=1", token=OPS)[1]["total"] == 0
    for bad in ("0", "x", "10001"):
        st, err = call(live.base, "GET", f"/v1/ns/team-a/dead?limit={bad}", token=OPS)
        assert st == 400 and "limit" in err["error"]["message"]


def test_status_of_one_namespace_and_the_live_workers(live: Live) -> None:
    qid = _seed(live)
    st, got = call(live.base, "GET", "/v1/ns/team-a/status", token=OPS)
    assert st == 200
    [ns] = got["namespaces"]
    assert (ns["ns"], ns["stream_length"], ns["lag_entries"], ns["dead_letters"],
            ns["queries_served"]) == ("team-a", 3, 0, 1, 1)
    assert ns["last_query"]["query_id"] == qid
    [w] = got["workers"]
    assert w["kind"] == "in-process" and w["queues"] == ["hivemind-query", "hivemind-project"]
    deadline = time.monotonic() + 10  # counted once the burst that ran the jobs has ended
    while call(live.base, "GET", "/v1/ns/team-a/status",
               token=OPS)[1]["workers"][0]["successful_jobs"] < 2:
        assert time.monotonic() < deadline
        time.sleep(0.05)  # waiting for the worker thread's bookkeeping
    st, got = call(live.base, "GET", "/v1/ns/never/status", token=OPS)
    assert st == 200 and got["namespaces"][0]["stream_length"] == 0


def test_show_a_note_its_events_and_where_it_was_served(live: Live) -> None:
    qid = _seed(live)
    st, got = call(live.base, "GET", "/v1/ns/team-a/notes/deploys@@alice", token=OPS)
    assert st == 200
    assert got["note"]["note_id"] == "deploys@@alice" and got["note"]["agent"] == "alice"
    assert [(e["type"], e["event_id"]) for e in got["events"]] == [("note.created", "e1")]
    assert [(s["query_id"], s["agent"], s["rank"]) for s in got["served"]] == [(qid, "bob", 1)]
    # the same functions as `hivemind show --json`
    assert got == json.loads(msgspec.json.encode(
        show_of(note_history(live.served.client.store, "team-a", "deploys@@alice"))))
    # the ghost has an event in the log but was never projected: shown, note null
    st, ghost = call(live.base, "GET", "/v1/ns/team-a/notes/ghost", token=OPS)
    assert st == 200 and ghost["note"] is None and len(ghost["events"]) == 1
    for nid in ("nope", "bad%20id"):
        st, err = call(live.base, "GET", f"/v1/ns/team-a/notes/{nid}", token=OPS)
        assert st == 404 and err["error"]["code"] == "unknown_note"


def test_reproduce_by_id_or_all(live: Live) -> None:
    qid = _seed(live)
    b = live.base
    st, got = call(b, "POST", "/v1/ns/team-a/audit/reproduce", {"all": True}, token=OPS)
    assert st == 200
    assert (got["ok"], got["identical"], got["different"], got["not_found"]) == (
        True, 1, 0, [])
    [r] = got["reproductions"]
    assert (r["query_id"], r["identical"], r["differences"]) == (qid, True, [])
    st, got = call(b, "POST", "/v1/ns/team-a/audit/reproduce",
                   {"query_ids": [qid, "team-a.missing"]}, token=OPS)
    assert st == 200 and not got["ok"] and got["not_found"] == ["team-a.missing"]
    assert got["identical"] == 1
    for body in ({}, {"all": True, "query_ids": [qid]}, {"query_ids": []}, {"all": False},
                 {"all": "yes"}, {"query_ids": [qid], "extra": 1}, [qid]):
        st, err = call(b, "POST", "/v1/ns/team-a/audit/reproduce", body, token=OPS)
        assert st == 422 and err["error"]["code"] == "invalid_request", body


def test_the_openapi_document_lists_the_admin_endpoints(live: Live) -> None:
    st, doc = call(live.base, "GET", "/openapi.json")
    assert st == 200
    paths = doc["paths"]
    assert "get" in paths["/v1/ns/{ns}/dead"] and "get" in paths["/v1/ns/{ns}/status"]
    assert "get" in paths["/v1/ns/{ns}/notes/{note_id}"]
    assert "post" in paths["/v1/ns/{ns}/audit/reproduce"]
    assert {"DeadLetters", "Status", "NoteShow", "ReproduceBody", "ReproduceSummary"} <= set(
        doc["components"]["schemas"])


@pytest.mark.parametrize(("argv", "endpoint"), [
    (["dead", "--ns", "team-a"], "GET /v1/ns/team-a/dead"),
    (["status"], "GET /v1/ns/{ns}/status"),
    (["show", "--ns", "team-a", "deploys"], "GET /v1/ns/team-a/notes/deploys"),
    (["audit", "reproduce", "--ns", "team-a", "--all"], "POST /v1/ns/team-a/audit/reproduce"),
])
def test_a_cli_locked_out_by_serve_names_the_endpoints(live: Live, argv: list[str],
                                                       endpoint: str) -> None:
    got = subprocess.run([*HIVEMIND, *argv, "--redis-url", live.store_url], capture_output=True,
                         text=True, timeout=60, check=False)
    assert got.returncode == 2, got.stderr
    [line] = got.stderr.splitlines()
    assert line.startswith("hivemind: embedded store ") and "in use by another process" in line
    command = " ".join(argv[:2] if argv[0] == "audit" else argv[:1])
    assert f"{endpoint} (what `hivemind {command}` does)" in line
    for e in ("/status", "/dead", "/notes/", "/audit/reproduce"):
        assert e in line
