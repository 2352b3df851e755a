"""A question about something the memory was never told, through the doors users take
(issue 35): with ``unknown_word_factor = 0`` the answer is an empty context that says so
(``nothing_relevant``) and names the words (``unknown_words``) over HTTP (``/query`` and
``/recall``), the SDK and MCP (the worker's TOML); a question whose words the notes hold
is answered as before, and with the rule off (the default) no word is listed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hivemind_memory import Memory
from tests.support.frontdoor import ALICE, call, start_live

NS = "/v1/ns/team-a"
AT = "2026-05-01T09:00:00Z"
NOTES = {"tarts@@alice": "I baked egg tarts for the office party on Friday",
         "trip@@alice": "We drove to the coast for a long weekend"}
ABSENT = "what did I bake for my uncle's birthday party"
PRESENT = "what did I bake for the office party"
OFF = {"unknown_word_factor": 1.0}


def test_over_http_the_answer_says_nothing_relevant_and_names_the_words(
        tmp_path: Path) -> None:
    (tmp_path / "ranking.toml").write_text("unknown_word_factor = 0.0\n")
    live = start_live(f"memory://{tmp_path / 'store'}",
                      env={"HIVEMIND_CONFIG": str(tmp_path / "ranking.toml")})
    try:
        for nid, text in NOTES.items():
            st, body = call(live.base, "POST", f"{NS}/remember",
                            {"note_id": nid, "text": text, "at": AT, "duplicates": "ignore"},
                            token=ALICE)
            assert st == 200, body
        st, got = call(live.base, "POST", f"{NS}/query",
                       {"text": ABSENT, "budget": 500}, token=ALICE)
        assert st == 200, got
        assert got["notes"] == [] and got["nothing_relevant"] is True
        assert got["unknown_words"] == ["uncl", "birthday"]
        st, rec = call(live.base, "POST", f"{NS}/recall",
                       {"query": ABSENT, "budget": 500}, token=ALICE)
        assert st == 200, rec
        assert rec["context"] == "" and rec["nothing_relevant"] is True
        assert rec["unknown_words"] == ["uncl", "birthday"]
        st, rec = call(live.base, "POST", f"{NS}/recall",
                       {"query": PRESENT, "budget": 500}, token=ALICE)
        assert st == 200, rec
        assert "tarts@@alice" in rec["context"] and rec["nothing_relevant"] is False
        assert rec["unknown_words"] is None
        st, off = call(live.base, "POST", f"{NS}/query",
                       {"text": ABSENT, "budget": 500, "config": OFF}, token=ALICE)
        assert st == 200, off
        assert "unknown_words" not in off and off["notes"]  # the rule off
    finally:
        live.stop()


def test_through_the_sdk_and_mcp(tmp_path: Path, monkeypatch: Any) -> None:
    import anyio
    from mcp import Client

    from hivemind_memory.api_stub.server.mcp import build_server, fixed_resolver

    (tmp_path / "ranking.toml").write_text("unknown_word_factor = 0.0\n")
    monkeypatch.setenv("HIVEMIND_CONFIG", str(tmp_path / "ranking.toml"))
    with Memory(f"memory://{tmp_path / 'store'}", ns="team-a", agent="alice") as mem:
        for nid, text in NOTES.items():
            mem.remember(text, note_id=nid.split("@@")[0], duplicates="ignore")
        got = mem.recall(ABSENT, 500)
        assert got.notes == [] and got.nothing_relevant
        assert got.unknown_words == ["uncl", "birthday"]
        found = mem.recall(PRESENT, 500)
        assert "tarts" in found.note_ids and not found.nothing_relevant
        assert found.unknown_words == []

        async def main() -> None:
            async with Client(build_server(fixed_resolver(mem))) as client:
                out = await client.call_tool("recall", {"query": ABSENT, "budget": 500})
                assert not out.is_error
                sc = out.structured_content
                assert sc is not None and sc["notes"] == [] and sc["nothing_relevant"] is True
                assert sc["unknown_words"] == ["uncl", "birthday"]
                out = await client.call_tool("recall", {"query": PRESENT, "budget": 500})
                sc = out.structured_content
                assert sc is not None and sc["nothing_relevant"] is False
                assert sc["unknown_words"] is None

        anyio.run(main)
