"""Command bodies of the CLI (one function per command; connections opened here)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import msgspec
import structlog
from rq import SimpleWorker

from events.ingest import ingest
from projections.rebuild import diff_notes, fold_log, live_snapshot, write_back
from projections.state import note_row
from projections.store import read_dead, read_notes
from worker import runtime
from worker.connection import connect
from worker.schedule import acquire_lease, behind, schedule_projection, sweep
from worker.serializer import JSONSerializer
from worker.settings import Settings

log = structlog.get_logger("hivemind.cli")
_json = msgspec.json.Encoder()


def _runtime(s: Settings) -> runtime.Runtime:
    rt = runtime.build(s, connect(s.redis_url))
    runtime.install(rt)
    return rt


def cmd_ingest(args: argparse.Namespace, s: Settings) -> int:
    rt = _runtime(s)
    q = rt.project_queue

    def on_chunk(nss: set[str]) -> None:
        if not args.no_schedule:
            for ns in sorted(nss):
                schedule_projection(rt.store, q, ns)

    def on_error(msg: str) -> None:
        print(f"rejected: {msg}", file=sys.stderr)

    try:
        rep = ingest(rt.store, args.file, skip_invalid=args.skip_invalid, on_error=on_error,
                     progress=sys.stderr.isatty(), on_chunk=on_chunk)
    except FileNotFoundError as exc:
        print(f"hivemind: {exc}", file=sys.stderr)
        return 2
    if rep.rejected and not args.skip_invalid:
        print(f"ingest: {rep.rejected} bad line(s); nothing appended "
              "(fix them, or use --skip-invalid)", file=sys.stderr)
        return 1
    print(f"ingest: appended {rep.appended} event(s) to {len(rep.namespaces)} namespace(s)"
          + (f", rejected {rep.rejected}" if rep.rejected else ""), file=sys.stderr)
    return 1 if rep.rejected else 0


def run_worker(rt: runtime.Runtime, burst: bool) -> int:
    """Sweep for namespaces left behind, then work; in burst mode loop until all projected."""
    queues = [rt.query_queue, rt.project_queue]
    rounds_without_progress = 0
    while True:
        sweep(rt.store, rt.project_queue)
        w = SimpleWorker(queues, connection=rt.rq, serializer=JSONSerializer)
        w.work(burst=burst, with_scheduler=False, logging_level="WARNING")
        if not burst:
            return 0
        late = behind(rt.store)
        if not late:
            log.info("burst_done")
            return 0
        rounds_without_progress += 1
        if rounds_without_progress > 5:
            log.error("burst_stuck", namespaces=late)
            return 1


def cmd_worker(args: argparse.Namespace, s: Settings) -> int:
    return run_worker(_runtime(s), args.burst)


def cmd_notes(args: argparse.Namespace, s: Settings) -> int:
    r = connect(s.redis_url)
    notes = read_notes(r, args.ns)
    out = sys.stdout
    for nid in sorted(notes):
        n = notes[nid]
        if args.json:
            out.write(_json.encode(note_row(n)).decode() + "\n")
        else:
            flag = " (forgotten)" if n.forgotten else ""
            out.write(f"{n.note_id:<24} {n.tier:<9} uses={n.uses:<4} tokens={n.tokens:<7} "
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
        rb = fold_log(r, args.ns, rt.cfg, as_of=args.as_of)
        for nid in sorted(rb.projection.notes):
            sys.stdout.write(_json.encode(note_row(rb.projection.notes[nid])).decode() + "\n")
        return 0
    if args.verify:
        cp, live = live_snapshot(r, args.ns)
        rb = fold_log(r, args.ns, rt.cfg, until=cp)
        diffs = diff_notes(live, rb.projection.notes)
        for d in diffs:
            print(d, file=sys.stderr)
        print(f"replay --verify: {len(live)} live note(s), {len(rb.projection.notes)} rebuilt, "
              f"{len(diffs)} difference(s)")
        return 1 if diffs else 0
    import time

    held = acquire_lease(r, args.ns, s.lock_lease_ms, time.monotonic() + 2 * s.lock_lease_ms / 1000)
    if held is None:
        print(f"hivemind: namespace {args.ns} is busy (projection lease held)", file=sys.stderr)
        return 2
    try:
        rb = fold_log(r, args.ns, rt.cfg)
        write_back(r, args.ns, rb)
    finally:
        held.release()
    print(f"replay: rebuilt {args.ns} from {rb.events} event(s): "
          f"{len(rb.projection.notes)} note(s), {len(rb.projection.dead)} dead letter(s), "
          f"{rb.duplicates} duplicate(s)")
    return 0


def cmd_dead(args: argparse.Namespace, s: Settings) -> int:
    r = connect(s.redis_url)
    for d in read_dead(r, args.ns):
        sys.stdout.write(_json.encode(d).decode() + "\n")
    return 0


def cmd_curves(args: argparse.Namespace) -> int:
    from projections import curves
    from projections.config import load_config

    cfg = load_config(args.config or Settings.from_env().config_path)
    if args.out:
        curves.plot(cfg, args.out)
        print(f"wrote {args.out}")
    else:
        print(curves.table(cfg))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    import importlib

    mod: Any = importlib.import_module(f"worker.bench_{args.what}")
    return int(mod.main(args.rest))


def cmd_demo(args: argparse.Namespace) -> int:
    from worker.demo import run_demo

    return run_demo(args.config)
