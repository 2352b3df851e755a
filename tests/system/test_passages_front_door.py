"""Long notes as passages through the doors users take (issue 35): a 4,581-token runbook
with the answer in its middle is served at budget 500 over HTTP (result and rendered
context), the SDK (embedded store) and MCP, with the note's id, date and the passage's place;
``used`` of the shown id counts for the note; the answer reproduces byte for byte
(``hivemind audit reproduce``), and a query whose per-query config turns passages off gets
no runbook at all."""

from __future__ import annotations

import math
import os
import subprocess
from pathlib import Path
from typing import Any

import msgspec

from hivemind_memory import Memory
from hivemind_memory.projections.ranking.config import DEFAULT
from tests.support import HIVEMIND
from tests.support.frontdoor import ALICE, call, start_live
from tests.unit.projections.ranking.test_passages import ANSWER, QUESTION, runbook

COUNT = math.ceil(4581 / DEFAULT.passage_tokens)
"""The runbook's passages at the default size (96 of 48 tokens)."""

NS = "/v1/ns/team-a"
AT = "2026-05-01T09:00:00Z"


def _remember(mem_or_base: Any, text: str) -> None:
    st, body = call(mem_or_base, "POST", f"{NS}/remember",
                    {"note_id": "runbook@@alice", "text": text, "at": AT, "duplicates": "ignore"},
                    token=ALICE)
    assert st == 200, body


def test_the_runbook_passage_over_http_with_its_place_and_it_reproduces(
        tmp_path: Path) -> None:
    text = runbook()
    url = f"memory://{tmp_path / 'store'}"
    live = start_live(url)
    try:
        _remember(live.base, text)
        st, body = call(live.base, "POST", f"{NS}/remember",
                        {"note_id": "coffee@@alice", "text": "The coffee machine is descaled on "
                         "Mondays.", "at": AT, "duplicates": "ignore"}, token=ALICE)
        assert st == 200, body
        st, got = call(live.base, "POST", f"{NS}/query",
                       {"text": QUESTION, "budget": 500, "context": True}, token=ALICE)
        assert st == 200, got
        assert [n["note_id"] for n in got["notes"]] == ["runbook@@alice"]
        n = got["notes"][0]
        place = n["passage"]
        assert set(place) == {"index", "count", "start", "end"} and place["count"] == COUNT == 96
        assert n["text"] == text[place["start"]:place["end"]] and ANSWER in n["text"]
        assert n["created_at"].startswith("2026-05-01T09:00:00")
        assert got["used"] <= 500
        assert got["context"].startswith(
            f"[runbook@@alice | 2026-05-01 | passage {place['index'] + 1}/{COUNT}]\n")
        # the default config serves passages; with them off the runbook does not fit
        st, off = call(live.base, "POST", f"{NS}/query",
                       {"text": QUESTION, "budget": 500, "config": {"passage_tokens": 0}},
                       token=ALICE)
        assert st == 200, off
        assert off["notes"] == [] and off["used"] == 0
        # used of the shown id counts for the note
        st, body = call(live.base, "POST", f"{NS}/events",
                        [{"type": "note.used", "note_id": "runbook@@alice"}], token=ALICE)
        assert st in (200, 202), body
    finally:
        live.stop()
    env = {**os.environ, "HIVEMIND_REDIS_URL": url}
    rep = subprocess.run([*HIVEMIND, "audit", "reproduce", "--ns", "team-a", "--all"],
                         capture_output=True, text=True, env=env, timeout=120, check=False)
    assert rep.returncode == 0, rep.stdout + rep.stderr
    assert "2 identical, 0 different" in rep.stdout + rep.stderr


