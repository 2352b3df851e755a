"""``python -m bench shards``: what spreading namespaces over shards does to the workers'
memory and to the latency of a Zipf stream of queries, beside one worker and beside two
workers that both serve every namespace (``HIVEMIND_SHARDS=1``, as before shards).

For each layout, on a freshly flushed private Redis holding the same notes (``--namespaces``
namespaces of ``--notes`` notes, 10-300 words each from a Zipf vocabulary):

1. the workers are started (``hivemind worker``, with ``--shards K`` where the layout has
   shards) and the notes projected; each worker answers one query of a one-note warm-up
   namespace of its own shard, so the base RSS counts the query code it loads;
2. base RSS of each worker is read from its heartbeat;
3. ``--queries`` queries, their namespaces drawn from a Zipf law (exponent ``--zipf``) over the
   namespaces, are asked one after the other by ``--clients`` client threads (``Client.query``,
   end to end), from cold indexes: latency p50 / p90 / max;
4. from the heartbeats again: each worker's RSS, the namespaces it holds; index memory = RSS
   after minus base RSS; the workers' CPU seconds over the query stream (``/proc``).

Layouts: ``1 worker``, ``2 workers, 2 shards`` (``--shards 0`` and ``--shards 1``) and ``2
workers, 1 shard`` (both serve everything: each ends up loading most namespaces). The targets
(issue 33): the sum of index memory with 2 sharded workers within 1.2 x of one worker's, and
their Zipf p90 no worse than one worker's. Everything runs on this machine (workers, Redis and
this process share its cores): compare the rows of one run.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bench.core import private_redis, stop_processes
from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol import jobs
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.projections.store.connection import connect
from hivemind_memory.projections.store.log import namespaces
from hivemind_memory.projections.store.readmodel import lagging
from hivemind_memory.worker.ops.heartbeat import WorkerBeat, read_beats

POLL_S = 0.05
"""How often the bench looks at the heartbeats and the projection (it has nothing to block
on in another process)."""


@dataclass
class Layout:
    """Workers and the shards each is given."""

    name: str
    shards: int
    given: list[str]
    """One ``--shards`` spec per worker."""


LAYOUTS = [Layout("1 worker", 1, ["all"]), Layout("2 workers, 2 shards", 2, ["0", "1"]),
           Layout("2 workers, 1 shard", 1, ["all", "all"])]


@dataclass
class Row:
    layout: str
    workers: int
    held: list[int]
    """Namespaces each worker holds an index of, at the end."""
    index_mib: list[float]
    """Each worker's RSS at the end minus its base."""
    rss_mib: list[float]
    p50_ms: float
    p90_ms: float
    max_ms: float
    worker_cpu_s: float


