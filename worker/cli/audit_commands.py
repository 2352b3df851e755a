"""CLI commands of the audit trail: ``audit list|reproduce|explain``, ``export``, ``import``,
``sweep``, ``show``. Thin: the read commands ask the worker's service (``worker.service``,
over ``Client``'s store: ``worker.audit.reproduce``, ``explain``, ``archive`` and
``config_sweep``), as ``hivemind serve`` does; ``import`` and ``calibrate`` still use the
store and ``worker.audit`` directly."""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec
from tqdm import tqdm

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.projections.ranking.config import load_config, to_toml
from hivemind_memory.projections.ranking.embedders import embedder_for
from hivemind_memory.projections.store.connection import connect, connect_queue
from hivemind_memory.projections.store.log import namespaces
from hivemind_memory.worker import runtime
from hivemind_memory.worker.audit import archive
from hivemind_memory.worker.audit import calibrate as calibration
from hivemind_memory.worker.audit import config_sweep as sweeping
from hivemind_memory.worker.audit.reproduce import Reproduction, ServedEntry, view_of
from hivemind_memory.worker.cli import explain_cmd
from hivemind_memory.worker.cli.args import progress, warn_unknown_namespaces
from hivemind_memory.worker.cli.commands import client_of, service_of

_json = msgspec.json.Encoder()


def cmd_audit(args: argparse.Namespace, s: Settings) -> int:
    if args.audit_cmd == "list":
        return _audit_list(args, s)
    if args.audit_cmd == "explain":
        return explain_cmd.cmd_audit_explain(args, s)
    return _audit_reproduce(args, s)


def _summary(x: ServedEntry) -> dict[str, Any]:
    d: dict[str, Any] = msgspec.to_builtins(x.event)
    return {"audit_id": x.audit_id, "live": x.live, **d}


def _audit_list(args: argparse.Namespace, s: Settings) -> int:
    if args.limit < 1:
        print("hivemind: --limit must be >= 1", file=sys.stderr)
        return 2
    page, nxt = service_of(client_of(s)).served(
        args.ns, agent=args.agent, since=args.since, until=args.until, before=args.before,
        limit=args.limit)
    out = sys.stdout
    for x in page:
        e = x.event
        if args.json:
            out.write(_json.encode(_summary(x)).decode() + "\n")
            continue
        mode = "live" if x.live else f"as-of {e.as_of.isoformat()}"
        out.write(f"{x.served_at.isoformat()}  {e.query_id}  agent={e.agent or '-'}  {mode}  "
                  f"budget={e.budget} used={e.used} config={e.config_digest}  {e.text!r}\n")
        for i, (nid, score) in enumerate(e.chosen, start=1):
            out.write(f"    {i:>3}. {nid:<24} score={score:.6f}\n")
    if not args.json:
        out.write(f"{len(page)} served quer{'y' if len(page) == 1 else 'ies'} in {args.ns}"
                  + (f"; next page: --before {nxt}" if nxt else "") + "\n")
    elif nxt:
        print(f"next page: --before {nxt}", file=sys.stderr)
    return 0


def _print_reproduction(rep: Reproduction, as_json: bool) -> None:
    e = rep.served.event
    if as_json:
        sys.stdout.write(_json.encode(view_of(rep)).decode() + "\n")
        return
    mode = "live" if rep.served.live else "as-of"
    if rep.identical:
        sys.stdout.write(f"identical  {e.query_id}  ({mode}, {len(e.chosen)} note(s), "
                         f"used {e.used})\n")
        return
    if rep.erased:
        sys.stdout.write(f"erased     {e.query_id}  ({mode}; {'; '.join(rep.causes)})\n")
        return
    word = "skipped" if rep.legacy else "DIFFERENT"
    sys.stdout.write(f"{word}  {e.query_id}  ({mode})\n")
    for d in rep.differences:
        sys.stdout.write(f"    difference: {d}\n")
    for c in rep.causes:
        sys.stdout.write(f"    cause: {c}\n")


def _audit_reproduce(args: argparse.Namespace, s: Settings) -> int:
    if bool(args.query_ids) == bool(args.all):
        print("hivemind: give QUERY_ID(s) or --all (not both)", file=sys.stderr)
        return 2
    client = client_of(s)
    warn_unknown_namespaces([args.ns], client.namespaces())
    got = service_of(client, load_config(s.config_path)).reproduce(
        args.ns, None if args.all else args.query_ids,
        on_each=lambda rep: _print_reproduction(rep, args.json))
    for q in got.not_found:
        print(f"hivemind: query {q} is not in the audit of {args.ns}", file=sys.stderr)
    print(f"audit reproduce: {got.identical} identical, {got.different} different"
          + (f", {got.erased} erased (ranked on notes erased since; not reproducible by "
             "design)" if got.erased else "")
          + (f", {got.legacy} legacy (served before audit replay, skipped)"
             if got.legacy else "")
          + (f", {len(got.not_found)} not found" if got.not_found else ""), file=sys.stderr)
    return 0 if got.ok else 1


