"""Metadata, filters and expiry in the pure core: the limits of metadata on both sides of
each bound, every filter operator on both sides of its comparison, missing keys and type
mismatches, and the filter and expiry applied before the candidate cut and packing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from hivemind_memory.api_stub.protocol.messages import QueryRequest, parse_request
from hivemind_memory.events.errors import EventError, QueryError
from hivemind_memory.events.schema import (
    MAX_METADATA_KEYS,
    MAX_METADATA_STR_BYTES,
    NoteCreated,
)
from hivemind_memory.projections.ranking.config import DEFAULT, RankingConfig
from hivemind_memory.projections.ranking.filters import (
    MAX_FILTER_CONDITIONS,
    MAX_IN_VALUES,
    matches,
    parse_filter,
)
from hivemind_memory.projections.ranking.index import build_index
from hivemind_memory.projections.ranking.snapshot import decode_index, encode_index
from hivemind_memory.projections.reduce import Projection
from hivemind_memory.projections.state import NoteState
from hivemind_memory.worker.engine import run_rank, to_result
from tests.support.factories import T0, created, ev, revised

NOW = T0 + timedelta(days=10)


# -- metadata limits --------------------------------------------------------------------------

def _note(**extra: Any) -> NoteCreated:
    got = ev(created("n1", **extra))
    assert isinstance(got, NoteCreated)
    return got


def test_metadata_within_every_limit_is_kept_as_given() -> None:
    meta: dict[str, Any] = {f"k{i}": i for i in range(MAX_METADATA_KEYS - 2)}
    meta["s"] = "x" * MAX_METADATA_STR_BYTES
    meta["a" + "b" * 63] = True  # 64 characters: the longest key
    assert len(meta) == MAX_METADATA_KEYS
    assert _note(metadata=meta).metadata == meta


@pytest.mark.parametrize(("meta", "names"), [
    ({f"k{i}": i for i in range(MAX_METADATA_KEYS + 1)}, "at most 32"),
    ({"s": "x" * (MAX_METADATA_STR_BYTES + 1)}, "$.metadata.s"),
    ({"é" * 513: 1}, "must match"),
    ({"a" + "b" * 64: 1}, "must match"),
    ({"$eq": 1}, "must match"),
    ({"1st": 1}, "must match"),
    ({"k": None}, "$.metadata[...]"),
    ({"k": [1, 2]}, "$.metadata[...]"),
    ({"k": {"x": 1}}, "$.metadata[...]"),
], ids=["33-keys", "1025-bytes", "non-ascii-key", "65-char-key", "operator-key",
        "digit-first", "null", "list", "object"])
def test_metadata_over_a_limit_is_refused_naming_the_field(meta: dict[str, Any],
                                                           names: str) -> None:
    with pytest.raises(EventError, match="metadata") as err:
        _note(metadata=meta)
    assert names in str(err.value)


def test_expires_at_needs_a_timezone_and_is_stored_in_utc() -> None:
    got = _note(expires_at="2026-05-01T14:00:00+02:00")
    assert got.expires_at == datetime(2026, 5, 1, 12, tzinfo=UTC)
    assert got.expires_at.tzinfo is UTC
    with pytest.raises(EventError, match="expires_at"):
        _note(expires_at="2026-05-01T14:00:00")


# -- filter operators ---------------------------------------------------------------------------

META = {"project": "apollo", "prio": 2, "score": 0.5, "done": False}


@pytest.mark.parametrize(("spec", "want"), [
    ({"project": "apollo"}, True),
    ({"project": "zeus"}, False),
    ({"project": {"$eq": "apollo"}}, True),
    ({"prio": 2.0}, True),            # numbers compare as numbers
    ({"prio": "2"}, False),           # a string is not a number
    ({"done": False}, True),
    ({"done": 0}, False),             # a boolean equals only a boolean
    ({"prio": True}, False),
    ({"project": {"$ne": "apollo"}}, False),
    ({"project": {"$ne": "zeus"}}, True),
    ({"missing": {"$ne": "x"}}, True),  # no key: not equal
    ({"missing": "x"}, False),
    ({"project": {"$in": ["zeus", "apollo"]}}, True),
    ({"project": {"$in": ["zeus", "hera"]}}, False),
    ({"prio": {"$gt": 1}}, True),
    ({"prio": {"$gt": 2}}, False),
    ({"prio": {"$gte": 2}}, True),
    ({"prio": {"$gte": 2.5}}, False),
    ({"prio": {"$lt": 3}}, True),
    ({"prio": {"$lt": 2}}, False),
    ({"prio": {"$lte": 2}}, True),
    ({"prio": {"$lte": 1.5}}, False),
    ({"score": {"$gt": 0.4, "$lt": 0.6}}, True),
    ({"score": {"$gt": 0.4, "$lt": 0.5}}, False),
    ({"project": {"$gt": "apollm"}}, True),   # strings by code point
    ({"project": {"$gt": "apollo"}}, False),
    ({"project": {"$gt": 1}}, False),         # type mismatch: no match
    ({"done": {"$lt": 1}}, False),            # a boolean is not a number
    ({"missing": {"$lt": 1}}, False),
    ({"project": "apollo", "prio": {"$gte": 3}}, False),  # every condition must hold
    ({}, True),
])
def test_each_operator_on_both_sides(spec: dict[str, Any], want: bool) -> None:
    assert matches(META, parse_filter(spec)) is want


def test_a_note_without_metadata_matches_only_ne() -> None:
    assert matches(None, parse_filter({"k": {"$ne": 1}}))
    assert not matches(None, parse_filter({"k": 1}))


@pytest.mark.parametrize(("spec", "names"), [
    ({"k": {"$regex": "x"}}, "unknown filter operator"),
    ({"k": None}, "$.filter.k"),
    ({"k": {"$in": "x"}}, "$in takes a list"),
    ({"k": {"$in": []}}, "$in takes a list"),
    ({"k": {"$in": list(range(MAX_IN_VALUES + 1))}}, "$in takes a list"),
    ({"k": {"$in": [1, [2]]}}, "$.filter.k.$in[1]"),
    ({"k": {}}, "must not be empty"),
    ({"$or": 1}, "must match"),
    ({f"k{i}": 1 for i in range(MAX_FILTER_CONDITIONS + 1)}, "at most 32"),
])
def test_a_bad_filter_is_refused_naming_what(spec: dict[str, Any], names: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_filter(spec)
    assert names in str(err.value)
    with pytest.raises(QueryError) as qerr:
        parse_request({"ns": "t", "text": "q", "budget": 10, "filter": spec})
    assert qerr.value.code == "invalid_request" and names in str(qerr.value)


def test_the_largest_filter_is_accepted() -> None:
    spec = {f"k{i}": 1 for i in range(MAX_FILTER_CONDITIONS - 1)}
    spec["last"] = {"$in": list(range(MAX_IN_VALUES))}
    assert len(parse_filter(spec)) == MAX_FILTER_CONDITIONS


# -- applied before the candidate cut and packing ----------------------------------------------

def _notes(*dicts: dict[str, Any]) -> dict[str, NoteState]:
    p = Projection()
    p.feed((f"{i}-0", ev(d), b"") for i, d in enumerate(dicts, start=1))
    return p.notes


def _ask(notes: dict[str, NoteState], now: datetime = NOW, cfg: RankingConfig = DEFAULT,
         **kw: Any) -> list[str]:
    idx = build_index("t", notes)
    req = QueryRequest(ns="t", text="deploy the rocket", budget=kw.pop("budget", 1000), **kw)
    return [n.note_id for n in run_rank(idx, req, cfg, now).notes]


def test_the_filter_is_applied_before_the_candidate_cut() -> None:
    notes = _notes(
        created("fits", text="deploy the rocket deploy the rocket now", metadata={"team": "b"}),
        created("top", text="deploy something else entirely, maybe a rocket",
                metadata={"team": "a"}))
    cal = msgspec.structs.replace(DEFAULT, max_candidates=1)  # budget 10: one candidate
    assert _ask(notes, cfg=cal, budget=100) == ["top", "fits"]
    # unfiltered, the one candidate kept is "top", which does not fit in 10 tokens
    assert _ask(notes, cfg=cal, budget=10) == []
    # filtered first, the one candidate kept is the matching note (after the cut: nothing)
    assert _ask(notes, cfg=cal, budget=10, filter={"team": "b"}) == ["fits"]
    bm25 = msgspec.structs.replace(DEFAULT, relevance="bm25")
    assert _ask(notes, cfg=bm25, filter={"team": "a"}) == ["top"]
    assert _ask(notes, cfg=bm25, filter={"team": {"$ne": "a"}}) == ["fits"]


def test_the_budget_is_spent_on_matching_notes_only() -> None:
    notes = _notes(
        created("big", text="deploy the rocket " * 10, metadata={"team": "b"}, tokens=45),
        created("small", text="deploy the rocket today", metadata={"team": "a"}, tokens=40))
    assert _ask(notes, budget=45) == ["big"]  # within a passage (48 tokens): whole
    assert _ask(notes, budget=45, filter={"team": "a"}) == ["small"]


def test_metadata_is_returned_with_each_note_and_revised_or_cleared() -> None:
    notes = _notes(created("n", text="deploy the rocket", metadata={"v": 1}))
    idx = build_index("t", notes)
    res = run_rank(idx, QueryRequest(ns="t", text="rocket", budget=100, explain=True),
                   DEFAULT, NOW)
    assert res.notes[0].metadata == {"v": 1}
    assert res.candidates[0].metadata == {"v": 1} and res.candidates[0].chosen is True
    body = msgspec.json.encode(to_result("t.x", QueryRequest(ns="t", text="r", budget=1),
                                         NOW, res))
    assert b'"metadata":{"v":1}' in body
    kept = _notes(created("n", text="deploy the rocket", metadata={"v": 1}),
                  revised("n", "r1", text="deploy the rocket again"))
    assert kept["n"].metadata == {"v": 1}  # absent on the revision: unchanged
    cleared = _notes(created("n", text="deploy the rocket", metadata={"v": 1}),
                     revised("n", "r1", metadata={}))
    assert cleared["n"].metadata is None
    bare = _notes(created("n", text="deploy the rocket"))
    res = run_rank(build_index("t", bare), QueryRequest(ns="t", text="rocket", budget=100),
                   DEFAULT, NOW)
    assert b"metadata" not in msgspec.json.encode(res.notes)  # omitted when none


def test_expiry_boundary_as_of_just_before_and_at_expires_at() -> None:
    until = T0 + timedelta(days=5)
    notes = _notes(created("gone", text="deploy the rocket", expires_at="2026-01-06T00:00:00Z"),
                   created("kept", text="deploy the rocket later"))
    us = timedelta(microseconds=1)
    assert set(_ask(notes, now=until - us)) == {"gone", "kept"}
    assert _ask(notes, now=until) == ["kept"]
    assert _ask(notes, now=until + us) == ["kept"]


def test_default_ttl_days_expires_notes_without_their_own_expiry() -> None:
    notes = _notes(created("old", text="deploy the rocket"),
                   created("own", text="deploy the rocket too",
                           expires_at="2027-01-01T00:00:00Z"))
    cfg = msgspec.structs.replace(DEFAULT, default_ttl_days=3.0)
    us = timedelta(microseconds=1)
    edge = T0 + timedelta(days=3)
    assert set(_ask(notes, now=edge - us, cfg=cfg)) == {"old", "own"}
    assert _ask(notes, now=edge, cfg=cfg) == ["own"]  # its own expires_at wins
    assert set(_ask(notes, now=edge)) == {"old", "own"}  # default: no ttl
    with pytest.raises(ValueError, match="default_ttl_days"):
        RankingConfig(default_ttl_days=-1.0)


def test_a_snapshot_keeps_metadata_and_expiry() -> None:
    notes = _notes(created("n", text="deploy the rocket", metadata={"team": "a"},
                           expires_at="2026-01-06T00:00:00Z"),
                   created("m", text="deploy the rocket too"))
    idx = build_index("t", notes)
    idx.changes_seen = idx.checkpoint
    back = decode_index(encode_index(idx), "t")
    assert back is not None
    assert back.cols.meta == idx.cols.meta and back.cols.expires == idx.cols.expires
    state = back.cols.note_state(back.cols.slot["n"])
    assert state.metadata == {"team": "a"}
    assert state.expires_at == datetime(2026, 1, 6, tzinfo=UTC)
