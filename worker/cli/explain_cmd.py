"""``hivemind audit explain --ns NS QUERY_ID [--note ID] [--recorded] [--json]``: why a served
query got these notes and not others (``worker.audit.explain``), as text or one JSON object."""

from __future__ import annotations

import argparse
import sys
from typing import IO

import msgspec

from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.events.errors import QueryError
from hivemind_memory.projections.ranking.config import load_config
from hivemind_memory.worker.audit.explain import Considered, Explanation
from hivemind_memory.worker.cli.args import warn_unknown_namespaces
from hivemind_memory.worker.cli.commands import client_of, service_of

_json = msgspec.json.Encoder()


def cmd_audit_explain(args: argparse.Namespace, s: Settings) -> int:
    if args.limit < 0:
        print("hivemind: --limit must be >= 0", file=sys.stderr)
        return 2
    client = client_of(s)
    warn_unknown_namespaces([args.ns], client.namespaces())
    try:
        got = service_of(client, load_config(s.config_path)).explain(
            args.ns, args.query_id, note_id=args.note, derive_it=not args.recorded)
    except QueryError as exc:
        print(f"hivemind: {exc.message}", file=sys.stderr)
        return 1
    if args.json:
        sys.stdout.write(_json.encode(got).decode() + "\n")
    else:
        print_explanation(got, sys.stdout, args.limit)
    return 0


def _row(c: Considered) -> str:
    where = f"{c.position:>3}" if c.position else "  -"
    return (f"  {where} {c.rank or '-':>4} {c.note_id:<24.24} {c.relevance:>8.6f} "
            f"{c.recency:>8.6f} {c.score:>8.6f} {c.cost:>6}  {'seed' if c.seed else '':<4}")


HEAD = (f"  ctx rank {'note':<24} {'relevance':>8} {'recency':>8} {'score':>8} {'cost':>6}  "
        "5%/d")


def print_explanation(e: Explanation, out: IO[str], limit: int) -> None:
    """The explanation as text: the query, shown notes, left-out notes with reasons."""
    w = out.write
    mode = "live" if e.live else f"as-of {e.as_of.isoformat()}"
    w(f"{e.query_id}  agent={e.agent or '-'}  {mode}  served {e.served_at.isoformat()}\n")
    w(f"  text {e.text!r}  budget {e.budget}  used {e.used}  {e.method}  config "
      f"{e.config_digest}"
      + (f" (min_relevance {e.min_relevance:g})" if e.min_relevance is not None else "")
      + "\n")
    d = e.derived
    if d is None:
        w(f"  not re-run: {e.not_derived}\n")
        _print_recorded(e, out, limit)
        return
    w(f"  reproduces: {'identical' if d.identical else 'DIFFERENT'}; recorded why: "
      f"{d.recorded_why}\n")
    for x in d.differences:
        w(f"    difference: {x}\n")
    for x in d.causes:
        w(f"    cause: {x}\n")
    shown = [c for c in d.notes if c.outcome == "shown"]
    rest = [c for c in d.notes if c.outcome != "shown"]
    w(f"  value {d.value:.6f} in {len(shown)} note(s), {d.room} token(s) left; "
      f"{d.candidates} candidate(s)\n")
    stop = f", stopped at {d.seed.stopped_at}" if d.seed.stopped_at else ""
    w(f"  the seed's rule (5 % a day, top-down fill): {len(d.seed.notes)} note(s), "
      f"{d.seed.used} token(s), value {d.seed.value:.6f}{stop}\n")
    w("shown, in context order:\n" + HEAD + "\n")
    for c in shown:
        w(_row(c) + "\n")
    w(f"left out ({len(rest) + d.omitted}; strongest first):\n" + HEAD + "\n")
    for c in rest[:limit]:
        w(_row(c) + f"\n        {c.outcome}: {c.detail}\n")
    if len(rest) + d.omitted > limit:
        w(f"  ... {len(rest) + d.omitted - limit} more (--limit, or --json)\n")
    if d.note is not None:
        w(f"note {d.note.note_id}: {d.note.outcome}: {d.note.detail}\n")
    elif d.note_absent:
        w(d.note_absent + "\n")


def _print_recorded(e: Explanation, out: IO[str], limit: int) -> None:
    w = out.write
    why = e.recorded
    w("shown, in context order (recorded):\n")
    sig = why.shown if why is not None and len(why.shown) == len(e.chosen) else None
    for i, (nid, score) in enumerate(e.chosen, start=1):
        extra = ""
        if sig is not None:
            extra = (f"  relevance {sig[i - 1].relevance:.6f} recency "
                     f"{sig[i - 1].recency:.6f} cost {sig[i - 1].cost}")
        w(f"  {i:>3} {nid:<24} score {score:.6f}{extra}\n")
    if why is None:
        w("  (the entry records no left-out notes)\n")
        return
    counts = ", ".join(f"{k} {v}" for k, v in sorted(why.counts.items())) or "none"
    w(f"left out (recorded: the {why.limit} strongest; counts: {counts}):\n")
    for x in why.left_out[:limit]:
        w(f"  {x.note_id:<24} {x.reason:<20} relevance {x.relevance:.6f} recency "
          f"{x.recency:.6f} score {x.score:.6f} cost {x.cost}\n")
