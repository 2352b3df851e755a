"""``python -m bench scale memory``: a worker's memory against the namespaces it serves, with
and without a memory budget, and the cold and warm query latency that comes with it.

1. A private ``redis-server``; ``--namespaces`` namespaces of ``--notes`` notes each (the
   Zipf corpus of ``bench.query``: lognormal lengths, uses, scratch, private and forgotten
   notes) appended and projected by a burst worker.
2. The index memory of one namespace of ``--notes`` notes and of 100 notes, measured in this
   process as a worker measures it (``projections.ranking.footprint``), full build and loaded
   from its snapshot.
3. For each ``--budgets`` entry (MiB; 0: no budget) and each ``--workers`` count: fresh
   ``hivemind worker`` processes; a first query to a one-note namespace gives the process's
   base RSS (libraries, the embedder's model); then one query to every namespace in turn
   (cold: its index is loaded, from the snapshot once one exists) and a second one at once
   (warm), the workers' RSS read after each (``VmRSS``) and their peak at the end
   (``VmHWM``), the index memory they report in their heartbeats, and the CPU seconds they
   spent.

The first row builds every namespace's snapshot (a full build: tokenize, embed); later rows
load from the snapshots. Latencies are wall time seen by the client (submit to result) on a
shared machine: compare them within one run.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

import redis

from bench.core import private_redis, stop_processes
from bench.query import Corpus, generate_events, pct
from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.messages import parse_request
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.projections.ranking.config import RankingConfig
from hivemind_memory.projections.ranking.embedders import embedder_for
from hivemind_memory.projections.ranking.footprint import index_bytes
from hivemind_memory.projections.ranking.index import NamespaceIndex
from hivemind_memory.projections.store.connection import connect
from hivemind_memory.projections.store.index_loader import load_index, read_snapshot
from hivemind_memory.worker.engine import run_rank
from hivemind_memory.worker.ops.heartbeat import read_beats

MIB = 1 << 20
BASE_NS = "base"
"""A one-note namespace: the first query of every worker goes there (its RSS then is the
process's base)."""


@dataclass
class Run:
    """One budget x workers configuration."""

    budget_mib: int
    workers: int
    base_mib: float
    base_peak_mib: float
    """The largest ``VmHWM`` of a worker after its base query (start-up and the embedder's
    model included)."""
    rss_at: dict[int, float]
    """Namespaces served -> the workers' RSS summed (MiB)."""
    peak_mib: float
    """The largest ``VmHWM`` of a worker (its peak RSS over its life)."""
    index_mib: float
    """Index memory the workers report at the end, summed."""
    kept_mib: float
    """What the ranking rules keep outside the indexes (``ranker.KeptTexts``), counted in the
    budget, as the workers report it at the end, summed."""
    held: int
    evictions: int
    cold_ms: list[float]
    warm_ms: list[float]
    cpu_s: float


def _status(pid: int, field: str) -> float:
    """A ``/proc/PID/status`` figure in MiB (``VmRSS``, ``VmHWM``)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} for pid {pid}")


def _cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def _workers(n: int, url: str, budget: int, rq: redis.Redis) -> Iterator[list[int]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIVEMIND_")}
    env.update(HIVEMIND_REDIS_URL=url, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    args = ["--memory-budget", str(budget)] if budget else ["--memory-budget", "1000000"]
    procs = [subprocess.Popen([sys.executable, "-m", "hivemind_memory.worker.cli", "worker",
                               *args], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for _ in range(n)]
    try:
        deadline = time.monotonic() + 120
        while len(read_beats(rq)) < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{n} workers did not start")
            time.sleep(0.05)  # external processes: nothing to block on
        yield [p.pid for p in procs]
    finally:
        stop_processes(procs)


def _ask(c: Client, ns: str, text: str) -> float:
    t = time.perf_counter()
    res = c.query(ns, text, 300, timeout=600)
    if "error" in res:
        raise SystemExit(f"query of {ns} failed: {res['error']}")
    return (time.perf_counter() - t) * 1000


def measure(url: str, nss: list[str], budget: int, n_workers: int, marks: list[int],
            corpus: Corpus) -> Run:
    r = connect(url)
    rq = redis.Redis.from_url(url)
    c = Client(r, settings=Settings(redis_url=url))
    rng = random.Random(5)
    with _workers(n_workers, url, budget, rq) as pids:
        for _ in range(n_workers * 3):  # every worker has taken a query (one job each)
            _ask(c, BASE_NS, "anything")
        base = sum(_status(p, "VmRSS") for p in pids)
        base_peak = max(_status(p, "VmHWM") for p in pids)
        cpu0 = sum(_cpu(p) for p in pids)
        rss_at: dict[int, float] = {}
        cold: list[float] = []
        warm: list[float] = []
        for i, ns in enumerate(nss, 1):
            cold.append(_ask(c, ns, corpus.query(rng, 100)))
            warm.append(_ask(c, ns, corpus.query(rng, 100)))
            if i in marks:
                rss_at[i] = sum(_status(p, "VmRSS") for p in pids)
        cpu = sum(_cpu(p) for p in pids) - cpu0
        peak = max(_status(p, "VmHWM") for p in pids)
        time.sleep(2.5)  # one heartbeat interval: the workers' last reports
        mem = [b.memory for b in read_beats(rq) if b.memory is not None]
    r.close()
    rq.close()
    return Run(budget, n_workers, base, base_peak, rss_at, peak, sum(m.held for m in mem) / MIB,
               sum(m.outside for m in mem) / MIB, sum(m.namespaces for m in mem),
               sum(m.evictions for m in mem), cold, warm, cpu)


def index_sizes(url: str, nss: dict[int, str], corpus: Corpus) -> None:
    """Index memory of one namespace per size, as a worker measures it: built, loaded from
    its snapshot, and after 20 queries (their caches: english stems, layouts, texts)."""
    r = connect(url)
    cfg = RankingConfig()
    emb = embedder_for(cfg.embedder)
    rng = random.Random(3)
    for n, ns in sorted(nss.items()):
        built = NamespaceIndex(ns)
        load_index(r, built, embedder=emb)
        loaded = NamespaceIndex(ns)
        if not read_snapshot(r, loaded):
            raise RuntimeError(f"no snapshot of {ns}")
        loaded.embed_missing(emb)
        at_load = index_bytes(loaded)
        for i in range(20):
            req = parse_request({"ns": ns, "text": corpus.query(rng, 100), "budget": 300,
                                 "agent": "agent1" if i % 2 else ""})
            run_rank(loaded, req, cfg, datetime.now(UTC), embedder=emb)
        print(f"index memory of a {n:,}-note namespace: {index_bytes(built) / 1024:,.0f} KiB "
              f"built, {at_load / 1024:,.0f} KiB loaded from its snapshot, "
              f"{index_bytes(loaded) / 1024:,.0f} KiB after 20 queries "
              f"({len(loaded.cols.terms):,} terms, derived vectors "
              f"{index_bytes(loaded.derived) / 1024:,.0f} KiB, texts "
              f"{index_bytes(loaded.cols.texts) / 1024:,.0f} KiB, term dictionary "
              f"{index_bytes(loaded.cols.terms) / 1024:,.0f} KiB, english stems "
              f"{index_bytes(loaded.cols._stems) / 1024:,.0f} KiB)")
    r.close()


def _fill(url: str, nss: list[str], notes: int, corpus: Corpus) -> None:
    from hivemind_memory.worker import runtime
    from hivemind_memory.worker.loop import run_worker

    r = connect(url)
    s = Settings(redis_url=url)
    c = Client(r, settings=s)
    now = datetime.now(UTC).replace(microsecond=0)
    t = time.perf_counter()
    for k, ns in enumerate(nss):
        n = 100 if ns == "small" else 1 if ns == BASE_NS else notes
        generate_events(ns, n, corpus, random.Random(k), now, c.append)
    append_s = time.perf_counter() - t
    t = time.perf_counter()
    rt = runtime.build(s, r)
    if run_worker(rt, burst=True) != 0:
        raise RuntimeError("the burst worker failed")
    print(f"{len(nss) - 2} namespaces x {notes:,} notes (+ one of 100, one of 1) appended in "
          f"{append_s:.0f} s, projected in {time.perf_counter() - t:.0f} s")
    r.close()


def report(run: Run, n_ns: int) -> None:
    what = f"budget {run.budget_mib} MiB" if run.budget_mib else "no budget"
    rss = ", ".join(f"{k}: {v:,.0f}" for k, v in sorted(run.rss_at.items()))
    ok = ""
    if run.budget_mib:
        limit = run.budget_mib + run.base_peak_mib
        ok = (f"; {'<=' if run.peak_mib <= limit else '>'} budget + the base's peak "
              f"({run.budget_mib:,} + {run.base_peak_mib:,.0f} MiB)")
    print(f"{what}, {run.workers} worker(s): base RSS {run.base_mib:,.0f} MiB; RSS after n "
          f"namespaces served (MiB, all workers): {rss}; peak RSS of a worker "
          f"{run.peak_mib:,.0f} MiB{ok}")
    print(f"  index memory held at the end {run.index_mib:,.1f} MiB in {run.held} indexes "
          f"(+ {run.kept_mib:,.1f} MiB of kept word sets and passages; {run.evictions} "
          f"evicted); worker CPU {run.cpu_s:,.1f} s for {2 * n_ns} queries")
    print(f"  cold query (index loaded): p50 {statistics.median(run.cold_ms):,.1f} ms, p90 "
          f"{pct(run.cold_ms, 90):,.1f} ms; warm: p50 {statistics.median(run.warm_ms):,.1f} "
          f"ms, p90 {pct(run.warm_ms, 90):,.1f} ms")


def _ints(value: str) -> list[int]:
    return [int(x) for x in value.split(",") if x]


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench scale memory", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--namespaces", type=int, default=200)
    ap.add_argument("--notes", type=int, default=1_000, help="notes per namespace")
    ap.add_argument("--budgets", type=_ints, default=[0, 400],
                    help="MiB, comma-separated; 0: no budget (default 0,400)")
    ap.add_argument("--workers", type=_ints, default=[1], help="worker counts (default 1)")
    ap.add_argument("--long", action="store_true",
                    help="1,000 namespaces x 1,000 notes (1M notes; long)")
    ap.add_argument("--redis-url", help="an empty Redis to use instead of a private one")
    opts = ap.parse_args(argv)
    if opts.long:
        opts.namespaces, opts.notes = 1_000, 1_000
    nss = [f"m{i:04d}" for i in range(opts.namespaces)]
    marks = sorted({1, 10, 50, 100, 200, 500, 1000, opts.namespaces} & set(
        range(1, opts.namespaces + 1)))
    corpus = Corpus.make(random.Random(11))
    with ExitStack() as stack:
        url = opts.redis_url or stack.enter_context(private_redis())
        _fill(url, [BASE_NS, "small", *nss], opts.notes, corpus)
        index_sizes(url, {100: "small", opts.notes: nss[0]}, corpus)
        for budget in opts.budgets:
            for w in opts.workers:
                report(measure(url, nss, budget, w, marks, corpus), len(nss))
    return 0
