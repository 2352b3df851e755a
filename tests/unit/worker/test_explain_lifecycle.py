"""``audit explain`` and ``audit reproduce`` after a note was superseded or erased: the
reasons ``superseded`` and ``erased``, the ``erased`` status of a reproduction."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from hivemind_memory.projections.ranking.config import DEFAULT
from hivemind_memory.worker.audit.explain import explain
from hivemind_memory.worker.audit.reproduce import reproduce_queries
from hivemind_memory.worker.projector import ensure_projected
from tests.support.factories import T0, created, iso
from tests.unit.worker.test_audit import World, _no_log_config  # noqa: F401 (fixture)

Q = {"ns": "t", "text": "deploy canary rollback", "budget": 60, "agent": "alice",
     "config": {"relevance": "bm25"}}


def _erase(w: World, nid: str) -> None:
    def catch_up(ns: str, target: Any, timeout_s: float) -> None:
        ensure_projected(w.r, ns, target, w.settings, timeout_s)

    w.client.erase("t", [nid], catch_up=catch_up)


def test_a_superseded_note_is_left_out_as_superseded(tmp_path: Path) -> None:
    w = World(tmp_path)
    w.client.append([
        created("old", at=T0, text="deploy canary rollback via argocd", tokens=20),
        created("new", at=T0 + timedelta(days=1), text="deploy canary rollback via flux",
                tokens=20, supersedes=["old"]),
    ])
    [qid] = w.serve([{**Q, "as_of": iso(T0 + timedelta(days=2))}])
    d = explain(w.r, "t", DEFAULT, qid).derived
    assert d is not None
    got = {n.note_id: n for n in d.notes}
    assert got["new"].outcome == "shown"
    assert got["old"].outcome == "superseded" and "superseded by new" in got["old"].detail


def test_an_erased_note_that_was_shown_is_explained_and_reproduces_as_erased(
        tmp_path: Path) -> None:
    w = World(tmp_path)
    w.client.append([
        created("secret", at=T0, text="deploy canary rollback key hunter2", tokens=20),
        created("keep", at=T0, text="deploy canary rollback steps", tokens=20),
        created("other", at=T0, text="billing invoices"),
    ])
    [qid, other] = w.serve([Q, {**Q, "text": "billing invoices"}])
    _erase(w, "secret")
    d = explain(w.r, "t", DEFAULT, qid).derived
    assert d is not None
    got = {n.note_id: n for n in d.notes}
    assert got["secret"].outcome == "erased" and got["secret"].text == ""
    assert "erased since" in got["secret"].detail
    assert got["keep"].outcome == "shown"
    asked = explain(w.r, "t", DEFAULT, qid, note_id="secret").derived
    assert asked is not None and asked.note is not None and asked.note.outcome == "erased"
    summary = reproduce_queries(w.r, "t", DEFAULT, None)
    assert summary.ok and summary.different == 0 and summary.identical == 0
    # both: the billing answer did not show it, but its text counted in the BM25 statistics
    # that ranked it (the scores differ now), so it cannot be reproduced either
    assert summary.erased == 2
    rows = {v.query_id: v for v in summary.reproductions}
    assert rows[qid].erased == rows[other].erased == ["secret"]
    assert not rows[qid].identical and "notes out: secret" in rows[qid].differences
    assert rows[qid].causes == ["note secret erased since"]
