"""``hivemind calibrate``: fit the calibrated relevance's coefficients to a namespace.

Two sources of labels:

* a labelled JSON Lines file (``--labels``): ``{"query": str, "relevant": [note ids],
  "agent": str (optional), "budget": int (optional, 1,000), "as_of": time (optional)}``;
  every note the asker may see is a row, labelled by whether it is in ``relevant``, ranked on
  the namespace's current state (or its state as of ``as_of``);
* the namespace's own audit trail: each served query of an agent (live or as-of) is a query,
  its shown notes are the rows, labelled 1 when that agent reported ``note.used`` for the
  note (its ``at``) within ``window`` after the query was served (``served_at``; its
  ``as_of`` in entries written before that field), else 0: a use before the answer was
  served, after the window, or by another agent is no evidence of that answer. Notes it was
  not shown carry no label (the agent could not have used them). Each query is ranked on the
  state it was served on (``worker.audit.reproduce.States``, as ``audit reproduce`` does).

The queries are split (seeded, by query) into a fitted part and a held-out part; the model is
``projections.ranking.fitting.fit_logistic`` over the product's own features
(``NamespaceIndex.feature_columns``). Recall on the held-out queries, before (the base config)
and after (the fitted coefficients), is the share of each query's relevant (used) notes that
its packed context holds, through ``worker.engine.run_rank`` at its budget (or ``budget``).
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from hivemind_memory.api_stub.protocol.messages import QueryRequest, utcnow
from hivemind_memory.events.errors import ConfigError
from hivemind_memory.events.schema import NoteUsed
from hivemind_memory.events.times import to_utc
from hivemind_memory.projections.ranking.calibrated import FEATURES, fixed_logit
from hivemind_memory.projections.ranking.config import COEFFICIENTS, RankingConfig
from hivemind_memory.projections.ranking.embedders import Embedder
from hivemind_memory.projections.ranking.fitting import L2, calibration_of, fit_logistic
from hivemind_memory.projections.ranking.index import NamespaceIndex, build_index
from hivemind_memory.projections.store.index_loader import load_index
from hivemind_memory.projections.store.log import iter_all
from hivemind_memory.projections.store.readmodel import decode_entry
from hivemind_memory.projections.store.rebuild import fold_log
from hivemind_memory.projections.store.types import Store
from hivemind_memory.worker.audit.reproduce import Auditor, all_served, log_order
from hivemind_memory.worker.engine import run_rank

FloatArray = npt.NDArray[np.float64]
DEFAULT_BUDGET = 1_000
"""Budget of a labelled query that names none."""


@dataclass
class Example:
    """One labelled query."""

    key: str
    """Its id (the served query's, or ``label:<line>``): the split is by this."""
    req: QueryRequest
    now: datetime
    relevant: set[str]
    labelled: set[str] | None
    """The notes whose label is known (None: every note the asker may see)."""
    served: Any = None
    """The audit entry it comes from (its state is rebuilt from the log), if any."""


@dataclass
class Report:
    """What ``calibrate`` found."""

    source: str
    queries: int
    fitted: int
    held_out: int
    rows: int
    positives: int
    before: float | None
    after: float | None
    config: RankingConfig
    skipped: dict[str, int] = field(default_factory=dict)


class ExampleIndexes:
    """The index each example is ranked on."""

    def __init__(self, r: Store, ns: str, cfg: RankingConfig, embedder: Embedder | None,
                 auditor: Auditor | None) -> None:
        self.r, self.ns, self.embedder, self.auditor = r, ns, embedder, auditor
        self._current: NamespaceIndex | None = None
        self._as_of: dict[datetime, NamespaceIndex] = {}

    def of(self, ex: Example) -> NamespaceIndex:
        if ex.served is not None:
            assert self.auditor is not None
            return self.auditor.states.of(ex.served.event)[0]
        if ex.req.as_of is not None:
            got = self._as_of.get(ex.req.as_of)
            if got is None:
                rb = fold_log(self.r, self.ns, as_of=ex.req.as_of)
                got = self._as_of[ex.req.as_of] = build_index(self.ns, rb.projection.notes,
                                                              self.embedder)
            return got
        if self._current is None:
            self._current = NamespaceIndex(self.ns)
            load_index(self.r, self._current, snapshot=False, embedder=self.embedder)
        return self._current


class _Label(msgspec.Struct, forbid_unknown_fields=True):
    query: str
    relevant: list[str]
    agent: str = ""
    budget: int = DEFAULT_BUDGET
    as_of: str | None = None


def read_labels(path: str | Path, ns: str) -> list[Example]:
    """The labelled queries of a JSON Lines file; ``ConfigError`` names a bad line."""
    out: list[Example] = []
    now = utcnow()
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read labels: {exc.strerror or exc}") from exc
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            lab = msgspec.json.decode(line, type=_Label)
            as_of = None if lab.as_of is None else to_utc(
                datetime.fromisoformat(lab.as_of.replace("Z", "+00:00")), "as_of")
            req = QueryRequest(ns=ns, text=lab.query, budget=lab.budget, agent=lab.agent,
                               as_of=as_of)
        except (msgspec.ValidationError, msgspec.DecodeError, ValueError) as exc:
            raise ConfigError(f"{path}:{i}: bad label line: {exc}") from exc
        out.append(Example(f"label:{i}", req, as_of or now, set(lab.relevant), None))
    return out


def uses_by_agent(r: Store, ns: str) -> dict[tuple[str, str], list[datetime]]:
    """(agent, note id) -> the times that agent reported ``note.used`` for the note."""
    out: dict[tuple[str, str], list[datetime]] = defaultdict(list)
    for entry in iter_all(r, ns):
        ev, _ = decode_entry(entry.fields, ns)
        if isinstance(ev, NoteUsed):
            out[(ev.agent, ev.note_id)].append(ev.at)
    return out


def from_uses(r: Store, ns: str, auditor: Auditor, window: timedelta,
              skipped: dict[str, int]) -> list[Example]:
    """A labelled query per served query of an agent (see the module docstring)."""
    uses = uses_by_agent(r, ns)
    out: list[Example] = []
    for x in log_order(all_served(r, ns)):
        s = x.event
        if not s.seen:
            skipped["legacy"] = skipped.get("legacy", 0) + 1
            continue
        if not s.agent or not s.chosen:
            skipped["anonymous or empty"] = skipped.get("anonymous or empty", 0) + 1
            continue
        if s.redacted:  # its text was an erased note's: nothing to learn from
            skipped["erased"] = skipped.get("erased", 0) + 1
            continue
        req, _, _ = auditor.inputs(s)
        shown = {nid for nid, _ in s.chosen}
        start = s.served_at or s.as_of  # an as-of query is served after its as_of
        used = {nid for nid in shown
                if any(start <= t <= start + window for t in uses.get((s.agent, nid), ()))}
        out.append(Example(s.query_id, req, s.as_of, used, shown, served=x))
    return out


def rows(ex: Example, idx: NamespaceIndex, cfg: RankingConfig,
         embedder: Embedder | None) -> tuple[FloatArray, FloatArray, FloatArray]:
    """The example's training rows: features of its labelled notes, their labels, and the
    fixed logit term of each (``calibrated.fixed_logit``: the prior, the long-note term)."""
    cos = None
    if embedder is not None and idx.derived is not None:
        got = idx.query_cosines(embedder.embed([ex.req.text]))
        cos = None if got is None else got[:, 0]
    seq, columns = idx.feature_columns(ex.req.text, ex.req.embedding, cfg, ex.req.agent,
                                       None, cos)
    ids = idx.cols.ids
    names = [ids[s] for s in seq.tolist()]
    keep = np.array([ex.labelled is None or n in ex.labelled for n in names], np.bool_)
    x = np.column_stack(columns)[keep] if len(names) else np.zeros((0, len(columns)))
    y = np.array([n in ex.relevant for n, k in zip(names, keep, strict=True) if k], np.float64)
    return x, y, fixed_logit(idx.cols, seq, cfg.calibration)[keep]


def recall_of(ex: Example, idx: NamespaceIndex, cfg: RankingConfig,
              embedder: Embedder | None, budget: int | None) -> float:
    """Share of the example's relevant notes in its packed context under ``cfg``."""
    req = ex.req if budget is None else msgspec.structs.replace(ex.req, budget=budget)
    res = run_rank(idx, req, cfg, ex.now, embedder=embedder)
    got = {n.note_id for n in res.notes}
    return len(ex.relevant & got) / len(ex.relevant)


def split(examples: Sequence[Example], holdout: float, seed: int
          ) -> tuple[set[str], set[str]]:
    """The keys of the fitted and the held-out examples (at least one of each when there
    are two or more)."""
    keys = sorted(ex.key for ex in examples)
    random.Random(seed).shuffle(keys)
    n_out = round(holdout * len(keys))
    if len(keys) >= 2:
        n_out = min(max(n_out, 1 if holdout > 0 else 0), len(keys) - 1)
    return set(keys[n_out:]), set(keys[:n_out])


def calibrate(r: Store, ns: str, base: RankingConfig, embedder: Embedder | None, *,
              labels: str | Path | None = None, holdout: float = 0.2,
              window: timedelta = timedelta(days=1), budget: int | None = None,
              seed: int = 0, l2: float = L2) -> Report:
    """Fit ``base``'s calibration to the namespace (see the module docstring)."""
    base = msgspec.structs.replace(base, relevance="calibrated")
    skipped: dict[str, int] = {}
    auditor = None
    if labels is not None:
        examples = read_labels(labels, ns)
        source = f"labels {labels}"
    else:
        auditor = Auditor(r, ns, base, embedder=embedder)
        examples = from_uses(r, ns, auditor, window, skipped)
        source = "uses reported after served queries"
    fit_keys, out_keys = split(examples, holdout, seed)
    states = ExampleIndexes(r, ns, base, embedder, auditor)
    xs: list[FloatArray] = []
    ys: list[FloatArray] = []
    offs: list[FloatArray] = []
    before: list[float] = []
    for ex, idx in _walk(examples, states):
        if ex.key in fit_keys:
            x, y, off = rows(ex, idx, base, embedder)
            xs.append(x)
            ys.append(y)
            offs.append(off)
        elif ex.relevant:
            before.append(recall_of(ex, idx, base, embedder, budget))
    x = np.concatenate(xs) if xs else np.zeros((0, len(FEATURES)))
    y = np.concatenate(ys) if ys else np.zeros(0)
    fitted = base
    after: list[float] = []
    if len(y) and 0 < y.sum() < len(y):
        fitted = msgspec.structs.replace(base, calibration=calibration_of(
            fit_logistic(x, y, l2, offset=np.concatenate(offs)).tolist(), base.calibration))
        if auditor is not None:  # the live fold only moves forward: a second pass
            auditor.states = type(auditor.states)(r, ns, embedder=embedder)
        for ex, idx in _walk([e for e in examples if e.key in out_keys and e.relevant],
                             states):
            after.append(recall_of(ex, idx, fitted, embedder, budget))
    return Report(source=source, queries=len(examples), fitted=len(fit_keys),
                  held_out=len(out_keys), rows=len(y), positives=int(y.sum()),
                  before=sum(before) / len(before) if before else None,
                  after=sum(after) / len(after) if after else None, config=fitted,
                  skipped=skipped)


def _walk(examples: Sequence[Example], states: ExampleIndexes
          ) -> Iterator[tuple[Example, NamespaceIndex]]:
    """Each example with the index it is ranked on (served ones in log order)."""
    for ex in examples:
        yield ex, states.of(ex)


def summary(rep: Report) -> str:
    """The report as a few lines of text."""
    lines = [f"calibrate: {rep.queries} labelled quer(ies) from {rep.source}: {rep.fitted} "
             f"fitted, {rep.held_out} held out; {rep.rows} labelled note(s) fitted, "
             f"{rep.positives} relevant"]
    if rep.skipped:
        lines.append("skipped: " + ", ".join(f"{v} {k}" for k, v in sorted(rep.skipped.items())))
    if rep.before is None or rep.after is None:
        lines.append("held-out recall: nothing to compare (no held-out query with a relevant "
                     "note, or nothing to fit)")
    else:
        lines.append(f"held-out recall: before {rep.before:.3f}, after {rep.after:.3f} "
                     f"({rep.after - rep.before:+.3f})")
    cal = rep.config.calibration
    lines.append("fitted: " + ", ".join(f"{k}={getattr(cal, k):.4g}" for k in COEFFICIENTS))
    return "\n".join(lines)


def report_json(rep: Report) -> str:
    """The report as one JSON object."""
    return json.dumps({"source": rep.source, "queries": rep.queries, "fitted": rep.fitted,
                       "held_out": rep.held_out, "rows": rep.rows, "positives": rep.positives,
                       "before": rep.before, "after": rep.after, "skipped": rep.skipped,
                       "calibration": msgspec.to_builtins(rep.config.calibration)})
