"""Command bodies of the CLI (one function per command; connections opened here)."""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

import msgspec
import structlog
from redis.exceptions import RedisError

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.jobs import parse_shards
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.events.errors import AppendFailed
from hivemind_memory.events.positions import Position
from hivemind_memory.events.schema import ID_PATTERN
from hivemind_memory.projections.ranking import curves
from hivemind_memory.projections.ranking.config import DEFAULT, RankingConfig, load_config
from hivemind_memory.projections.ranking.dupsketch import spec_of
from hivemind_memory.projections.state import note_row
from hivemind_memory.projections.store.connection import connect, connect_queue
from hivemind_memory.projections.store.dupindex import lookup_diffs
from hivemind_memory.projections.store.erasure import erasure_counts
from hivemind_memory.projections.store.ingest import IngestReport, ingest
from hivemind_memory.projections.store.lease import acquire_lease
from hivemind_memory.projections.store.log import length as log_length
from hivemind_memory.projections.store.log import namespaces
from hivemind_memory.projections.store.rebuild import (
    LeaseLost,
    diff_notes,
    fold_log,
    live_snapshot,
    write_back,
)
from hivemind_memory.projections.store.types import QueueConn
from hivemind_memory.worker import runtime
from hivemind_memory.worker.cli.args import (
    fail,
    progress,
    warn_unknown_namespaces,
    write_port_file,
)
from hivemind_memory.worker.cli.demo import run_demo
from hivemind_memory.worker.cli.demo_data import sample_events
from hivemind_memory.worker.cli.output import print_status, redis_message
from hivemind_memory.worker.loop import run_worker
from hivemind_memory.worker.ops import logs, metrics
from hivemind_memory.worker.projector import ensure_projected
from hivemind_memory.worker.service import WorkerService

log = structlog.get_logger("hivemind.cli")
_json = msgspec.json.Encoder()


def _queue_conn(s: Settings) -> QueueConn | None:
    """RQ's own connection when it is not the store (``--rq-url``)."""
    return connect_queue(s.rq_url) if s.rq_url is not None else None


def _runtime(s: Settings) -> runtime.Runtime:
    rt = runtime.build(s, connect(s.redis_url), _queue_conn(s))
    runtime.install(rt)
    return rt


def cmd_ingest(args: argparse.Namespace, s: Settings) -> int:
    rt = _runtime(s)
    client = Client(rt.store, rt.rq, settings=s)

    def on_error(msg: str) -> None:
        print(f"rejected: {msg}", file=sys.stderr)

    rep = IngestReport()
    try:  # too few replicas acknowledging is a StoreError, reported by main (exit 2)
        ingest(rt.store, args.file, skip_invalid=args.skip_invalid, on_error=on_error,
               progress=sys.stderr.isatty(),
               on_chunk=None if args.no_schedule else client.schedule, report=rep,
               appender=client.appender, not_after=client.not_after())
    except OSError as exc:  # missing, a directory, not readable
        return fail(f"cannot read {args.file}: {exc.strerror or exc}")
    except AppendFailed as exc:
        return fail(f"appended {rep.appended} event(s), then the store failed: {exc}; "
                    "re-running the whole file is safe (repeated event_ids are applied once)")
    except RedisError as exc:
        return fail(f"Redis error after appending {rep.appended} event(s): "
                    f"{redis_message(exc)}; re-running the whole file is safe (repeated "
                    "event_ids are applied once)")
    bad = rep.rejected - len(rep.conflicts)
    if bad and not args.skip_invalid:
        print(f"ingest: {bad} bad line(s); nothing appended "
              "(fix them, or use --skip-invalid)", file=sys.stderr)
        return 1
    print(f"ingest: appended {rep.appended} event(s) to {len(rep.namespaces)} namespace(s)"
          + (f", rejected {rep.rejected}" if rep.rejected else "")
          + (f" ({len(rep.conflicts)} event_id conflict(s): "
             + ", ".join(repr(i) for i in rep.conflicts[:10])
             + (", ..." if len(rep.conflicts) > 10 else "") + ")" if rep.conflicts else ""),
          file=sys.stderr)
    return 1 if rep.rejected else 0


