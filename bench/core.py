"""``hivemind bench core``: ingest and projection throughput, checked against a pure fold.

Generates a seeded workload (``bench.data``) into a temp JSON Lines file, ingests it
with the real ingest path (validate, append, schedule one projection job per namespace) into
a Redis, drains the projection queue with the burst worker in this process, and compares the
projected notes with (a) a pure in-memory fold of the same file and (b) the expectation the
generator recorded (uses, tiers, forgotten flags, dead letters). Prints MATCH or the
differences (exit 1 on a mismatch).

Without ``--redis-url`` a private ``redis-server`` (AOF on, ``appendfsync everysec`` as in
``deploy/redis.conf``) is started on a free port in a temp dir and stopped at the end. With
``--redis-url`` the bench writes only to namespaces with a fresh random prefix and deletes
their keys afterwards (``--keep`` to keep them), but note that the burst worker also runs any
other job already queued on that server.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from bench.data import Expected, generate
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.events.codec import parse_json_event
from hivemind_memory.projections.ranking.config import RankingConfig
from hivemind_memory.projections.reduce import Projection
from hivemind_memory.projections.state import NoteState, tier_of
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.ingest import ingest
from hivemind_memory.projections.store.readmodel import read_notes

MAX_DIFFS_SHOWN = 20


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB.

    ``VmHWM`` from ``/proc/self/status`` where there is one: Linux keeps ``ru_maxrss`` across
    ``execve``, so a child started from a big parent would report the parent's peak.
    Elsewhere ``resource.getrusage`` (KiB on Linux, bytes on macOS).
    """
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    ru = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return ru / 2**20 if sys.platform == "darwin" else ru / 1024


def stop_processes(procs: Sequence[subprocess.Popen[Any]]) -> None:
    """SIGTERM every process, then wait for each (30 s), killing one that does not exit."""
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def private_redis(appendfsync: str = "everysec") -> Iterator[str]:
    """A throwaway ``redis-server`` on a free port in a temp dir; yields its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server not found on PATH (or pass --redis-url)")
    with tempfile.TemporaryDirectory(prefix="hivemind-bench-redis-") as d:
        port = _free_port()
        proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes", "--appendfsync", appendfsync, "--dir", d,
             "--maxmemory-policy", "noeviction", "--daemonize", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            _wait_ping(port, proc)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def _wait_ping(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 10
    client = redis.Redis(port=port)
    try:
        while True:
            try:
                client.ping()
                return
            except redis.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server on port {port} did not start") from None
                time.sleep(0.02)  # an external process opening its port: nothing to block on
    finally:
        client.close()


def pure_fold(path: Path | str, cfg: RankingConfig) -> dict[str, Projection]:
    """The reference: every line of the file folded in memory, one projection per namespace."""
    projs: dict[str, Projection] = {}
    with open(path, "rb") as fh:
        for lineno, line in enumerate(fh, start=1):
            ev = parse_json_event(line, lineno)
            proj = projs.setdefault(ev.ns, Projection())
            proj.feed([(f"line-{lineno}", ev, line)])
    return projs


@dataclass
class Comparison:
    """Differences between the projected store, the pure fold and the generator's expectation."""

    notes: int = 0
    diffs: list[str] = field(default_factory=list)

    @property
    def match(self) -> bool:
        return not self.diffs


