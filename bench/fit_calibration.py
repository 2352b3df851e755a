"""``python -m bench fit [--data DIR] [--l2 X,Y] [--toml FILE]``: refit the calibrated
relevance's default coefficients on LoCoMo's development half and show how they generalise.

The features are the product's own (``NamespaceIndex.feature_columns``: the index built as
the worker builds it, with the bundled embedder); each (question, visible note) pair is a row,
labelled 1 when the note is one of the question's evidence turns. The model is
``projections.ranking.fitting.fit_logistic``. For each ridge penalty, each conversation is
held out in turn: the coefficients fitted on the other four rank its questions through
``worker.engine.run_rank`` (recency, exact packing and all), and the evidence recall of those
held-out answers is what the penalty is judged on (the acceptance check runs on conversations
that are not in the folder). The coefficients fitted on all five with the chosen penalty are
printed as TOML (``[calibration]``, what ``--config`` takes) and as the ``FITTED`` default of
``projections/ranking/config.py``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np

from bench.locomo import DEFAULT_DATA, Conversation, load_task, recall
from bench.quality import BUDGETS
from hivemind_memory.api_stub.protocol.messages import QueryRequest
from hivemind_memory.projections.ranking.calibrated import FEATURES, fixed_logit
from hivemind_memory.projections.ranking.config import (
    COEFFICIENTS,
    DEFAULT,
    Calibration,
    RankingConfig,
)
from hivemind_memory.projections.ranking.embedders import Embedder, embedder_for
from hivemind_memory.projections.ranking.fitting import L2, calibration_of, fit_logistic
from hivemind_memory.projections.ranking.index import NamespaceIndex, build_index
from hivemind_memory.worker.engine import run_rank

GRID = (1e-3, 1e-4, 1e-5, 1e-6)
TOLERANCE = 0.01
"""The most regularised penalty whose held-out recall (summed over the budgets) is within
this of the best is chosen: the folder has five conversations, the acceptance check others."""


@dataclass
class Rows:
    """One conversation's training rows."""

    x: np.ndarray
    y: np.ndarray
    offset: np.ndarray
    """Each row's fixed logit term (``calibrated.fixed_logit``)."""


def rows(c: Conversation, idx: NamespaceIndex, cfg: RankingConfig,
         embedder: Embedder) -> Rows:
    xs, ys, offs = [], [], []
    cos = idx.query_cosines(embedder.embed([q.text for q in c.questions]))
    assert cos is not None
    for qi, q in enumerate(c.questions):
        seq, columns = idx.feature_columns(q.text, None, cfg, "", None, cos[:, qi])
        ids = idx.cols.ids
        evidence = set(q.evidence)
        xs.append(np.column_stack(columns))
        ys.append(np.array([ids[s] in evidence for s in seq.tolist()], np.float64))
        offs.append(fixed_logit(idx.cols, seq, cfg.calibration))
    return Rows(np.concatenate(xs), np.concatenate(ys), np.concatenate(offs))


def evaluate(c: Conversation, idx: NamespaceIndex, cfg: RankingConfig,
             embedder: Embedder) -> dict[int, float]:
    """Mean evidence recall of the conversation's questions under ``cfg`` (the product's
    ranking path)."""
    out = dict.fromkeys(BUDGETS, 0.0)
    for q in c.questions:
        for b in BUDGETS:
            req = QueryRequest(ns="locomo", text=q.text, budget=b, as_of=c.asked)
            res = run_rank(idx, req, cfg, c.asked, embedder=embedder)
            out[b] += recall({n.note_id for n in res.notes}, q.evidence)
    return {b: v / len(c.questions) for b, v in out.items()}


def fitted(data: Sequence[Rows], l2: float, base: Calibration) -> Calibration:
    x = np.concatenate([d.x for d in data])
    y = np.concatenate([d.y for d in data])
    off = np.concatenate([d.offset for d in data])
    return calibration_of(fit_logistic(x, y, l2, offset=off).tolist(), base)


def rounded(cal: Calibration, digits: int = 4) -> Calibration:
    """Coefficients at ``digits`` significant digits (what the defaults hold)."""
    return msgspec.structs.replace(cal, **{
        k: float(f"{getattr(cal, k):.{digits}g}") for k in COEFFICIENTS})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench fit", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--l2", default=",".join(str(v) for v in GRID),
                    help="ridge penalties to compare with conversations held out")
    ap.add_argument("--toml", type=Path, default=None, help="write the [calibration] here")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    convs = load_task(args.data)
    embedder = embedder_for("wordllama")
    assert embedder is not None
    cfg = msgspec.structs.replace(DEFAULT, relevance="calibrated")
    base = cfg.calibration
    indexes = [build_index(c.name, {n.note_id: n for n in c.notes}, embedder) for c in convs]
    data = [rows(c, idx, cfg, embedder) for c, idx in zip(convs, indexes, strict=True)]
    n_q = sum(len(c.questions) for c in convs)
    print(f"LoCoMo dev half: {len(convs)} conversations, {n_q} questions, "
          f"{sum(len(d.y) for d in data):,} (question, note) rows, "
          f"{int(sum(d.y.sum() for d in data)):,} of them evidence; features: "
          f"{', '.join(FEATURES)}")
    penalties = [float(v) for v in args.l2.split(",")]
    scores: dict[float, float] = {}
    print("evidence recall with each conversation held out (fitted on the other four):")
    for l2 in penalties:
        total = dict.fromkeys(BUDGETS, 0.0)
        folds = []
        for i, (c, idx) in enumerate(zip(convs, indexes, strict=True)):
            cal = fitted([d for j, d in enumerate(data) if j != i], l2, base)
            got = evaluate(c, idx, msgspec.structs.replace(cfg, calibration=cal), embedder)
            folds.append(f"{c.name} {got[200]:.2f}/{got[500]:.2f}/{got[1000]:.2f}")
            for b in BUDGETS:
                total[b] += got[b] * len(c.questions)
        mean = {b: v / n_q for b, v in total.items()}
        print(f"  l2={l2:g}: " + " / ".join(f"{mean[b]:.3f}" for b in BUDGETS)
              + f" at {'/'.join(map(str, BUDGETS))} tokens  ({'; '.join(folds)})")
        scores[l2] = sum(mean.values())
    top = max(scores.values())
    l2 = max(v for v, score in scores.items() if score >= top - TOLERANCE)
    final = rounded(fitted(data, l2, base))
    print(f"chosen l2={l2:g}{' (the default)' if l2 == L2 else ''}; fitted on all "
          f"{len(convs)} conversations:")
    raw = msgspec.to_builtins(final)
    toml = "[calibration]\n" + "".join(f"{k} = {v}\n" for k, v in raw.items())
    print(toml, end="")
    print("as the default (projections/ranking/config.py):")
    print("FITTED = Calibration(" + ", ".join(f"{k}={getattr(final, k)}"
                                                for k in COEFFICIENTS) + ")")
    in_sample = dict.fromkeys(BUDGETS, 0.0)
    for c, idx in zip(convs, indexes, strict=True):
        got = evaluate(c, idx, msgspec.structs.replace(cfg, calibration=final), embedder)
        for b in BUDGETS:
            in_sample[b] += got[b] * len(c.questions)
    print("in-sample evidence recall with these: "
          + " / ".join(f"{in_sample[b] / n_q:.3f}" for b in BUDGETS))
    if args.toml is not None:
        args.toml.write_text(toml, encoding="utf-8")
        print(f"wrote {args.toml}")
    print(f"took {time.perf_counter() - t0:.1f} s")
    return 0
