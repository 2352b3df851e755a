"""Metadata and filters, expiry, conditional revision and the empty-namespace hint through the
doors users take: HTTP (``hivemind serve`` in process), the SDK over HTTP and the SDK on the
embedded store; a filtered answer reproduces (``hivemind audit reproduce``) and an erasure
drops the metadata."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hivemind_memory import AsyncMemory, Memory, VersionConflict
from hivemind_memory.events.errors import EventError, QueryError
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.readmodel import read_notes
from tests.support import HIVEMIND
from tests.support.frontdoor import ALICE, OPS, call, start_live

NS = "/v1/ns/team-a"


def _ids(body: dict[str, object]) -> list[str]:
    return sorted(n["note_id"] for n in body["notes"])  # type: ignore[attr-defined, index]


def test_metadata_filter_expiry_and_version_over_http(tmp_path: Path) -> None:
    url = f"memory://{tmp_path / 'store'}"
    live = start_live(url)
    # an admin token (it may choose any note id): the test is about metadata, expiry and
    # versions, written with chosen ids
    try:
        def remember(nid: str, text: str, **kw: object) -> dict[str, object]:
            st, body = call(live.base, "POST", f"{NS}/remember",
                            {"note_id": nid, "text": text, "duplicates": "ignore", **kw},
                            token=OPS)
            assert st == 200, body
            return body  # type: ignore[no-any-return]

        remember("apollo", "the launch window opens at dawn",
                 metadata={"project": "apollo", "prio": 2}, at="2026-05-01T09:00:00Z")
        remember("zeus", "the launch window closes at dusk",
                 metadata={"project": "zeus", "prio": 5}, at="2026-05-01T09:00:00Z")
        remember("plain", "the launch window is long", at="2026-05-01T09:00:00Z")
        remember("brief", "the launch window moved to noon", at="2026-05-01T09:00:00Z",
                 expires_at="2026-05-02T09:00:00Z")

        def ask(**kw: object) -> dict[str, object]:
            st, body = call(live.base, "POST", f"{NS}/query",
                            {"text": "launch window", "budget": 500, **kw}, token=OPS)
            assert st == 200, body
            return body  # type: ignore[no-any-return]

        got = ask(filter={"project": "apollo"})
        assert _ids(got) == ["apollo"]
        assert got["notes"][0]["metadata"] == {"project": "apollo", "prio": 2}  # type: ignore[index]
        assert _ids(ask(filter={"prio": {"$gt": 2}})) == ["zeus"]
        assert _ids(ask(filter={"project": {"$ne": "zeus"}})) == ["apollo", "plain"]
        assert _ids(ask(filter={"project": {"$in": ["zeus", "apollo"]}})) == ["apollo", "zeus"]
        # expiry: gone from live answers, still there as of before it
        assert _ids(ask()) == ["apollo", "plain", "zeus"]
        assert "brief" in _ids(ask(as_of="2026-05-02T08:59:59Z"))
        assert "brief" not in _ids(ask(as_of="2026-05-02T09:00:00Z"))
        # bad metadata and bad filters: 422 naming the field
        st, body = call(live.base, "POST", f"{NS}/remember",
                        {"text": "x", "metadata": {"$bad": 1}}, token=OPS)
        assert st == 422 and "metadata" in body["error"]["message"]
        st, body = call(live.base, "POST", f"{NS}/query",
                        {"text": "x", "budget": 5, "filter": {"k": {"$regex": "a"}}},
                        token=OPS)
        assert st == 422 and body["error"]["code"] == "invalid_request"
        assert "$regex" in body["error"]["message"]
        # listed with the notes
        st, rows = call(live.base, "POST", f"{NS}/read", {"note_ids": ["apollo", "brief"]},
                        token=OPS)
        assert st == 200
        assert rows[0]["metadata"] == {"project": "apollo", "prio": 2}
        assert rows[1]["expires_at"] == "2026-05-02T09:00:00Z"

        # conditional revision: the version it expects, or 409 and nothing written
        st, body = call(live.base, "POST", f"{NS}/revise",
                        {"note_id": "apollo", "text": "the launch window opens at six",
                         "expected_version": 1, "metadata": {"project": "apollo", "prio": 3}},
                        token=OPS)
        assert st == 200, body
        st, body = call(live.base, "POST", f"{NS}/revise",
                        {"note_id": "apollo", "text": "a stale edit", "expected_version": 1},
                        token=OPS)
        assert st == 409 and body["error"]["code"] == "version_conflict", body
        assert "version 2" in body["error"]["message"]
        st, body = call(live.base, "POST", f"{NS}/events",
                        [{"type": "note.revised", "note_id": "apollo", "text": "stale too",
                          "expected_version": 3}], token=OPS)
        assert st == 409 and body["error"]["code"] == "version_conflict"
        st, rows = call(live.base, "POST", f"{NS}/read", {"note_ids": ["apollo"]}, token=OPS)
        assert (rows[0]["version"], rows[0]["text"]) == (2, "the launch window opens at six")
        assert rows[0]["metadata"] == {"project": "apollo", "prio": 3}

        # a namespace without a single note says so
        st, body = call(live.base, "POST", "/v1/ns/team-typo/query",
                        {"text": "launch", "budget": 50}, token=OPS)
        assert st == 200 and body["notes"] == []
        assert "no notes" in body["hint"]
        assert "hint" not in ask()

    finally:
        live.stop()

    env = {**os.environ, "HIVEMIND_REDIS_URL": url}
    rep = subprocess.run([*HIVEMIND, "audit", "reproduce", "--ns", "team-a", "--all"],
                         capture_output=True, text=True, env=env, timeout=120, check=False)
    assert rep.returncode == 0, rep.stdout + rep.stderr  # filters included
    assert "8 identical" in rep.stdout + rep.stderr

    live = start_live(url)
    try:
        # erasure drops the metadata everywhere hivemind wrote it
        st, body = call(live.base, "DELETE", f"{NS}/notes/zeus", token=OPS)
        assert st == 200, body
        store = live.served.client.store
        assert read_notes(store, "team-a")["zeus"].metadata is None
        log = b"".join(v for _, f in store.xrange(keys.stream("team-a")) for v in f.values())
        assert b"\xa7project\xa4zeus" not in log  # msgpack of the erased metadata pair
        assert b"\xa7project\xa6apollo" in log  # the others' is there, in that form
    finally:
        live.stop()


def test_the_sdk_over_http_and_embedded_takes_metadata_filter_expiry_version(
        tmp_path: Path) -> None:
    live = start_live(f"memory://{tmp_path / 'store'}")
    try:
        with Memory(live.base, ns="team-a", token=ALICE) as mem:
            _sdk_flow(mem)
    finally:
        live.stop()
    with Memory(f"memory://{tmp_path / 'embedded'}", ns="team-a", agent="alice") as mem:
        _sdk_flow(mem)


def _sdk_flow(mem: Memory) -> None:
    a = mem.remember("rockets launch from pad a", metadata={"pad": "a", "crew": 3},
                     duplicates="ignore")
    mem.remember("rockets launch from pad b", metadata={"pad": "b", "crew": 5},
                 duplicates="ignore")
    mem.remember("rockets launch from pad c", expires_at="2000-01-01T00:00:00Z",
                 duplicates="ignore")
    got = mem.recall("rockets launch", 500, filter={"crew": {"$lte": 3}})
    assert got.note_ids == [a]
    assert got.notes[0].metadata == {"pad": "a", "crew": 3}
    assert sorted(n.metadata["pad"] for n in mem.recall("rockets launch", 500).notes) == [
        "a", "b"]  # the expired note is in no answer
    note = mem.get(a)
    assert note is not None and note.metadata == {"pad": "a", "crew": 3}
    mem.revise(a, "rockets launch from pad a2", expected_version=note.version)
    with pytest.raises(VersionConflict, match="version 2"):
        mem.revise(a, "a lost update", expected_version=note.version)
    again = mem.get(a)
    assert again is not None and again.text == "rockets launch from pad a2"
    with pytest.raises(EventError, match="metadata"):
        mem.remember("x", metadata={"k" * 65: 1})
    with pytest.raises(QueryError, match=r"\$in"):
        mem.recall("rockets", 100, filter={"pad": {"$in": "a"}})


def test_async_with_for_both_clients(tmp_path: Path) -> None:
    url = f"memory://{tmp_path / 'store'}"

    async def flow() -> tuple[list[str], list[str]]:
        async with AsyncMemory(url, ns="n", agent="a") as mem:
            nid = await mem.remember("async notes work", metadata={"k": 1},
                                     duplicates="ignore")
            got = await mem.recall("async notes", 100, filter={"k": 1})
            assert mem.sync._t._worker is not None  # still open inside the block
        assert mem.sync._t._worker is None  # closed by the block's end
        async with Memory(url, ns="n", agent="a") as sync_mem:
            seen = sync_mem.recall("async notes", 100).note_ids
        assert sync_mem._t._worker is None  # type: ignore[attr-defined]
        return [nid, *got.note_ids], seen

    mine, seen = asyncio.run(flow())
    assert mine[0] == mine[1] and seen == [mine[0]]


def test_an_embedded_session_prints_nothing_to_stdout(tmp_path: Path) -> None:
    script = (
        "from hivemind_memory import Memory\n"
        f"with Memory('memory://{tmp_path / 'store'}', ns='q', agent='a') as m:\n"
        "    m.remember('quiet please', duplicates='report')\n"
        "    m.recall('quiet', 100)\n"
        "    m.used(m.recall('quiet', 100).note_ids[0])\n"
        "print('ours')\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout == "ours\n"
    assert "queries_served" not in out.stderr  # info lines are below the default level
    asked = subprocess.run(
        [sys.executable, "-c", "import logging, sys\n"
         "logging.basicConfig(level=logging.INFO, stream=sys.stderr)\n" + script],
        capture_output=True, text=True, timeout=120, check=True)
    assert asked.stdout == "ours\n" and "queries_served" in asked.stderr
    # a program that sets only its own logger factory after importing the SDK (our processors
    # stay): every line goes to its logger, none raises
    printed = subprocess.run(
        [sys.executable, "-c", "import sys, structlog\n"
         "from hivemind_memory import Memory\n"
         "structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))\n"
         + script], capture_output=True, text=True, timeout=120)
    assert printed.returncode == 0, printed.stderr[-2000:]
    assert printed.stdout == "ours\n" and "queries_served" in printed.stderr


def test_the_mcp_tools_take_metadata_filter_expiry_and_expected_version(
        tmp_path: Path) -> None:
    import anyio
    from mcp import Client

    from hivemind_memory.api_stub.server.mcp import build_server, fixed_resolver

    def text(res: Any) -> str:
        return "".join(c.text for c in res.content if getattr(c, "type", "") == "text")

    async def main(mem: Memory) -> None:
        async with Client(build_server(fixed_resolver(mem))) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert "filter" in tools["recall"].input_schema["properties"]
            assert {"metadata", "expires_at"} <= set(
                tools["remember"].input_schema["properties"])
            assert "expected_version" in tools["revise"].input_schema["properties"]
            for nid, team in (("t-a", "a"), ("t-b", "b")):
                got = await client.call_tool("remember", {
                    "text": f"standup is at nine for team {team}", "note_id": nid,
                    "metadata": {"team": team}, "duplicates": "ignore"})
                assert not got.is_error, text(got)
            gone = await client.call_tool("remember", {
                "text": "standup moved for today", "note_id": "t-old",
                "expires_at": "2001-01-01T00:00:00Z", "duplicates": "ignore"})
            assert not gone.is_error, text(gone)
            out = await client.call_tool("recall", {"query": "standup", "budget": 300,
                                                    "filter": {"team": {"$eq": "b"}}})
            assert not out.is_error, text(out)
            notes = out.structured_content["notes"]  # type: ignore[index]
            assert [(n["note_id"], n["metadata"]) for n in notes] == [("t-b", {"team": "b"})]
            every = await client.call_tool("recall", {"query": "standup", "budget": 300})
            assert sorted(n["note_id"] for n in every.structured_content["notes"]) == [
                "t-a", "t-b"]  # type: ignore[index]
            ok = await client.call_tool("revise", {"note_id": "t-a", "text": "standup at ten",
                                                   "expected_version": 1})
            assert not ok.is_error, text(ok)
            stale = await client.call_tool("revise", {"note_id": "t-a", "text": "at eleven",
                                                      "expected_version": 1})
            assert stale.is_error and "version 2" in text(stale)
            assert "nothing was recorded" in text(stale)
            bad = await client.call_tool("recall", {"query": "standup",
                                                    "filter": {"team": {"$like": "a"}}})
            assert bad.is_error and "$like" in text(bad)

    with Memory(f"memory://{tmp_path / 'store'}", ns="team-a", agent="alice") as mem:
        anyio.run(main, mem)