def test_the_runbook_passage_through_the_sdk_and_mcp(tmp_path: Path,
                                                     monkeypatch: Any) -> None:
    import anyio
    from mcp import Client

    from hivemind_memory.api_stub.server.mcp import build_server, fixed_resolver

    text = runbook()
    monkeypatch.delenv("HIVEMIND_CONFIG", raising=False)  # the default config: passages on
    with Memory(f"memory://{tmp_path / 'store'}", ns="team-a", agent="alice") as mem:
        mem.remember(text, note_id="runbook", duplicates="ignore")
        got = mem.recall(QUESTION, 500)
        assert got.note_ids == ["runbook"] and ANSWER in got.context
        p = got.notes[0].passage
        assert p is not None and got.notes[0].text == text[p.start:p.end]
        assert f"| passage {p.index + 1}/{COUNT}]" in got.context
        assert mem.used(*got.note_ids) == 1
        note = mem.get("runbook")
        assert note is not None and note.uses == 1 and note.text == text

        async def main() -> None:
            async with Client(build_server(fixed_resolver(mem))) as client:
                out = await client.call_tool("recall", {"query": QUESTION, "budget": 500})
                assert not out.is_error
                notes = out.structured_content["notes"]  # type: ignore[index]
                assert [x["note_id"] for x in notes] == ["runbook"]
                assert notes[0]["passage"] == msgspec.structs.asdict(p)
                assert ANSWER in out.structured_content["context"]  # type: ignore[index]

        anyio.run(main)


def test_a_long_notes_second_passage_gives_way_over_http_and_reproduces(
        tmp_path: Path) -> None:
    """``passage_repeat`` through HTTP: at budget 110 the default packs the lead note, the
    long note's best passage and another note's evidence, a per-query config with the rule
    off packs the lead and the long note's two best passages; the explained candidates name
    each passage's rank after the best, and both answers reproduce byte for byte."""
    from tests.unit.projections.ranking.test_passage_repeat import LEAD, LONG, OTHER
    from tests.unit.projections.ranking.test_passage_repeat import QUESTION as ASKED

    url = f"memory://{tmp_path / 'store'}"
    live = start_live(url)
    try:
        for nid, text, at in (("long@@alice", LONG, "2026-05-29T09:00:00Z"),
                              ("other@@alice", OTHER, "2026-04-21T09:00:00Z"),
                              ("lead@@alice", LEAD, "2026-05-30T09:00:00Z")):
            st, body = call(live.base, "POST", f"{NS}/remember",
                            {"note_id": nid, "text": text, "at": at, "duplicates": "ignore"},
                            token=ALICE)
            assert st == 200, body

        def packed(config: dict[str, Any]) -> tuple[list[tuple[str, int]], Any]:
            st, got = call(live.base, "POST", f"{NS}/query",
                           {"text": ASKED, "budget": 110, "explain": True,
                            "as_of": "2026-05-31T00:00:00Z", "config": config}, token=ALICE)
            assert st == 200, got
            return sorted((n["note_id"], n["passage"]["index"] if n.get("passage") else -1)
                          for n in got["notes"]), got

        on, got = packed({})
        assert on == [("lead@@alice", -1), ("long@@alice", 0), ("other@@alice", -1)]
        ranks = sorted((c["passage"]["index"], c["passage"].get("rank", 0))
                       for c in got["candidates"] if c.get("passage"))
        assert ranks == [(0, 0), (1, 1), (2, 2)]
        off, got = packed({"passage_repeat": 1.0})
        assert off == [("lead@@alice", -1), ("long@@alice", 0), ("long@@alice", 1)]
        assert all("rank" not in c["passage"] for c in got["candidates"] if c.get("passage"))
    finally:
        live.stop()
    env = {**os.environ, "HIVEMIND_REDIS_URL": url}
    rep = subprocess.run([*HIVEMIND, "audit", "reproduce", "--ns", "team-a", "--all"],
                         capture_output=True, text=True, env=env, timeout=120, check=False)
    assert rep.returncode == 0, rep.stdout + rep.stderr
    assert "2 identical, 0 different" in rep.stdout + rep.stderr
