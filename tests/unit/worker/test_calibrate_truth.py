"""What ``hivemind calibrate`` writes, against a known truth: the coefficients and intercept of a
logistic model the data was drawn from (every field of the written config, within a stated
tolerance, and the probabilities themselves, bin by bin); and which uses of the audit trail
count as evidence (the rule ``docs/ranking.md`` states)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.messages import utcnow
from hivemind_memory.projections.ranking.calibrated import FEATURES, prior
from hivemind_memory.projections.ranking.config import (
    COEFFICIENTS,
    DEFAULT,
    config_from_toml,
    to_toml,
)
from hivemind_memory.projections.ranking.fitting import L2, calibration_of, fit_logistic
from hivemind_memory.worker.audit.calibrate import from_uses
from hivemind_memory.worker.audit.reproduce import Auditor, all_served
from tests.support.factories import created, iso
from tests.unit.worker.test_audit import World

TRUTH = {"intercept": -2.0, "bm25": 1.5, "bm25_x_log_tokens": -0.4, "cosine": 2.2,
         "cosine_x_log_tokens": 0.3, "log_tokens": -0.6, "log_tokens_sq": 0.05,
         "context_bm25": 0.8, "context_cosine": -0.7, "author_named": 1.1}
"""The model the labels are drawn from (every coefficient non-zero, signs mixed)."""
ROWS = 200_000
TOLERANCE = 0.06
"""Largest allowed |fitted - true| of a coefficient: about four standard errors at ROWS."""
BIN_TOLERANCE = 0.02
"""Largest allowed |mean predicted - observed rate| in a decile of predicted probability."""


def _draw(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features shaped like the product's (bm25 and cosines in [0, 1], log lengths 0..5, an
    author flag), each row's fixed term ``prior`` of a namespace of 50..5,000 notes, and labels
    drawn from the logistic model ``TRUTH``."""
    rng = np.random.default_rng(seed)
    bm25 = rng.uniform(0, 1, ROWS)
    cos = rng.uniform(0, 1, ROWS)
    lt = rng.uniform(0, 5, ROWS)
    cols = {"bm25": bm25, "bm25_x_log_tokens": bm25 * lt, "cosine": cos,
            "cosine_x_log_tokens": cos * lt, "log_tokens": lt, "log_tokens_sq": lt * lt,
            "context_bm25": rng.uniform(0, 1, ROWS), "context_cosine": rng.uniform(0, 1, ROWS),
            "author_named": (rng.random(ROWS) < 0.2).astype(np.float64)}
    x = np.column_stack([cols[f] for f in FEATURES])
    visible = rng.integers(50, 5_000, ROWS)
    off = np.array([prior(int(n), DEFAULT.calibration) for n in visible])
    z = x @ np.array([TRUTH[f] for f in FEATURES]) + TRUTH["intercept"] + off
    y = (rng.random(ROWS) < 1 / (1 + np.exp(-z))).astype(np.float64)
    return x, y, off


def test_the_written_config_holds_the_true_coefficients_and_intercept(tmp_path: Path) -> None:
    """The fit ``calibrate`` runs (``fit_logistic`` with each row's ``prior`` as the fixed
    term, ``calibration_of``), written as TOML and read back as ``--config`` reads it: every
    coefficient, the intercept included, within TOLERANCE of the truth; every other field of
    the config as it was; and the probabilities it gives match the observed rates."""
    x, y, off = _draw(1)
    base = msgspec.structs.replace(DEFAULT, relevance="calibrated")
    fitted = msgspec.structs.replace(base, calibration=calibration_of(
        fit_logistic(x, y, L2, offset=off).tolist(), base.calibration))
    path = tmp_path / "fitted.toml"
    path.write_text(to_toml(fitted))
    written = config_from_toml(path.read_text())
    cal = written.calibration
    for name in COEFFICIENTS:
        assert abs(getattr(cal, name) - TRUTH[name]) <= TOLERANCE, (name, getattr(cal, name))
    untouched = set(msgspec.structs.asdict(cal)) - set(COEFFICIENTS)
    assert untouched  # the candidate rules: reference_notes, max_tokens, ...
    for name in untouched:
        assert getattr(cal, name) == getattr(base.calibration, name), name
    assert msgspec.structs.replace(written, calibration=base.calibration) == base
    # calibration: in each decile of predicted probability, the mean prediction is the
    # observed rate of positives (a shifted intercept moves every bin one way)
    coef = np.array([getattr(cal, f) for f in FEATURES])
    p = 1 / (1 + np.exp(-(x @ coef + cal.intercept + off)))
    edges = np.quantile(p, np.linspace(0, 1, 11))
    which = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, 9)
    for b in range(10):
        inside = which == b
        assert inside.sum() > ROWS // 20
        assert abs(p[inside].mean() - y[inside].mean()) <= BIN_TOLERANCE, b