def compare(r: Any, namespaces: list[str], projs: dict[str, Projection], exp: Expected,
            cfg: RankingConfig) -> Comparison:
    """Check the live read model of each namespace against both references."""
    out = Comparison()
    for ns in namespaces:
        live = read_notes(r, ns)
        ref = projs.get(ns, Projection())
        out.notes += len(live)
        for nid in sorted(set(live) | set(ref.notes)):
            a, b = live.get(nid), ref.notes.get(nid)
            if a != b:
                out.diffs.append(f"{ns}/{nid}: live={_brief(a)} pure_fold={_brief(b)}")
        for (ens, nid), uses in sorted(exp.uses.items()):
            if ens != ns:
                continue
            n = live.get(nid)
            want = (uses, exp.tier((ens, nid), cfg.longterm_uses), (ens, nid) in exp.forgotten)
            got = None if n is None else (n.uses, tier_of(n.uses, n.kind, cfg), n.forgotten)
            if got != want:
                out.diffs.append(f"{ns}/{nid}: live (uses, tier, forgotten)={got} "
                                 f"generator={want}")
        extra = {nid for nid in live if (ns, nid) not in exp.uses}
        if extra:
            out.diffs.append(f"{ns}: notes the generator never created: {sorted(extra)[:5]}")
        n_dead, n_seen = r.xlen(keys.dead(ns)), r.scard(keys.seen(ns))
        if n_dead != exp.dead[ns] or n_dead != len(ref.dead):
            out.diffs.append(f"{ns}: dead letters live={n_dead} pure_fold={len(ref.dead)} "
                             f"generator={exp.dead[ns]}")
        if n_seen != exp.distinct_event_ids[ns]:
            out.diffs.append(f"{ns}: seen event_ids live={n_seen} "
                             f"generator={exp.distinct_event_ids[ns]}")
    return out


def _brief(n: NoteState | None) -> str:
    if n is None:
        return "absent"
    return f"(uses={n.uses}, forgotten={n.forgotten}, tokens={n.tokens})"


def ingest_file(rt: Any, path: Path | str, schedule: bool = True) -> int:
    """The real ingest path of ``hivemind ingest``: validate, append, schedule per chunk."""
    from hivemind_memory.api_stub.protocol.jobs import schedule_namespaces

    def on_chunk(nss: set[str]) -> None:
        if schedule:
            schedule_namespaces(rt.store, rt.project_queue, nss)

    def on_error(msg: str) -> None:
        raise RuntimeError(f"generated event rejected: {msg}")

    rep = ingest(rt.store, str(path), on_error=on_error, on_chunk=on_chunk)
    return rep.appended


def drop_namespaces(r: Any, namespaces: list[str]) -> None:
    """Delete every key of the given namespaces (the bench's own, never anyone else's)."""
    for ns in namespaces:
        r.delete(*keys.namespace_keys(ns))
        r.srem(keys.NAMESPACES, ns)


@dataclass
class Figures:
    """What one bench run measured."""

    events: int
    namespaces: list[str]
    file_mib: float
    generate_s: float
    ingest_s: float
    project_s: float
    fold_s: float
    rss_before_ingest_mib: float
    rss_after_ingest_mib: float
    rss_end_mib: float
    worker_exit: int
    comparison: Comparison
    redeliveries: int
    xadd_s: float = 0.0
    """Baseline: the file's lines XADDed raw in pipelines of 1,000 (no parsing)."""
    minimal_s: float = 0.0
    """Baseline: XREADGROUP 2,000 at a time, decode each event, one HSET + XACK per batch."""
    replay_s: float = 0.0
    """``replay`` of every namespace: fold the log, write the read model back."""
    rss_replay_mib: float = 0.0
    filed_notes: int = 0
    """Active notes the projector filed in the near-duplicate lookup."""
    filing_cpu_s: float = 0.0
    """CPU to make their lookup members (``dupindex.expected_members``: analysis, MinHash,
    digests), the projector's share of filing them (the ZADDs ride its commit script)."""


def filing_cpu(r: Any, namespaces: list[str], cfg: RankingConfig) -> tuple[int, float]:
    """The active notes of ``namespaces`` and the CPU seconds (``process_time``) to make their
    near-duplicate lookup members, as the projector does when it files them."""
    from hivemind_memory.projections.ranking.dupsketch import spec_of, term_hash
    from hivemind_memory.projections.store.dupindex import expected_members
    from hivemind_memory.projections.store.readmodel import read_notes

    spec = spec_of(cfg)
    notes = {f"{ns}/{k}": v for ns in namespaces for k, v in read_notes(r, ns).items()}
    term_hash.cache_clear()  # as cold as a fresh projector
    t = time.process_time()
    expected_members(notes, spec)
    return sum(st.active for st in notes.values()), time.process_time() - t


