"""Event schema, codec and ingest: every field's rule, errors that name the line and field."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import fakeredis
import msgspec
import pytest

from hivemind_memory.events.codec import decode_event, encode_event, parse_json_event
from hivemind_memory.events.errors import EventError
from hivemind_memory.events.schema import (
    ID_PATTERN,
    MAX_TEXT_BYTES,
    NS_PATTERN,
    NoteCreated,
    event_type,
    token_estimate,
)
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.ingest import ingest
from hivemind_memory.projections.store.log import iter_all
from tests.support.factories import T0, created, forgotten, jsonl, used


def test_roundtrip_through_stream_encoding_keeps_every_field() -> None:
    e = parse_json_event(json.dumps(created("n1", text="héllo", tokens=7, scope="private",
                                            kind="scratch", embedding=[0.5, -1.0])))
    assert decode_event(encode_event(e)) == e
    assert isinstance(e, NoteCreated) and e.scope == "private" and e.kind == "scratch"
    assert event_type(e) == "note.created"


def test_at_is_stored_as_utc() -> None:
    d = created("n1")
    d["at"] = "2026-05-01T14:00:00+02:00"
    e = parse_json_event(json.dumps(d))
    assert e.at == datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
    assert e.at.utcoffset() is not None and e.at.utcoffset().total_seconds() == 0  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"type": "note.exploded"}, "$.type"),
        ({"ns": "Upper"}, "$.ns"),
        ({"ns": "-lead"}, "$.ns"),
        ({"event_id": "has space"}, "$.event_id"),
        ({"event_id": "x" * 129}, "$.event_id"),
        ({"note_id": ""}, "$.note_id"),
        ({"agent": 5}, "$.agent"),
        ({"at": "2026-05-01T12:00:00"}, "$.at"),
        ({"at": "yesterday"}, "$.at"),
        ({"text": ""}, "$.text"),
        ({"tokens": 0}, "$.tokens"),
        ({"tokens": 1_000_001}, "$.tokens"),
        ({"scope": "public"}, "$.scope"),
        ({"kind": "memo"}, "$.kind"),
        ({"embedding": []}, "$.embedding"),
        ({"embedding": [0.1] * 4097}, "$.embedding"),
        ({"embedding": ["a"]}, "$.embedding"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_invalid_field_is_named(patch: dict[str, Any], field: str) -> None:
    d = created("n1")
    d.update(patch)
    with pytest.raises(EventError) as ei:
        parse_json_event(json.dumps(d), lineno=12)
    msg = str(ei.value)
    assert msg.startswith("line 12: ")
    assert field in msg


class _StrictIds(msgspec.Struct):
    """What the event structs declared before the codec checked ids itself: msgspec's own
    pattern check, whose wording the codec's must keep."""

    event_id: Annotated[str, msgspec.Meta(pattern=ID_PATTERN)] = "e1"
    ns: Annotated[str, msgspec.Meta(pattern=NS_PATTERN)] = "t"
    note_id: Annotated[str, msgspec.Meta(pattern=ID_PATTERN)] = "n1"
    agent: Annotated[str, msgspec.Meta(pattern=ID_PATTERN)] = "a"


@pytest.mark.parametrize(("field", "bad"), [
    ("event_id", "has space"), ("event_id", "u9\n"), ("event_id", "x" * 129),
    ("event_id", "-lead"), ("ns", "Upper"), ("ns", "t\n"), ("ns", "a" * 65),
    ("note_id", ""), ("note_id", "é"), ("agent", "a b"), ("agent", "a\n")])
def test_id_errors_are_worded_as_msgspec_words_them(field: str, bad: str) -> None:
    with pytest.raises(msgspec.ValidationError) as strict:
        msgspec.convert({field: bad}, _StrictIds)
    d = used("n1", "e1")
    d[field] = bad
    with pytest.raises(EventError) as parsed:  # JSON in (ingest, the client, HTTP, MCP)
        parse_json_event(json.dumps(d), lineno=4)
    assert str(parsed.value) == f"line 4: invalid event: {strict.value}"
    blob = msgspec.msgpack.encode({**d, "at": T0})  # a rogue entry on the stream
    with pytest.raises(msgspec.ValidationError) as decoded:
        decode_event(blob)
    assert str(decoded.value) == str(strict.value)


def test_a_string_valid_as_an_id_is_still_checked_as_a_namespace() -> None:
    ok = parse_json_event(json.dumps(used("n1", "e1", agent="Upper")))
    assert ok.agent == "Upper"  # "Upper" is a good id (and remembered as one) ...
    d = used("n1", "e2")
    d["ns"] = "Upper"
    with pytest.raises(EventError, match=r"\$\.ns"):  # ... and never a namespace
        parse_json_event(json.dumps(d))
    assert parse_json_event(json.dumps(used("Upper", "e3"))).note_id == "Upper"


def test_missing_field_is_named() -> None:
    d = created("n1")
    del d["agent"]
    with pytest.raises(EventError, match="agent"):
        parse_json_event(json.dumps(d), lineno=3)


