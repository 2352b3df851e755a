"""What a packed note says besides its text, through every door a recalled note reaches
(issue 35): ``stands_for`` (the near-identical notes it stands for), ``updates`` (the older
versions of the fact it won over) and ``passage`` (its place in a long note), over HTTP
``/recall``, the SDK over HTTP, MCP, and the audit explanation the explorer shows; the same
marks at every door, and none on a note that has none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import msgspec

from hivemind_memory import Memory
from tests.support.frontdoor import ALICE, OPS, call, created, start_live
from tests.unit.projections.ranking.test_passages import ANSWER, QUESTION, runbook
from tests.unit.projections.ranking.test_updates import GYM_NEW, GYM_OLD, GYM_Q

NS = "/v1/ns/team-a"
RANKING = ("passage_tokens = 128\n\n[updates]\nmargin = 2.0\nsame_subject_cosine = 0.6\n"
           "older_weight = 0.5\nquery_words_share = 0.0\n")
"""Passages and updated facts on (both off by default)."""
TWIN = "Redis persistence uses AOF with fsync every second on the projector"


def _marks(n: Any) -> tuple[list[str], list[str], Any]:
    """A recalled note's (stands_for, updates, passage as a dict or None)."""
    if isinstance(n, dict):
        return n["stands_for"], n["updates"], _place(n["passage"])
    p = n.passage
    return list(n.stands_for), list(n.updates), None if p is None else _place(
        p if isinstance(p, dict) else msgspec.to_builtins(p))


def _place(p: dict[str, Any] | None) -> dict[str, Any] | None:
    """A passage's place as the result's JSON has it: ``rank`` only after the note's best
    passage (a struct's default and MCP's null say the same)."""
    return None if p is None else {k: v for k, v in p.items() if k != "rank" or v}


def test_stands_for_updates_and_passage_at_every_door(tmp_path: Path) -> None:
    cfg = tmp_path / "ranking.toml"
    cfg.write_text(RANKING)
    live = start_live(f"memory://{tmp_path / 'store'}", env={"HIVEMIND_CONFIG": str(cfg)})
    try:
        st, body = call(live.base, "POST", f"{NS}/events", [
            created("e1", "twin-a@@alice", TWIN),
            created("e2", "twin-b@@alice", TWIN + "."),
            created("e3", "gym-old@@alice", GYM_OLD, at="2026-01-01T09:00:00Z"),
            created("e4", "gym-new@@alice", GYM_NEW, at="2026-03-15T09:00:00Z"),
            created("e5", "runbook@@alice", runbook()),
        ], token=ALICE)
        assert st in (200, 202), body
        asks = {"twin": ("redis persistence aof", 500), "gym": (GYM_Q, 500),
                "runbook": (QUESTION, 500)}
        http: dict[str, Any] = {}
        for k, (q, budget) in asks.items():
            st, got = call(live.base, "POST", f"{NS}/recall", {"query": q, "budget": budget},
                           token=ALICE)
            assert st == 200, got
            http[k] = got
        by = {k: {n["note_id"]: n for n in v["notes"]} for k, v in http.items()}
        # the twins packed once, the one naming the other
        twins = [n for n in by["twin"] if n.startswith("twin-")]
        assert len(twins) == 1
        other = "twin-b@@alice" if twins[0] == "twin-a@@alice" else "twin-a@@alice"
        assert _marks(by["twin"][twins[0]]) == ([other], [], None)
        # the newer gym price names the older it won over
        assert by["gym"]["gym-new@@alice"]["updates"] == ["gym-old@@alice"]
        assert by["gym"]["gym-new@@alice"]["stands_for"] == []
        # the runbook as a passage, with its place
        [part] = [n for n in http["runbook"]["notes"] if n["note_id"] == "runbook@@alice"]
        place = part["passage"]
        assert set(place) == {"index", "count", "start", "end"} and place["count"] == 36
        assert ANSWER in http["runbook"]["context"]
        # a note with no marks: empty lists and no passage
        plain = [n for v in http.values() for n in v["notes"]
                 if n["note_id"] in ("gym-old@@alice", "twin-a@@alice", "twin-b@@alice")
                 and not n["stands_for"] and not n["updates"]]
        assert plain and all(n["passage"] is None for n in plain)

        # the SDK over HTTP and MCP show the same marks
        from mcp import Client

        from hivemind_memory.api_stub.server.mcp import build_server, fixed_resolver

        mem = Memory(live.base, ns="team-a", token=ALICE)
        for k, (q, budget) in asks.items():
            sdk = mem.recall(q, budget)
            assert [(n.note_id, _marks(n)) for n in sdk.notes] == [
                (n["note_id"], _marks(n)) for n in http[k]["notes"]]

        async def main() -> None:
            async with Client(build_server(fixed_resolver(mem))) as client:
                for k, (q, budget) in asks.items():
                    out = await client.call_tool("recall", {"query": q, "budget": budget})
                    assert not out.is_error
                    notes = out.structured_content["notes"]  # type: ignore[index]
                    assert [(n["note_id"], _marks(n)) for n in notes] == [
                        (n["note_id"], _marks(n)) for n in http[k]["notes"]]

        anyio.run(main)

        # the explanation the explorer draws lists the same marks for each shown item
        for k in asks:
            st, e = call(live.base, "GET", f"{NS}/audit/{http[k]['query_id']}/explain",
                         token=OPS)
            assert st == 200, e
            shown = [n for n in e["derived"]["notes"] if n["outcome"] == "shown"]
            assert [(n["note_id"], _marks(n)) for n in shown] == [
                (n["note_id"], _marks(n)) for n in http[k]["notes"]]
    finally:
        live.stop()


def test_a_fact_restated_in_other_words_names_the_older_at_every_door(tmp_path: Path) -> None:
    """The default config over HTTP: a newer note that restates only the rarest words of an
    older fact ("species ... local park", not "different birds seen") is its version, packed
    with ``updates`` naming it, in ``/recall`` and in the explanation the explorer draws."""
    from tests.unit.projections.ranking.test_updates_by_query_words import (
        BIRD_FILLER,
        BIRDS_NEW,
        BIRDS_OLD,
        BIRDS_Q,
        FILLER,
    )

    live = start_live(f"memory://{tmp_path / 'store'}")
    try:
        events = [created(f"f{i}", f"{n.note_id}@@alice", n.text)
                  for i, n in enumerate([*FILLER, *BIRD_FILLER])]
        events += [created("e-old", "birds-old@@alice", BIRDS_OLD, at="2026-09-01T09:00:00Z"),
                   created("e-new", "birds-new@@alice", BIRDS_NEW, at="2026-10-20T09:00:00Z")]
        st, body = call(live.base, "POST", f"{NS}/events", events, token=ALICE)
        assert st in (200, 202), body
        st, got = call(live.base, "POST", f"{NS}/recall", {"query": BIRDS_Q, "budget": 200},
                       token=ALICE)
        assert st == 200, got
        by = {n["note_id"]: n for n in got["notes"]}
        assert by["birds-new@@alice"]["updates"] == ["birds-old@@alice"]
        assert by["birds-old@@alice"]["updates"] == []
        assert all(not n["updates"] for k, n in by.items() if k != "birds-new@@alice")
        st, e = call(live.base, "GET", f"{NS}/audit/{got['query_id']}/explain", token=OPS)
        assert st == 200, e
        shown = {n["note_id"]: n for n in e["derived"]["notes"] if n["outcome"] == "shown"}
        assert shown["birds-new@@alice"]["updates"] == ["birds-old@@alice"]
    finally:
        live.stop()