def xadd_baseline(r: Any, path: Path, prefix: str) -> float:
    """Seconds to XADD every line of ``path`` as it is, pipelined by 1,000 (one stream)."""
    key = f"{keys.PREFIX}:{{{prefix}-xadd}}:events"
    t = time.perf_counter()
    with open(path, "rb") as fh:
        p = r.pipeline(transaction=False)
        for n, line in enumerate(fh, start=1):
            p.xadd(key, {b"d": line})
            if n % 1000 == 0:
                p.execute()
        p.execute()
    secs = time.perf_counter() - t
    r.delete(key)
    return secs


def minimal_projection(r: Any, namespaces: list[str], prefix: str) -> float:
    """Seconds for the smallest projector one could write: XREADGROUP a batch, decode every
    event, write one HSET (event id -> note id) and XACK, until the streams are drained."""
    from hivemind_memory.events.codec import decode_event

    group = f"{prefix}-minimal"
    out = {ns: f"{keys.PREFIX}:{{{ns}}}:minimal" for ns in namespaces}
    for ns in namespaces:
        r.xgroup_create(keys.stream(ns), group, id="0")
    t = time.perf_counter()
    for ns in namespaces:
        while True:
            got = r.xreadgroup(group, "c", {keys.stream(ns): ">"}, count=2000)
            if not got or not got[0][1]:
                break
            entries = got[0][1]
            mapping = {}
            for _id, fields in entries:
                ev = decode_event(fields[b"d"])
                mapping[ev.event_id] = getattr(ev, "note_id", "")
            p = r.pipeline(transaction=True)
            p.hset(out[ns], mapping=mapping)
            p.xack(keys.stream(ns), group, *[e[0] for e in entries])
            p.execute()
    secs = time.perf_counter() - t
    for ns in namespaces:
        r.xgroup_destroy(keys.stream(ns), group)
        r.delete(out[ns])
    return secs


def replay_all(r: Any, namespaces: list[str]) -> float:
    """Seconds to rebuild every namespace from its log and write it back (``replay``)."""
    from hivemind_memory.projections.store.rebuild import fold_log, write_back

    t = time.perf_counter()
    for ns in namespaces:
        if not write_back(r, ns, fold_log(r, ns)):
            raise RuntimeError(f"replay of {ns} did not write back")
    return time.perf_counter() - t


def run(redis_url: str, n_events: int, n_namespaces: int = 3, seed: int = 7,
        batch_size: int | None = None, workdir: Path | None = None,
        prefix: str = "bench", keep: bool = False) -> Figures:
    """Generate, ingest, project, compare (see the module docstring)."""
    from hivemind_memory.projections.store.connection import connect
    from hivemind_memory.worker import runtime
    from hivemind_memory.worker.loop import run_worker

    namespaces = [f"{prefix}-{i}" for i in range(n_namespaces)]
    s = Settings.from_env(redis_url=redis_url, batch_size=batch_size)
    rt = runtime.build(s, connect(s.redis_url))
    previous = runtime._current  # put back afterwards: run() may be called inside a process
    runtime.install(rt)          # that has its own runtime (the tests)
    with tempfile.TemporaryDirectory(prefix="hivemind-bench-", dir=workdir) as d:
        path = Path(d) / "events.jsonl"
        t = time.perf_counter()
        exp = generate(path, n_events, namespaces, seed)
        gen_s = time.perf_counter() - t
        size = path.stat().st_size / 2**20
        try:
            rss0 = peak_rss_mib()
            t = time.perf_counter()
            appended = ingest_file(rt, path)
            ingest_s = time.perf_counter() - t
            rss1 = peak_rss_mib()
            if appended != n_events:
                raise RuntimeError(f"ingest appended {appended} of {n_events} events")
            t = time.perf_counter()
            code = run_worker(rt, burst=True)
            project_s = time.perf_counter() - t
            t = time.perf_counter()
            projs = pure_fold(path, rt.cfg)
            fold_s = time.perf_counter() - t
            cmp = compare(rt.store, namespaces, projs, exp, rt.cfg)
            xadd_s = xadd_baseline(rt.store, path, prefix)
            minimal_s = minimal_projection(rt.store, namespaces, prefix)
            replay_s = replay_all(rt.store, namespaces)
            rss_replay = peak_rss_mib()
            filed, filing_s = filing_cpu(rt.store, namespaces, rt.cfg)
        finally:
            runtime._current = previous
            if not keep:
                drop_namespaces(rt.store, namespaces)
            rt.store.close()
    return Figures(events=n_events, namespaces=namespaces, file_mib=size, generate_s=gen_s,
                   ingest_s=ingest_s, project_s=project_s, fold_s=fold_s,
                   rss_before_ingest_mib=rss0, rss_after_ingest_mib=rss1,
                   rss_end_mib=peak_rss_mib(), worker_exit=code, comparison=cmp,
                   redeliveries=exp.redeliveries, xadd_s=xadd_s, minimal_s=minimal_s,
                   replay_s=replay_s, rss_replay_mib=rss_replay, filed_notes=filed,
                   filing_cpu_s=filing_s)