def test_a_shifted_intercept_is_seen_in_the_bins() -> None:
    """The bin check above can fail: the truth's intercept moved by 0.3 (what a fit that
    dropped the fixed term, or read it twice, would be off by at ~750 notes) misses it."""
    x, y, off = _draw(2)
    coef = np.array([TRUTH[f] for f in FEATURES])
    p = 1 / (1 + np.exp(-(x @ coef + TRUTH["intercept"] + 0.3 + off)))
    edges = np.quantile(p, np.linspace(0, 1, 11))
    which = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, 9)
    worst = max(abs(p[which == b].mean() - y[which == b].mean()) for b in range(10))
    assert worst > BIN_TOLERANCE


def test_which_uses_are_evidence(tmp_path: Path) -> None:
    """A shown note used by the asker within the window after the query was served: 1. Used
    before it was served (a live query's asker a minute earlier; an as-of query's asker
    between its ``as_of`` and its serving), after the window, or by another agent: 0. A
    note the query did not show carries no label at all."""
    w = World(tmp_path)
    now = utcnow()
    notes = {nid: f"redis aof persistence {nid}" for nid in
             ("in", "early", "late", "other", "asof-between")}
    w.client.append([created(nid, at=now - timedelta(days=30), text=t, tokens=5)
                     for nid, t in notes.items()]
                    + [created("hidden", at=now - timedelta(days=30), text="pottery glaze",
                               tokens=5)])
    past = now - timedelta(days=10)
    w.serve([{"ns": "t", "text": "redis aof persistence", "budget": 200, "agent": "alice"},
             {"ns": "t", "text": "redis aof persistence", "budget": 200, "agent": "bob",
              "as_of": iso(past)}])
    served = {x.event.agent: x.event for x in all_served(w.r, "t")}
    live, asof = served["alice"], served["bob"]
    assert live.served_at is not None and asof.served_at is not None
    assert {n for n, _ in live.chosen} == set(notes) == {n for n, _ in asof.chosen}
    window = timedelta(hours=24)

    def use(nid: str, agent: str, at: Any, eid: str) -> dict[str, Any]:
        return {"type": "note.used", "event_id": eid, "ns": "t", "note_id": nid,
                "agent": agent, "at": iso(at)}

    # uses dated up to a day ahead of the clock: a client that allows that much skew
    ahead = Client(w.r, settings=replace(w.settings, max_future_skew_s=2 * 86400))
    ahead.append([
        use("in", "alice", live.served_at + timedelta(hours=1), "u1"),
        use("early", "alice", live.served_at - timedelta(minutes=1), "u2"),
        use("late", "alice", live.served_at + window + timedelta(minutes=1), "u3"),
        use("other", "carol", live.served_at + timedelta(hours=1), "u4"),
        use("hidden", "alice", live.served_at + timedelta(hours=1), "u5"),
        use("in", "bob", asof.served_at + timedelta(hours=1), "u6"),
        use("asof-between", "bob", past + timedelta(hours=1), "u7"),
    ])
    skipped: dict[str, int] = {}
    exs = {ex.req.agent: ex for ex in from_uses(w.r, "t", Auditor(w.r, "t", DEFAULT), window,
                                                skipped)}
    assert exs["alice"].relevant == {"in"}
    assert exs["alice"].labelled == set(notes)  # "hidden" was not shown: no label
    assert "hidden" not in (exs["alice"].labelled or set())
    assert exs["bob"].relevant == {"in"}  # the use between as_of and serving is no evidence