def cmd_worker(args: argparse.Namespace, s: Settings) -> int:
    shards = parse_shards(args.shards, s.shards)  # a bad spec: ConfigError, exit 2
    runtime.single_threaded_blas()
    rt = _runtime(s)
    if args.metrics_port is not None:
        metrics.watch_store(rt.store, rt.rq)
        try:
            port = metrics.serve_metrics(args.metrics_port, args.metrics_host)
        except OSError as exc:
            return fail(f"cannot serve metrics on {args.metrics_host}:{args.metrics_port}: "
                        f"{exc.strerror or exc}")
        log.info("metrics_serving", host=args.metrics_host, port=port)
        if args.metrics_port_file:
            write_port_file(args.metrics_port_file, port)
    return run_worker(rt, args.burst, idle_s=args.sweep_every, shards=shards)


def client_of(s: Settings) -> Client:
    """A client of the store the settings name (the read commands' door to it)."""
    return Client(connect(s.redis_url), _queue_conn(s), settings=s)


def service_of(c: Client, cfg: RankingConfig = DEFAULT) -> WorkerService:
    """The worker's views over ``c``'s store under ``cfg`` (``status`` and ``dead`` read no
    ranking config, so they leave it at the default instead of loading one)."""
    return WorkerService(c.store, c.rq, cfg, c.settings.shards)


def cmd_status(args: argparse.Namespace, s: Settings) -> int:
    st = service_of(client_of(s)).status(datetime.now(UTC))
    if args.json:
        sys.stdout.write(_json.encode(st).decode() + "\n")
        return 0
    print_status(st)
    return 0


def cmd_notes(args: argparse.Namespace, s: Settings) -> int:
    client = client_of(s)
    client.config()  # a bad config file is named before anything is read
    warn_unknown_namespaces([args.ns], client.namespaces())
    notes = client.notes(args.ns)
    out = sys.stdout
    for n in notes:
        if args.json:
            out.write(_json.encode(n).decode() + "\n")
        else:
            flag = " (forgotten)" if n.forgotten else ""
            out.write(f"{n.note_id:<24} {n.tier:<9} uses={n.uses:<4} tokens={n.tokens:<7} "
                      f"{n.scope:<7} {n.kind:<7} {n.agent:<16} "
                      f"{n.created_at.isoformat()}{flag}\n")
    if not args.json:
        out.write(f"{len(notes)} note(s) in {args.ns}\n")
    return 0


FOLD_CHUNK = 5000
"""Entries per chunk of ``fold_log`` (its default): one progress tick."""


@contextmanager
def _fold_bar(total: int) -> Iterator[Callable[[], None]]:
    """A progress bar over a log fold (on a terminal only); yields the per-chunk tick."""
    bar = progress(total, "replay")

    def tick() -> None:
        bar.update(FOLD_CHUNK)

    try:
        yield tick
    finally:
        bar.close()