def _until(cond: Any, what: str, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(POLL_S)


def _cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _notes(n_ns: int, n_notes: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(20_000)]
    weights = [1 / (i + 1) for i in range(len(vocab))]
    out = []
    for k in range(n_ns):
        for i in range(n_notes):
            words = rng.choices(vocab, weights, k=rng.randint(10, 300))
            out.append({"type": "note.created", "event_id": f"c{i}", "ns": f"ns{k:03d}",
                        "note_id": f"n{i}", "agent": "a", "at": "2026-11-01T00:00:00Z",
                        "text": " ".join(words)})
    return out


def _warmup_ns(shard: int, shards: int) -> str:
    return next(f"warm{i}" for i in range(10_000) if jobs.shard_of(f"warm{i}", shards) == shard)


@contextmanager
def _workers(layout: Layout, url: str) -> Iterator[list[subprocess.Popen[bytes]]]:
    env = {**os.environ, "HIVEMIND_REDIS_URL": url, "HIVEMIND_SHARDS": str(layout.shards)}
    procs = [subprocess.Popen([sys.executable, "-m", "hivemind_memory.worker.cli", "worker",
                               "--shards", spec], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for spec in layout.given]
    try:
        yield procs
    finally:
        stop_processes(procs)


def _beats(rq: Any, pids: list[int], after: datetime) -> dict[int, WorkerBeat]:
    """The heartbeat of each worker pid, once every one has beaten after ``after``."""
    got: dict[int, WorkerBeat] = {}

    def fresh() -> bool:
        got.clear()
        got.update({b.pid: b for b in read_beats(rq) if b.beat_at > after})
        return all(p in got for p in pids)

    _until(fresh, "a fresh heartbeat of every worker", 60)
    return got


def measure(layout: Layout, url: str, events: list[dict[str, Any]], nss: list[str],
            n_queries: int, zipf: float, clients: int, seed: int) -> Row:
    store = connect(url)
    store.flushall()
    c = Client(store, settings=Settings(redis_url=url, shards=layout.shards))
    warm = [_warmup_ns(k, layout.shards) for k in range(layout.shards)]
    for i in range(0, len(events), 2000):
        c.append(events[i:i + 2000])
    c.append([{"type": "note.created", "event_id": "w", "ns": ns, "note_id": "w", "agent": "a",
               "at": "2026-11-01T00:00:00Z", "text": "warm up"} for ns in warm])
    with _workers(layout, url) as procs:
        pids = [p.pid for p in procs]
        _until(lambda: not lagging(store, namespaces(store)), "the projection", 900)
        c._served = None
        _until(lambda: not c.unserved_shards(), "every shard served", 60)
        for ns in warm:  # every worker of a shard once (two on one shard: until both did)
            for _ in range(4 * len(procs)):
                c.query(ns, "warm", 10, timeout=120)
        base = _beats(store, pids, datetime.now(UTC))
        rng = random.Random(seed)
        weights = [1 / (i + 1) ** zipf for i in range(len(nss))]
        asks = rng.choices(nss, weights, k=n_queries)
        lat: list[float] = []
        lock = threading.Lock()
        cpu0 = sum(_cpu(p) for p in pids)

        def ask(part: list[str]) -> None:
            mine = Client(connect(url), settings=Settings(redis_url=url, shards=layout.shards))
            for j, ns in enumerate(part):
                t0 = time.perf_counter()
                res = mine.query(ns, f"w{j % 50} w{(7 * j) % 300}", 300, timeout=300)
                took = time.perf_counter() - t0
                if "error" in res:
                    raise RuntimeError(f"{ns}: {res['error']}")
                with lock:
                    lat.append(took)

        threads = [threading.Thread(target=ask, args=(asks[k::clients],))
                   for k in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        cpu = sum(_cpu(p) for p in pids) - cpu0
        end = _beats(store, pids, datetime.now(UTC))
    lat.sort()
    mib = 2 ** 20
    return Row(layout.name, len(pids),
               held=[len([n for n in end[p].namespaces if n in nss]) for p in pids],
               index_mib=[(end[p].rss_bytes - base[p].rss_bytes) / mib for p in pids],
               rss_mib=[end[p].rss_bytes / mib for p in pids],
               p50_ms=1000 * statistics.median(lat),
               p90_ms=1000 * lat[int(0.9 * (len(lat) - 1))], max_ms=1000 * lat[-1],
               worker_cpu_s=cpu)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench shards", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--namespaces", type=int, default=50)
    ap.add_argument("--notes", type=int, default=400, help="notes per namespace")
    ap.add_argument("--queries", type=int, default=600)
    ap.add_argument("--zipf", type=float, default=1.1, help="exponent of the namespace draw")
    ap.add_argument("--clients", type=int, default=2, help="client threads asking at once")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--layouts", default="all",
                    help="comma list of 0 (1 worker), 1 (2 sharded), 2 (2 unsharded)")
    args = ap.parse_args(argv)
    chosen = LAYOUTS if args.layouts == "all" else [LAYOUTS[int(i)]
                                                      for i in args.layouts.split(",")]
    events = _notes(args.namespaces, args.notes, args.seed)
    nss = sorted({e["ns"] for e in events})
    print(f"{args.namespaces} namespaces x {args.notes} notes, {args.queries} queries from "
          f"{args.clients} clients, Zipf {args.zipf:g} over the namespaces; "
          f"load average {os.getloadavg()[0]:.1f}; {datetime.now(UTC):%Y-%m-%d %H:%M} UTC")
    print(f"{'layout':<22} {'held':>10} {'index MiB':>14} {'sum':>6} {'RSS MiB':>12} "
          f"{'p50 ms':>7} {'p90 ms':>7} {'max ms':>7} {'worker CPU s':>12}")
    rows: list[Row] = []
    with private_redis() as url:
        for layout in chosen:
            row = measure(layout, url, events, nss, args.queries, args.zipf, args.clients,
                          args.seed)
            rows.append(row)
            print(f"{row.layout:<22} {'/'.join(map(str, row.held)):>10} "
                  f"{'/'.join(f'{m:.0f}' for m in row.index_mib):>14} "
                  f"{sum(row.index_mib):>6.0f} {'/'.join(f'{m:.0f}' for m in row.rss_mib):>12} "
                  f"{row.p50_ms:>7.1f} {row.p90_ms:>7.1f} {row.max_ms:>7.1f} "
                  f"{row.worker_cpu_s:>12.2f}", flush=True)
    by = {r.layout: r for r in rows}
    one, two = by.get("1 worker"), by.get("2 workers, 2 shards")
    if one is not None and two is not None:
        mem = sum(two.index_mib) / sum(one.index_mib)
        print(f"2 sharded workers / 1 worker: index memory {mem:.2f} x "
              f"(target <= 1.2), Zipf p90 {two.p90_ms / one.p90_ms:.2f} x (target <= 1), "
              f"worker CPU {two.worker_cpu_s / one.worker_cpu_s:.2f} x")
    return 0
