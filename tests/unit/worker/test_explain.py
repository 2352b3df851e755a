"""``hivemind audit explain`` on the embedded store: every reason from a namespace built so
that one note falls to each (shown, packed out, over budget, below ``min_relevance``, another
agent's private note, forgotten), the recorded ``why`` against the re-run, an entry written
before ``why`` existed, a note asked for by id, the CLI's text and JSON, and the size the
``why`` adds to an entry."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import msgspec
import pytest

from hivemind_memory.api_stub.protocol.messages import QueryServed, encode
from hivemind_memory.projections.ranking.config import DEFAULT
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.audit_trail import audit_event, iter_audit
from hivemind_memory.worker.audit.explain import explain, find_served
from tests.support.factories import T0, created, forgotten, iso
from tests.unit.worker.test_audit import World, _no_log_config  # noqa: F401 (fixture)

WHY_BYTES_PER_ROW = 200
"""Most bytes one recorded left-out row adds (``test_why.ROW_MAX_BYTES``)."""


def _world(tmp_path: Path) -> tuple[World, str]:
    """The query ranks by lexical relevance (``relevance = "bm25"``): the figures that put
    each note on its side of ``min_relevance`` and of the budget are BM25's."""
    w = World(tmp_path)
    w.client.append([
        created("fit", at=T0 - timedelta(days=1), text="deploy canary rollback", tokens=30),
        created("rival", at=T0 - timedelta(days=1), text="deploy canary rollback steps",
                tokens=40),
        created("huge", at=T0, text="deploy canary rollback", tokens=500),
        created("faint", at=T0, text="deploy " + "filler words here " * 30, tokens=20),
        created("theirs", agent="bob", scope="private", at=T0, text="deploy canary rollback",
                tokens=10),
        created("gone", at=T0 - timedelta(days=3), text="deploy canary rollback old",
                tokens=10),
        forgotten("gone", "f1", agent="a", at=T0),
        created("later", at=T0 + timedelta(days=5), text="deploy canary rollback new"),
        created("other", at=T0, text="billing invoices"),
    ])
    [qid] = w.serve([{"ns": "t", "text": "deploy canary rollback", "budget": 60,
                      "agent": "alice", "as_of": iso(T0 + timedelta(days=1)),
                      "config": {"min_relevance": 0.2, "relevance": "bm25"}}])
    return w, qid


def test_every_matched_note_gets_its_reason(tmp_path: Path) -> None:
    w, qid = _world(tmp_path)
    e = explain(w.r, "t", DEFAULT, qid)
    d = e.derived
    assert d is not None and d.identical and d.recorded_why == "matches"
    got = {n.note_id: n.outcome for n in d.notes}
    assert got == {"fit": "shown", "rival": "packed_out", "huge": "over_budget",
                   "faint": "below_min_relevance", "theirs": "private", "gone": "forgotten"}
    by = {n.note_id: n for n in d.notes}
    assert by["fit"].position == 1 and by["rival"].position == 0
    assert "it would drop fit" in by["rival"].detail
    assert "private to bob" in by["theirs"].detail and by["theirs"].author == "bob"
    assert "below min_relevance 0.2" in by["faint"].detail
    assert e.min_relevance == 0.2
    # recorded at serve time: the ranking's own reasons, with the figures the re-run gives
    assert e.recorded is not None
    rec = {r.note_id: r for r in e.recorded.left_out}
    assert {k: r.reason for k, r in rec.items()} == {
        "rival": "packed_out", "huge": "over_budget", "faint": "below_min_relevance"}
    for k, r in rec.items():
        assert (r.relevance, r.recency, r.score, r.cost) == (
            by[k].relevance, by[k].recency, by[k].score, by[k].cost)
    assert [s.cost for s in e.recorded.shown] == [30]
    # the seed's rule on the same candidates: the freshest note is first by "5 % a day" and
    # does not fit, so the top-down fill stops before taking anything
    assert d.seed.notes == [] and d.seed.stopped_at == "huge" and d.seed.value == 0


def test_a_note_asked_for_by_id(tmp_path: Path) -> None:
    w, qid = _world(tmp_path)
    d = explain(w.r, "t", DEFAULT, qid, note_id="theirs").derived
    assert d is not None and d.note is not None and d.note.outcome == "private"
    d = explain(w.r, "t", DEFAULT, qid, note_id="later").derived
    assert d is not None and d.note is None and "created later" in d.note_absent
    d = explain(w.r, "t", DEFAULT, qid, note_id="other").derived
    assert d is not None and "relevance 0" in d.note_absent