def test_text_limit_is_in_utf8_bytes() -> None:
    ok = "é" * (MAX_TEXT_BYTES // 2)  # 2 bytes each: exactly the limit
    parse_json_event(json.dumps(created("n1", text=ok)))
    with pytest.raises(EventError, match="bytes"):
        parse_json_event(json.dumps(created("n1", text=ok + "a")))


def test_non_finite_embedding_rejected() -> None:
    raw = json.dumps(created("n1")).rstrip("}") + ', "embedding": [1e999]}'
    with pytest.raises(EventError, match="embedding"):
        parse_json_event(raw)


def test_malformed_json_names_the_line() -> None:
    with pytest.raises(EventError, match=r"^line 4: malformed JSON"):
        parse_json_event("{not json", lineno=4)


@pytest.mark.parametrize(("text", "tokens"), [("a", 1), ("abcd", 1), ("abcde", 2),
                                              ("é" * 4, 2), ("x" * 4000, 1000)])
def test_token_estimate_is_ceil_of_utf8_bytes_over_4(text: str, tokens: int) -> None:
    assert token_estimate(text) == tokens


def _write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "events.jsonl"
    p.write_text(text)
    return str(p)


def _stream_len(r: Any, ns: str) -> int:
    return sum(1 for _ in iter_all(r, ns))


def test_ingest_appends_nothing_from_a_file_with_a_bad_line(tmp_path: Path) -> None:
    r = fakeredis.FakeRedis()
    good = [created("n1"), used("n1", "u1")]
    text = jsonl(good) + '{"type": "note.used"}\n' + jsonl([created("n2")])
    errors: list[str] = []
    rep = ingest(r, _write(tmp_path, text), on_error=errors.append)
    assert rep.appended == 0 and rep.rejected == 1
    assert _stream_len(r, "t") == 0
    assert len(errors) == 1 and errors[0].startswith("line 3: ")


def test_ingest_skip_invalid_appends_the_good_and_reports_every_bad(tmp_path: Path) -> None:
    r = fakeredis.FakeRedis()
    text = (jsonl([created("n1")]) + "garbage\n\n" + jsonl([used("n1", "u1")])
            + '{"type":"note.used","ns":"t"}\n' + jsonl([forgotten("n1", "f1", ns="other")]))
    errors: list[str] = []
    rep = ingest(r, _write(tmp_path, text), skip_invalid=True, on_error=errors.append)
    assert rep.appended == 3 and rep.rejected == 2
    assert [e.split(":")[0] for e in errors] == ["line 2", "line 5"]
    assert _stream_len(r, "t") == 2 and _stream_len(r, "other") == 1
    assert r.smembers(keys.NAMESPACES) == {b"t", b"other"}
    assert rep.namespaces == {"t", "other"}


@pytest.mark.parametrize("skip_invalid", [False, True])
def test_ingest_schedules_every_chunk_before_and_after_it_lands(tmp_path: Path,
                                                                skip_invalid: bool) -> None:
    r = fakeredis.FakeRedis()
    # chunk 1: namespace a only; chunk 2: a and b; chunk 3: b only (chunks of 1,000)
    rows = ([created(f"a{i}", eid=f"a{i}", ns="a") for i in range(1500)]
            + [created(f"b{i}", eid=f"b{i}", ns="b") for i in range(1200)])
    calls: list[tuple[int, int, set[str]]] = []

    def on_chunk(nss: set[str]) -> None:
        calls.append((_stream_len(r, "a"), _stream_len(r, "b"), nss))

    rep = ingest(r, _write(tmp_path, jsonl(rows)), skip_invalid=skip_invalid,
                 on_error=pytest.fail, on_chunk=on_chunk)
    assert rep.appended == 2700
    assert calls == [(0, 0, {"a"}),              # before chunk 1
                     (1000, 0, {"a", "b"}),      # after chunk 1 and before chunk 2
                     (1500, 500, {"a", "b"}),    # after chunk 2 and before chunk 3
                     (1500, 1200, {"b"})]        # after chunk 3


def test_ingest_chunks_preserve_file_order(tmp_path: Path) -> None:
    r = fakeredis.FakeRedis()
    n = 2500  # spans three append chunks
    rows = [created(f"n{i}", eid=f"e{i}") for i in range(n)]
    landed: list[tuple[int, set[str]]] = []  # (entries in the log, namespaces) at each call

    def on_chunk(nss: set[str]) -> None:
        landed.append((_stream_len(r, "t"), nss))

    rep = ingest(r, _write(tmp_path, jsonl(rows)), on_error=pytest.fail, on_chunk=on_chunk)
    # each chunk is scheduled before its first entry lands and after its last one has (one
    # call between two chunks stands for both)
    assert rep.appended == n and landed == [(0, {"t"}), (1000, {"t"}), (2000, {"t"}),
                                            (2500, {"t"})]
    ids = [decode_event(f[b"d"]).event_id for _, f in iter_all(r, "t", chunk=700)]
    assert ids == [f"e{i}" for i in range(n)]


def test_at_is_bounded_by_not_after_only_into_the_future() -> None:
    """``parse_json_event(..., not_after=T)``: ``at`` == T is taken, a microsecond later is
    refused naming the field; any past time is taken; without ``not_after`` no bound."""
    from datetime import timedelta

    bound = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)

    def line(at: datetime) -> bytes:
        return msgspec.json.encode({"type": "note.created", "event_id": "e", "ns": "t",
                                    "note_id": "n", "agent": "a", "text": "x",
                                    "at": at.isoformat()})

    assert parse_json_event(line(bound), 1, not_after=bound).at == bound
    assert parse_json_event(line(datetime(1970, 1, 2, tzinfo=UTC)), 1, not_after=bound)
    with pytest.raises(EventError, match=r"line 3: invalid event: at .* in the future.*`\$\.at`"):
        parse_json_event(line(bound + timedelta(microseconds=1)), 3, not_after=bound)
    assert parse_json_event(line(bound + timedelta(days=3000)), 1).at > bound