def print_figures(f: Figures, batch_size: int) -> None:
    """The human-readable report."""
    def rate(seconds: float) -> str:
        return f"{f.events / seconds:,.0f} events/s" if seconds > 0 else "n/a"

    print(f"events            {f.events:,} over {len(f.namespaces)} namespaces "
          f"({f.redeliveries:,} redeliveries), file {f.file_mib:.1f} MiB, "
          f"generated in {f.generate_s:.2f} s")
    print(f"ingest            {f.ingest_s:.2f} s  {rate(f.ingest_s)}  "
          "(one parse per line to a spool + pipelined XADD + scheduling)")
    print(f"  baseline        {f.xadd_s:.2f} s  {rate(f.xadd_s)}  (raw lines, pipelined XADD)"
          f"   ratio {f.xadd_s / f.ingest_s:.2f} x")
    print(f"projection        {f.project_s:.2f} s  {rate(f.project_s)}  "
          f"(burst worker, batch {batch_size}, exit {f.worker_exit})")
    print(f"  baseline        {f.minimal_s:.2f} s  {rate(f.minimal_s)}  "
          f"(XREADGROUP-decode-HSET-XACK loop)   ratio {f.minimal_s / f.project_s:.2f} x")
    print(f"replay            {f.replay_s:.2f} s  {rate(f.replay_s)}  (fold + write back; "
          f"{f.project_s / f.replay_s:.2f} x the projection rate), peak RSS "
          f"{f.rss_replay_mib:.1f} MiB")
    print(f"pure fold         {f.fold_s:.2f} s  {rate(f.fold_s)}  (reference, in memory)")
    if f.filed_notes:
        print(f"dup filing        {f.filing_cpu_s:.2f} s CPU for {f.filed_notes:,} active notes: "
              f"{1000 * f.filing_cpu_s / f.filed_notes:.3f} ms a note (the projector's "
              "near-duplicate lookup members: analysis, MinHash, digests)")
    print(f"peak RSS          {f.rss_before_ingest_mib:.1f} MiB before ingest, "
          f"{f.rss_after_ingest_mib:.1f} MiB after ingest, {f.rss_end_mib:.1f} MiB at the end")
    print(f"notes compared    {f.comparison.notes:,}")
    if f.comparison.match:
        print("MATCH")
        return
    print(f"MISMATCH: {len(f.comparison.diffs)} difference(s)")
    for line in f.comparison.diffs[:MAX_DIFFS_SHOWN]:
        print("  " + line)


def ingest_child(redis_url: str, path: str) -> dict[str, Any]:
    """Ingest a file (no scheduling) in this fresh process; report time and peak RSS."""
    from hivemind_memory.projections.store.connection import connect
    from hivemind_memory.worker import runtime

    s = Settings.from_env(redis_url=redis_url)
    rt = runtime.build(s, connect(redis_url))
    rss0 = peak_rss_mib()
    t = time.perf_counter()
    n = ingest_file(rt, path, schedule=False)
    secs = time.perf_counter() - t
    return {"events": n, "seconds": secs, "rss_before_mib": rss0,
            "rss_after_mib": peak_rss_mib(), "file_mib": os.path.getsize(path) / 2**20}