def cmd_export(args: argparse.Namespace, s: Settings) -> int:
    client = client_of(s)
    warn_unknown_namespaces([args.ns], client.namespaces())
    svc = service_of(client)  # the log and audit as they are: no ranking config
    bar = progress(svc.log_length(args.ns), "export")
    try:
        if args.out:
            with open(args.out, "wb") as fh:
                rep = svc.export(args.ns, fh, until=args.until, with_audit=args.with_audit,
                                 on_entry=bar.update)
        else:
            rep = svc.export(args.ns, sys.stdout.buffer, until=args.until,
                             with_audit=args.with_audit, on_entry=bar.update)
            sys.stdout.buffer.flush()
    finally:
        bar.close()
    print(f"export: {rep.events} event(s)"
          + (f", {rep.served} served quer(ies), {rep.configs} config(s)"
             if args.with_audit else "")
          + (f"; {rep.skipped} undecodable log entr(ies) left out" if rep.skipped else ""),
          file=sys.stderr)
    return 0


def cmd_import(args: argparse.Namespace, s: Settings) -> int:
    rq = connect_queue(s.rq_url) if s.rq_url is not None else None  # apart for a cluster
    rt = runtime.build(s, connect(s.redis_url), rq)
    runtime.install(rt)

    client = Client(rt.store, rt.rq, settings=s)

    def on_error(msg: str) -> None:
        print(f"rejected: {msg}", file=sys.stderr)

    try:
        rep = archive.import_archive(rt.store, args.file, on_error=on_error,
                                     on_chunk=None if args.no_schedule else client.schedule)
    except OSError as exc:
        print(f"hivemind: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if rep is None:
        print("import: nothing restored (fix the lines above)", file=sys.stderr)
        return 1
    print(f"import: {rep.events} event(s), {rep.served} served quer(ies), {rep.configs} "
          f"config(s), {rep.embeddings} embedding(s) into {', '.join(sorted(rep.namespaces))}",
          file=sys.stderr)
    return 0


def cmd_calibrate(args: argparse.Namespace, s: Settings) -> int:
    base = load_config(s.config_path)
    r = connect(s.redis_url)
    warn_unknown_namespaces([args.ns], namespaces(r))
    if args.budget is not None and args.budget < 1:
        print("hivemind: --budget must be >= 1", file=sys.stderr)
        return 2
    rep = calibration.calibrate(r, args.ns, base, embedder_for(base.embedder),
                                labels=args.labels, holdout=args.holdout,
                                window=timedelta(hours=args.window), budget=args.budget,
                                seed=args.seed)
    print(calibration.report_json(rep) if args.json else calibration.summary(rep))
    if rep.config is base or rep.rows == 0 or rep.positives == 0:
        print("hivemind: nothing to fit (no labelled note is relevant, or every one is)",
              file=sys.stderr)
        return 1
    if args.out:
        Path(args.out).write_text(to_toml(rep.config), encoding="utf-8")
        print(f"wrote {args.out} (--config {args.out})", file=sys.stderr)
    return 0


def cmd_sweep(args: argparse.Namespace, s: Settings) -> int:
    combos = sweeping.combinations(args.sets)
    client = client_of(s)
    warn_unknown_namespaces([args.ns], client.namespaces())
    svc = service_of(client, load_config(s.config_path))
    served = svc.all_served(args.ns)
    if args.queries is not None:
        served = served[-args.queries:] if args.queries > 0 else []
    bar = None
    if sys.stderr.isatty():
        bar = tqdm(total=len(served), unit="q", desc="sweep", file=sys.stderr)
    rows = svc.sweep(args.ns, served, combos,
                     on_query=(lambda: bar.update(1)) if bar is not None else None)
    if bar is not None:
        bar.close()
    if args.json:
        for row in rows:
            sys.stdout.write(_json.encode(row).decode() + "\n")
    else:
        print(sweeping.table(rows))
    return 0


def cmd_show(args: argparse.Namespace, s: Settings) -> int:
    h = service_of(client_of(s)).show(args.ns, args.note_id)
    if h is None:
        print(f"hivemind: note {args.note_id} is not in namespace {args.ns}", file=sys.stderr)
        return 1
    if args.json:
        sys.stdout.write(_json.encode(h).decode() + "\n")
        return 0
    out = sys.stdout
    n = h.note
    if n is not None:
        flag = " (erased)" if n.erased else " (forgotten)" if n.forgotten else \
            f" (superseded by {n.superseded_by})" if n.superseded_by else ""
        out.write(f"note {n.note_id}{flag}  agent={n.agent} {n.scope} {n.kind} "
                  f"tokens={n.tokens} uses={n.uses} created {n.created_at.isoformat()}\n")
        out.write("".join(f"    {line}\n" for line in n.text.splitlines() or [""]))
    else:
        out.write(f"note {args.note_id}: not projected (yet)\n")
    if len(h.versions) > 1 or any(v.erased for v in h.versions):
        out.write(f"versions ({len(h.versions)}, oldest first):\n")
        for v in h.versions:
            text = "(erased)" if v.erased else v.text.splitlines()[0] if v.text else ""
            out.write(f"    v{v.version}  {v.at.isoformat()}  agent={v.agent}  "
                      f"tokens={v.tokens}  {text}\n")
    out.write(f"events ({len(h.events)}, log order):\n")
    for e in h.events:
        out.write(f"    {e['position']}  {e['type']:<14} {e['event_id']:<24} "
                  f"agent={e['agent']} at={e['at']}\n")
    out.write(f"served in {len(h.served)} quer(ies):\n")
    for x in h.served:
        out.write(f"    {x.served_at.isoformat()}  {x.query_id}  "
                  f"agent={x.agent or '-'}  rank {x.rank}  score={x.score:.6f}\n")
    return 0