def cmd_replay(args: argparse.Namespace, s: Settings) -> int:
    rt = _runtime(s)
    r = rt.store
    if args.verify and args.as_of is not None:
        return fail("--verify compares the live state; it cannot be combined with --as-of")
    warn_unknown_namespaces([args.ns], namespaces(r))
    total = log_length(r, args.ns)
    if args.as_of is not None:
        with _fold_bar(total) as tick:
            rb = fold_log(r, args.ns, as_of=args.as_of, on_chunk=tick)
        for nid in sorted(rb.projection.notes):
            sys.stdout.write(
                _json.encode(note_row(rb.projection.notes[nid], rt.cfg)).decode() + "\n")
        return 0
    if args.verify:
        cp, live = live_snapshot(r, args.ns)
        with _fold_bar(total) as tick:
            rb = fold_log(r, args.ns, until=cp, on_chunk=tick, file_digests=True)
        diffs = diff_notes(live, rb.projection.notes)
        diffs += lookup_diffs(r, args.ns, cp, rb.projection.notes, spec_of(rt.cfg))
        for d in diffs:
            print(d, file=sys.stderr)
        print(f"replay --verify: {len(live)} live note(s), {len(rb.projection.notes)} rebuilt, "
              f"{len(diffs)} difference(s)")
        return 1 if diffs else 0
    held = acquire_lease(r, args.ns, s.lock_lease_ms, time.monotonic() + 2 * s.lock_lease_ms / 1000)
    if held is None:
        return fail(f"namespace {args.ns} is busy (projection lease held)")
    def renew() -> None:
        if not held.renew():
            raise LeaseLost(f"namespace {args.ns!r}: projection lease lost during replay")

    try:
        for _attempt in range(5):
            with _fold_bar(total) as tick:
                def each_chunk() -> None:
                    tick()
                    renew()
                rb = fold_log(r, args.ns, on_chunk=each_chunk, file_digests=True)
            renew()
            if write_back(r, args.ns, rb, held.token, now_ms=int(time.time() * 1000),
                          spec=spec_of(rt.cfg)):
                break
        else:
            return fail(f"namespace {args.ns} kept moving; replay wrote nothing")
    finally:
        held.release()
    print(f"replay: rebuilt {args.ns} from {rb.events} event(s): "
          f"{len(rb.projection.notes)} note(s), {len(rb.projection.dead)} dead letter(s), "
          f"{rb.duplicates} duplicate(s)")
    return 0


def cmd_erase(args: argparse.Namespace, s: Settings) -> int:
    """Erase notes as the operator (``as_admin``), project the erasure here if no worker has
    the lease, and redact their content everywhere; prints what this call rewrote and the
    copies redacted in all (whoever redacted them)."""
    for nid in args.note_ids:
        if not re.fullmatch(ID_PATTERN, nid):
            return fail(f"note id {nid!r} must match {ID_PATTERN}", 2)
    rt = _runtime(s)
    c = Client(rt.store, rt.rq, settings=s)

    def catch_up(ns: str, target: Position, timeout_s: float) -> None:
        ensure_projected(rt.store, ns, target, s, timeout_s)

    got = c.erase(args.ns, args.note_ids, catch_up=catch_up, timeout_s=args.timeout)
    red = got.redaction
    if args.json:
        print(_json.encode({"ns": args.ns, "erased": red.erased, "event_ids": got.event_ids,
                            "redacted": erasure_counts(red),
                            "redacted_in_all": got.in_all}).decode())
        return 0
    for nid in red.erased:
        print(f"erased {nid}")

    def listed(counts: dict[str, int]) -> str:
        return ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in counts.items())

    print(f"erase: {len(red.erased)} note(s) of {args.ns} erased; rewritten by this call: "
          f"{listed(erasure_counts(red))}; redacted in all: {listed(got.in_all)}")
    return 0


def cmd_dead(args: argparse.Namespace, s: Settings) -> int:
    client = client_of(s)
    warn_unknown_namespaces([args.ns], client.namespaces())
    got = service_of(client).dead(args.ns, args.limit)
    for d in got.dead:
        if args.json:
            sys.stdout.write(_json.encode(d).decode() + "\n")
        else:
            sys.stdout.write(f"{d.entry:<18} {d.reason}\n")
    more = got.total - got.shown
    summary = (f"dead: {got.shown} of {got.total} dead letter(s) of {args.ns}"
               + (f" (truncated: {more} more; use --limit {got.total})" if more > 0 else ""))
    print(summary, file=sys.stderr if args.json else sys.stdout)
    return 0


def cmd_curves(args: argparse.Namespace) -> int:
    cfg = load_config(args.config or Settings.from_env().config_path)
    if args.out:
        try:
            curves.plot(cfg, args.out)
        except ImportError as exc:
            return fail(str(exc))
        print(f"wrote {args.out}")
    else:
        print(curves.table(cfg))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    if args.print_events:
        for e in sample_events():
            sys.stdout.write(_json.encode(e).decode() + "\n")
        return 0
    logs.configure(level="warning")  # the demo's own output tells the story; keep logs quiet
    return run_demo(args.config, as_json=args.json, store_url=args.store)
