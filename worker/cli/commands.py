"""Command bodies of the CLI (one function per command; connections opened here)."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from typing import Any

import msgspec
import redis
import structlog
from tqdm import tqdm

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.jobs import schedule_namespaces
from hivemind_memory.api_stub.protocol.messages import QueryRequest, parse_request
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.events.errors import AppendFailed, QueryError
from hivemind_memory.events.schema import Event
from hivemind_memory.projections import curves
from hivemind_memory.projections.config import load_config
from hivemind_memory.projections.state import note_row, tier_of
from hivemind_memory.projections.store.cluster import append_replicated
from hivemind_memory.projections.store.connection import connect, connect_queue
from hivemind_memory.projections.store.ingest import IngestReport, ingest
from hivemind_memory.projections.store.lease import acquire_lease
from hivemind_memory.projections.store.readmodel import dead_total, read_dead, read_notes
from hivemind_memory.projections.store.rebuild import (
    LeaseLost,
    diff_notes,
    fold_log,
    live_snapshot,
    write_back,
)
from hivemind_memory.projections.store.types import Store
from hivemind_memory.worker import logs, runtime
from hivemind_memory.worker.cli.demo import run_demo
from hivemind_memory.worker.cli.output import print_result, redis_message
from hivemind_memory.worker.loop import run_worker

log = structlog.get_logger("hivemind.cli")
_json = msgspec.json.Encoder()


def _queue_conn(s: Settings) -> redis.Redis | None:
    """RQ's own connection when it is not the store (``--rq-url``)."""
    return connect_queue(s.rq_url) if s.rq_url is not None else None


def _runtime(s: Settings) -> runtime.Runtime:
    rt = runtime.build(s, connect(s.redis_url), _queue_conn(s))
    runtime.install(rt)
    return rt