def rss_check(redis_url: str, n_events: int) -> list[dict[str, Any]]:
    """Ingest N and 4N events, each in a fresh process, and report each one's peak RSS.

    The files are generated here, so a child's peak is the ingest's alone.
    """
    from hivemind_memory.projections.store.connection import connect

    out = []
    with tempfile.TemporaryDirectory(prefix="hivemind-bench-") as d:
        for mult in (1, 4):
            prefix = f"rss{mult}-{uuid.uuid4().hex[:6]}"
            nss = [f"{prefix}-{i}" for i in range(3)]
            path = Path(d) / f"rss{mult}.jsonl"
            generate(path, n_events * mult, nss, seed=11)
            cmd = [sys.executable, "-m", "bench.core", "--ingest-child", str(path),
                   "--redis-url", redis_url]
            try:
                done = subprocess.run(cmd, check=True, capture_output=True, text=True,
                                      env={**os.environ,
                                           "PYTHONPATH": os.pathsep.join(sys.path)})
                out.append(json.loads(done.stdout.strip().splitlines()[-1]))
            finally:
                r = connect(redis_url)
                drop_namespaces(r, nss)
                r.close()
            path.unlink()
    return out


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="hivemind bench core", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=100_000, help="events to generate")
    ap.add_argument("--namespaces", type=int, default=3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--batch-size", type=int, default=None,
                    help="projection batch (default: $HIVEMIND_BATCH_SIZE or 2000)")
    ap.add_argument("--redis-url", default=None,
                    help="use this Redis (default: a private redis-server, stopped at the end)")
    ap.add_argument("--keep", action="store_true", help="keep the bench's keys afterwards")
    ap.add_argument("--rss-check", action="store_true",
                    help="also ingest N and 4N events in fresh processes and print their "
                         "peak RSS (ingest memory must not grow with the file)")
    ap.add_argument("--verbose", action="store_true", help="log every projection batch")
    ap.add_argument("--ingest-child", default=None, help=argparse.SUPPRESS)
    return ap


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``hivemind bench core``."""
    from hivemind_memory.worker.ops import logs

    args = _parser().parse_args(argv)
    logs.configure(level="info" if args.verbose else "warning")
    if args.ingest_child is not None:
        print(json.dumps(ingest_child(args.redis_url, args.ingest_child)))
        return 0
    if args.events < 1 or args.namespaces < 1:
        print("hivemind bench core: --events and --namespaces must be >= 1", file=sys.stderr)
        return 2
    batch = Settings.from_env(batch_size=args.batch_size).batch_size
    if args.redis_url is not None:
        prefix = f"bench-{uuid.uuid4().hex[:8]}"
        figs = run(args.redis_url, args.events, args.namespaces, args.seed, args.batch_size,
                   prefix=prefix, keep=args.keep)
        url = args.redis_url
        print(f"redis             {url} (namespaces {prefix}-*)")
        print_figures(figs, batch)
        rss = rss_check(url, args.events) if args.rss_check else []
    else:
        with private_redis() as url:
            print(f"redis             private redis-server at {url} "
                  "(appendonly yes, appendfsync everysec)")
            figs = run(url, args.events, args.namespaces, args.seed, args.batch_size)
            print_figures(figs, batch)
            rss = rss_check(url, args.events) if args.rss_check else []
    for row in rss:
        print(f"ingest-only       {row['events']:>9,} events ({row['file_mib']:.1f} MiB file): "
              f"{row['events'] / row['seconds']:,.0f} events/s, peak RSS "
              f"{row['rss_before_mib']:.1f} MiB before, {row['rss_after_mib']:.1f} MiB after")
    return 0 if figs.comparison.match and figs.worker_exit == 0 else 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