def test_an_entry_written_before_why_is_re_derived(tmp_path: Path) -> None:
    w, qid = _world(tmp_path)
    [entry] = list(iter_audit(w.r, "t"))
    old = msgspec.structs.replace(msgspec.json.decode(audit_event(entry), type=QueryServed),
                                  why=None)
    raw = encode(old)
    assert b'"why"' not in msgspec.json.encode(msgspec.to_builtins(old)).replace(
        b'"why":null', b"")
    w.r.delete(keys.audit("t"))
    w.r.xadd(keys.audit("t"), {b"d": raw})
    e = explain(w.r, "t", DEFAULT, qid)
    assert e.recorded is None and e.derived is not None
    assert e.derived.recorded_why == "absent" and e.derived.identical
    assert {n.note_id for n in e.derived.notes if n.outcome == "packed_out"} == {"rival"}
    # and audit reproduce still says identical
    x = find_served(w.r, "t", qid)
    assert x is not None and x.event.why is None


def test_the_cli_prints_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    w, qid = _world(tmp_path)
    code, out, _ = w.cli(capsys, "audit", "explain", "--ns", "t", qid, "--note", "gone")
    assert code == 0
    assert "reproduces: identical; recorded why: matches" in out
    assert "packed_out: fits alone (40 of 60 tokens)" in out
    assert out.strip().splitlines()[-1].startswith("note gone: forgotten:")
    code, out, _ = w.cli(capsys, "audit", "explain", "--ns", "t", qid, "--recorded")
    assert code == 0 and "not re-run" in out and "rival" in out and "packed_out 1" in out
    code, out, _ = w.cli(capsys, "audit", "explain", "--ns", "t", qid, "--json")
    assert json.loads(out)["derived"]["candidates"] == 3
    code, _, err = w.cli(capsys, "audit", "explain", "--ns", "t", "t.0000")
    assert code == 1 and "no served query" in err


def test_why_adds_a_bounded_size_to_an_entry(tmp_path: Path) -> None:
    w, _ = _world(tmp_path)
    [entry] = list(iter_audit(w.r, "t"))
    raw = audit_event(entry)
    ev = msgspec.json.decode(raw, type=QueryServed)
    assert ev.why is not None
    why = len(msgspec.json.encode(ev.why))
    bound = 80 + len(ev.why.left_out) * WHY_BYTES_PER_ROW + len(ev.chosen) * 40
    assert why <= bound


def test_notes_outside_the_id_prefix_are_not_left_out(tmp_path: Path) -> None:
    w, _ = _world(tmp_path)
    [qid] = w.serve([{"ns": "t", "text": "deploy canary rollback", "budget": 60,
                      "agent": "alice", "as_of": iso(T0 + timedelta(days=1)),
                      "id_prefix": "r"}])
    e = explain(w.r, "t", DEFAULT, qid, note_id="fit")
    d = e.derived
    assert d is not None and d.identical
    assert {n.note_id: n.outcome for n in d.notes} == {"rival": "shown"}
    assert e.recorded is not None and e.recorded.left_out == []
    assert "outside the query's id_prefix 'r'" in d.note_absent


def test_a_calibrated_answer_is_explained_with_the_workers_embedder(tmp_path: Path) -> None:
    w = World(tmp_path)
    w.client.append([
        created("fit", at=T0 - timedelta(days=1), text="deploy canary rollback", tokens=30),
        created("car", at=T0 - timedelta(days=2), text="fixing my car at the garage", tokens=9),
        created("theirs", agent="bob", scope="private", at=T0, text="deploy canary rollback"),
        created("other", at=T0 - timedelta(days=9), text="billing invoices", tokens=5)])
    [qid] = w.serve([{"ns": "t", "text": "deploy canary rollback automobile repair",
                      "budget": 35, "agent": "alice", "as_of": iso(T0 + timedelta(days=1))}])
    e = explain(w.r, "t", DEFAULT, qid)
    d = e.derived
    assert d is not None and d.identical and d.recorded_why == "matches"
    got = {n.note_id: n.outcome for n in d.notes}
    assert got["fit"] == "shown" and got["theirs"] == "private"
    assert got["car"] in ("shown", "packed_out")  # a candidate by meaning alone
    assert "other" not in got  # unrelated: no candidate
