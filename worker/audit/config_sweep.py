"""``hivemind sweep``: replay a namespace's served queries under other ranking constants.

Each served query is re-run on the state it saw, at the time it was served, under its own
config with the swept keys set on top (a swept key wins over the query's own override),
through the worker's ranking path (``worker.audit.reproduce.Auditor.rerun``). Per
combination: how many answers change (the list of notes, in context order, differs from what
was served), the notes entering and leaving, the packed value (sum of the packed notes'
scores) and the tokens used, beside what the serving configs gave.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from hivemind_memory.events.errors import ConfigError
from hivemind_memory.projections.ranking.config import DEFAULT, RankingConfig, with_overrides
from hivemind_memory.worker.audit.reproduce import Auditor, ServedEntry, log_order

SERVED_LABEL = "as served"
"""Label of the baseline row: the configs that served the queries."""


def parse_set(spec: str) -> tuple[str, list[Any]]:
    """``short.floor=0.2,0.35`` -> ``("short.floor", [0.2, 0.35])``; values are JSON scalars
    (numbers, ``true``), anything else a string (``order=score,edges``)."""
    key, eq, values = spec.partition("=")
    if not eq or not key or not values:
        raise ConfigError(f"--set {spec!r}: expected KEY=V1,V2,...")
    out: list[Any] = []
    for v in values.split(","):
        try:
            out.append(msgspec.json.decode(v))
        except msgspec.DecodeError:
            out.append(v)
    return key, out


def nested(flat: dict[str, Any]) -> dict[str, Any]:
    """Dotted keys -> the nested overrides ``with_overrides`` takes."""
    out: dict[str, Any] = {}
    for key, v in flat.items():
        head, dot, tail = key.partition(".")
        if dot:
            out.setdefault(head, {})[tail] = v
        else:
            out[key] = v
    return out


def combinations(specs: Sequence[str]) -> list[dict[str, Any]]:
    """Every combination of the ``--set`` values (checked against the config's keys)."""
    sets = [parse_set(s) for s in specs]
    keys = [k for k, _ in sets]
    if len(set(keys)) != len(keys):
        raise ConfigError("--set: a key is given twice")
    combos = [dict(zip(keys, vals, strict=True))
              for vals in itertools.product(*(v for _, v in sets))]
    for c in combos:
        apply(DEFAULT, c)  # an unknown key or a bad value fails before any work
    return combos


def apply(cfg: RankingConfig, combo: dict[str, Any]) -> RankingConfig:
    """``cfg`` with the combination set; ``ConfigError`` names the bad key."""
    try:
        return with_overrides(cfg, nested(combo))
    except msgspec.ValidationError as exc:
        raise ConfigError(f"--set {label(combo)}: {exc}") from exc


def label(combo: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in combo.items()) or SERVED_LABEL


@dataclass
class SweepRow:
    """The totals of one combination over the swept queries."""

    config: str
    queries: int = 0
    changed: int = 0
    notes_in: int = 0
    notes_out: int = 0
    value: float = 0.0
    used: int = 0
    overrides: dict[str, Any] = field(default_factory=dict)
    served_configs: dict[str, int] = field(default_factory=dict)
    """On the ``as served`` row: each serving config's digest and how many queries it served."""


def sweep_configs(auditor: Auditor, served: Sequence[ServedEntry], combos: Sequence[dict[str, Any]],
          on_query: Callable[[], None] | None = None) -> list[SweepRow]:
    """The baseline row (what was served) then one row per combination."""
    base = SweepRow(SERVED_LABEL)
    rows = [SweepRow(label(c), overrides=c) for c in combos]
    for x in log_order(served):
        s = x.event
        if not s.seen or s.redacted:  # legacy: no state to rebuild; erased: no text
            continue
        req, cfg, _causes = auditor.inputs(s)
        was = [nid for nid, _ in s.chosen]
        base.queries += 1
        base.value += sum(score for _, score in s.chosen)
        base.used += s.used
        base.served_configs[s.config_digest] = base.served_configs.get(s.config_digest, 0) + 1
        for row, combo in zip(rows, combos, strict=True):
            res, _ = auditor.rerun(s, req, apply(cfg, combo))
            now = [n.note_id for n in res.notes]
            row.queries += 1
            row.changed += now != was
            row.notes_in += len(set(now) - set(was))
            row.notes_out += len(set(was) - set(now))
            row.value += sum(n.score for n in res.notes)
            row.used += res.used
        if on_query is not None:
            on_query()
    return [base, *rows]


def table(rows: Sequence[SweepRow]) -> str:
    """A fixed-width table of the rows."""
    head = ["config", "changed", "in", "out", "value", "used"]
    cells = [head] + [[r.config, f"{r.changed}/{r.queries}", str(r.notes_in), str(r.notes_out),
                       f"{r.value:.4f}", str(r.used)] for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(row, widths, strict=True)))
             for row in cells]
    served = next((r.served_configs for r in rows if r.served_configs), {})
    if served:
        lines.append("served under config " + ", ".join(
            f"{d} ({n} quer{'y' if n == 1 else 'ies'})" for d, n in sorted(served.items()))
            + " (hivemind export --with-audit shows them)")
    return "\n".join(lines)