def cmd_ingest(args: argparse.Namespace, s: Settings) -> int:
    rt = _runtime(s)
    q = rt.project_queue

    def on_chunk(nss: set[str]) -> None:
        if not args.no_schedule:
            schedule_namespaces(rt.store, q, nss)

    def on_error(msg: str) -> None:
        print(f"rejected: {msg}", file=sys.stderr)

    def appender(r: Store, events: Sequence[Event]) -> list[str]:
        return append_replicated(r, events, s.wait_replicas, s.wait_timeout_ms)

    rep = IngestReport()
    try:  # too few replicas acknowledging is a StoreError, reported by main (exit 2)
        ingest(rt.store, args.file, skip_invalid=args.skip_invalid, on_error=on_error,
               progress=sys.stderr.isatty(), on_chunk=on_chunk, report=rep,
               appender=appender)
    except OSError as exc:  # missing, a directory, not readable
        print(f"hivemind: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except AppendFailed as exc:
        print(f"hivemind: appended {rep.appended} event(s), then the store failed: {exc}; "
              "re-running the whole file is safe (repeated event_ids are applied once)",
              file=sys.stderr)
        return 2
    except redis.RedisError as exc:
        print(f"hivemind: Redis error after appending {rep.appended} event(s): "
              f"{redis_message(exc)}; re-running the whole file is safe (repeated event_ids "
              "are applied once)", file=sys.stderr)
        return 2
    if rep.rejected and not args.skip_invalid:
        print(f"ingest: {rep.rejected} bad line(s); nothing appended "
              "(fix them, or use --skip-invalid)", file=sys.stderr)
        return 1
    print(f"ingest: appended {rep.appended} event(s) to {len(rep.namespaces)} namespace(s)"
          + (f", rejected {rep.rejected}" if rep.rejected else ""), file=sys.stderr)
    return 1 if rep.rejected else 0


def cmd_worker(args: argparse.Namespace, s: Settings) -> int:
    return run_worker(_runtime(s), args.burst)


def cmd_notes(args: argparse.Namespace, s: Settings) -> int:
    r = connect(s.redis_url)
    cfg = load_config(s.config_path)
    notes = read_notes(r, args.ns)
    out = sys.stdout
    for nid in sorted(notes):
        n = notes[nid]
        if args.json:
            out.write(_json.encode(note_row(n, cfg)).decode() + "\n")
        else:
            flag = " (forgotten)" if n.forgotten else ""
            tier = tier_of(n.uses, n.kind, cfg)
            out.write(f"{n.note_id:<24} {tier:<9} uses={n.uses:<4} tokens={n.tokens:<7} "
                      f"{n.scope:<7} {n.kind:<7} {n.agent:<16} "
                      f"{n.created_at.isoformat()}{flag}\n")
    if not args.json:
        out.write(f"{len(notes)} note(s) in {args.ns}\n")
    return 0


def cmd_replay(args: argparse.Namespace, s: Settings) -> int:
    rt = _runtime(s)
    r = rt.store
    if args.verify and args.as_of is not None:
        print("hivemind: --verify compares the live state; it cannot be combined with --as-of",
              file=sys.stderr)
        return 2
    if args.as_of is not None:
        rb = fold_log(r, args.ns, as_of=args.as_of)
        for nid in sorted(rb.projection.notes):
            sys.stdout.write(
                _json.encode(note_row(rb.projection.notes[nid], rt.cfg)).decode() + "\n")
        return 0
    if args.verify:
        cp, live = live_snapshot(r, args.ns)
        rb = fold_log(r, args.ns, until=cp)
        diffs = diff_notes(live, rb.projection.notes)
        for d in diffs:
            print(d, file=sys.stderr)
        print(f"replay --verify: {len(live)} live note(s), {len(rb.projection.notes)} rebuilt, "
              f"{len(diffs)} difference(s)")
        return 1 if diffs else 0
    held = acquire_lease(r, args.ns, s.lock_lease_ms, time.monotonic() + 2 * s.lock_lease_ms / 1000)
    if held is None:
        print(f"hivemind: namespace {args.ns} is busy (projection lease held)", file=sys.stderr)
        return 2
    def renew() -> None:
        if not held.renew():
            raise LeaseLost(f"namespace {args.ns!r}: projection lease lost during replay")

    try:
        for _attempt in range(5):
            rb = fold_log(r, args.ns, on_chunk=renew)
            renew()
            if write_back(r, args.ns, rb, held.token, now_ms=int(time.time() * 1000)):
                break
        else:
            print(f"hivemind: namespace {args.ns} kept moving; replay wrote nothing",
                  file=sys.stderr)
            return 2
    finally:
        held.release()
    print(f"replay: rebuilt {args.ns} from {rb.events} event(s): "
          f"{len(rb.projection.notes)} note(s), {len(rb.projection.dead)} dead letter(s), "
          f"{rb.duplicates} duplicate(s)")
    return 0


def cmd_dead(args: argparse.Namespace, s: Settings) -> int:
    r = connect(s.redis_url)
    total = dead_total(r, args.ns)
    shown = read_dead(r, args.ns, count=args.limit)
    for d in shown:
        if args.json:
            sys.stdout.write(_json.encode(d).decode() + "\n")
        else:
            sys.stdout.write(f"{d.entry:<18} {d.reason}\n")
    more = total - len(shown)
    summary = (f"dead: {len(shown)} of {total} dead letter(s) of {args.ns}"
               + (f" (truncated: {more} more; use --limit {total})" if more > 0 else ""))
    print(summary, file=sys.stderr if args.json else sys.stdout)
    return 0


def cmd_curves(args: argparse.Namespace) -> int:
    cfg = load_config(args.config or Settings.from_env().config_path)
    if args.out:
        try:
            curves.plot(cfg, args.out)
        except ImportError as exc:
            print(f"hivemind: {exc}", file=sys.stderr)
            return 2
        print(f"wrote {args.out}")
    else:
        print(curves.table(cfg))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    logs.configure(level="warning")  # the demo's own output tells the story; keep logs quiet
    return run_demo(args.config, args.store)


def _client(s: Settings) -> Client:
    return Client.connect(s)


def cmd_query(args: argparse.Namespace, s: Settings) -> int:
    c = _client(s)
    req: dict[str, Any] = {"ns": args.ns, "text": args.text, "budget": args.budget,
                           "agent": args.agent, "explain": args.explain}
    if args.as_of is not None:
        req["as_of"] = args.as_of
    [body] = c.batch_results(c.submit_batch([req]), args.timeout)
    return print_result(body, args.json)


def cmd_batch(args: argparse.Namespace, s: Settings) -> int:
    c = _client(s)
    try:
        fh = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")  # noqa: SIM115
    except OSError as exc:
        print(f"hivemind: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    reqs: list[QueryRequest | QueryError] = []
    with fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                obj = msgspec.json.decode(line)
                if not isinstance(obj, dict):
                    raise QueryError("invalid_request", "a query must be a JSON object")
                reqs.append(parse_request(obj))
            except msgspec.DecodeError as exc:
                reqs.append(QueryError("invalid_request", f"line {lineno}: malformed JSON: {exc}"))
            except QueryError as exc:
                reqs.append(QueryError(exc.code, f"line {lineno}: {exc.message}"))
    ids = c.submit_batch(reqs)
    failed = 0
    bar = None
    if sys.stderr.isatty():
        bar = tqdm(total=len(ids), unit="q", desc="batch", file=sys.stderr)
    for body in c.batch_results(ids, args.timeout):
        sys.stdout.write(body.decode() + "\n")
        failed += "error" in msgspec.json.decode(body)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    print(f"batch: {len(ids)} queries, {len(ids) - failed} answered, {failed} error(s)",
          file=sys.stderr)
    return 1 if failed else 0
