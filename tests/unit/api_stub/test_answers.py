"""One shape per concept on the wire (``protocol.answers``): every door's recalled note,
duplicate and remembered answer is the one struct, or a part of it derived or checked here."""

from __future__ import annotations

import msgspec
import pytest

from hivemind_memory.api_stub import sdk
from hivemind_memory.api_stub.client import CheckedAppend, RememberOutcome
from hivemind_memory.api_stub.protocol import answers
from hivemind_memory.api_stub.protocol.answers import RECALLED_HTTP, RECALLED_MCP, projection
from hivemind_memory.api_stub.server import mcp, schemas
from hivemind_memory.events.schema import NoteCreated
from hivemind_memory.projections.ranking.rank_result import Passage


def _types(struct: type[msgspec.Struct]) -> dict[str, object]:
    return {f.name: f.type for f in msgspec.structs.fields(struct)}


def test_the_sdk_returns_the_one_structs() -> None:
    assert sdk.RecalledNote is answers.RecalledNote
    assert sdk.Duplicate is answers.Duplicate


def test_the_http_recalled_note_is_derived_from_the_one_struct() -> None:
    one = _types(answers.RecalledNote)
    http = _types(schemas.RecalledNote)
    assert list(http) == [*RECALLED_HTTP, "cost"]
    assert {f: http[f] for f in RECALLED_HTTP} == {f: one[f] for f in RECALLED_HTTP}
    assert "text" not in http  # /recall answers the rendered context, not each text


def test_the_mcp_recalled_note_is_derived_from_the_one_struct() -> None:
    one = _types(answers.RecalledNote)
    fields = mcp.RecalledNote.model_fields
    assert tuple(fields) == RECALLED_MCP
    for name in RECALLED_MCP:
        if name not in ("metadata", "passage"):  # MCP's: null when empty, scalar values
            assert fields[name].annotation == one[name], name
    assert fields["metadata"].default is None
    # MCP's passage is a pydantic model of the same fields
    assert tuple(mcp.Passage.model_fields) == Passage.__struct_fields__
    assert fields["passage"].default is None
    assert fields["passage"].annotation == mcp.Passage | None
    assert fields["metadata"].annotation == dict[str, str | int | float | bool] | None


def test_an_mcp_model_names_what_the_struct_lacks() -> None:
    with pytest.raises(TypeError, match="RecalledNote has no field cost"):
        mcp._model("X", answers.RecalledNote, ["note_id", "cost"], {})


def test_a_projection_names_what_the_shape_lacks() -> None:
    with pytest.raises(TypeError, match="no field cost"):
        projection("X", answers.RecalledNote, ["note_id", "cost"])


def _outcome(dups: list[tuple[str, float]] | None, twin: str | None = None) -> RememberOutcome:
    return RememberOutcome(CheckedAppend(0 if twin else 1, 0), dups, ["old"], twin,
                           None if dups is not None else "no reader")


def test_the_remembered_answer_is_built_once_for_every_door() -> None:
    ev = NoteCreated(event_id="e1", ns="t", agent="a", at="2026-01-01T00:00:00Z", note_id="n2",
                     text="x")
    got = _outcome([("n1", 0.75)]).answer(ev)
    assert (got.note_id, got.event_id, got.duplicates_checked) == ("n2", "e1", True)
    assert got.duplicates == [answers.Duplicate("n1", 0.75)] and got.superseded == ["old"]
    hidden = _outcome([("n1", 0.75)]).answer(ev, show_duplicates=False)
    assert hidden.duplicates is None and hidden.duplicates_checked
    twin = _outcome([("n1", 1.0)], twin="n1").answer(ev)
    assert (twin.note_id, twin.duplicate_of) == ("n1", "n1")
    unchecked = _outcome(None).answer(ev)
    assert not unchecked.duplicates_checked and unchecked.duplicates_unchecked == "no reader"
    wrapped = sdk.Remembered.of(got)
    assert wrapped == "n2" and wrapped.duplicates == got.duplicates and wrapped.event_id == "e1"
    again = sdk.Remembered.from_body(msgspec.to_builtins(got))
    assert again == "n2" and again.duplicates == got.duplicates
