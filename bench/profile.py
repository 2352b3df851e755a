"""``python -m bench profile``: the worker's query path in process, the way a query job runs it
(``QueryEngine.serve``: catch-up probe, refresh, priming, ranking, publishing to Redis), without
RQ or a client. Prints figures; never asserts timings.

One namespace of ``--notes`` notes (``bench query``'s generator) on a private ``redis-server``
(or ``--redis-url``), then ``--rounds`` rounds of a fresh dense batch (``bench batch``'s:
``--queries`` queries of 2-6 words, budgets 500-8,000) in jobs of ``--job`` queries; the wall
time and the CPU time (``time.process_time``: the figure to compare on a shared machine) per
query of each round. BLAS runs on one thread, as in ``hivemind worker``
(``worker.runtime.single_threaded_blas``). With ``--cprofile`` the last round runs under
cProfile and the shares of ``serve`` spent in its phases are printed (the profiler's own
overhead included, so shares, not times, are the figure)."""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import statistics
import time
from typing import Any

from bench.batch import dense_requests
from bench.core import private_redis
from bench.query import Corpus, load_namespace

PHASES = {
    "calibrated relevance": ("index.py", "calibrated_slots"),
    "  BM25": ("columns.py", "bm25"),
    "  the kernel (likely)": ("calibrated.py", "likely"),
    "rank_index": ("ranker.py", "rank_index"),
    "  packing": ("packing.py", "pack_positions"),
    "  the audit's left-out notes": ("why.py", "left_out"),
    "query embeddings and cosines": ("engine.py", "_prime"),
    "publishing": ("engine.py", "_publish"),
    "encoding answers": ("messages.py", "encode"),
}
"""Phase name -> (file, function) whose cumulative time is its share."""


def shares(stats: pstats.Stats) -> tuple[float, dict[str, float]]:
    """``serve``'s cumulative time and each phase's share of it."""
    raw: dict[tuple[str, int, str], Any] = stats.stats  # type: ignore[attr-defined]
    cum: dict[tuple[str, str], float] = {}
    for (path, _, name), (_, _, _, ct, _) in raw.items():
        cum[(path.rsplit("/", 1)[-1], name)] = cum.get((path.rsplit("/", 1)[-1], name), 0) + ct
    total = cum.get(("engine.py", "serve"), 0.0)
    return total, {k: cum.get(v, 0.0) / total if total else 0.0 for k, v in PHASES.items()}


def run(url: str, args: argparse.Namespace) -> None:
    from hivemind_memory.api_stub.protocol.messages import Envelope
    from hivemind_memory.api_stub.protocol.settings import Settings
    from hivemind_memory.events.positions import format_pos
    from hivemind_memory.projections.store.connection import connect
    from hivemind_memory.projections.store.log import tail
    from hivemind_memory.worker import runtime
    from hivemind_memory.worker.engine import QueryEngine

    rt = runtime.build(Settings.from_env(redis_url=url), connect(url))
    runtime.install(rt)
    rng = random.Random(args.seed)
    corpus = Corpus.make(rng)
    ns = "bp"
    load_namespace(rt, ns, args.notes, corpus, args.seed)
    pos = format_pos(tail(rt.store, ns))
    engine = QueryEngine(rt.store, rt.cfg, rt.settings)
    engine.serve([Envelope(f"{ns}.warm", pos, dense_requests(ns, 1, corpus, rng)[0])])
    per: list[float] = []
    cpus: list[float] = []
    for k in range(1, args.rounds + 1):
        reqs = dense_requests(ns, args.queries, corpus, rng)
        jobs = [[Envelope(f"{ns}.r{k}q{i + j}", pos, r)
                 for j, r in enumerate(reqs[i:i + args.job])]
                for i in range(0, len(reqs), args.job)]
        prof = cProfile.Profile() if args.cprofile and k == args.rounds else None
        t, cpu = time.perf_counter(), time.process_time()
        if prof is not None:
            prof.enable()
        failed = 0
        for job in jobs:
            failed += engine.serve(job)["failed"]
        if prof is not None:
            prof.disable()
        seconds, cpu = time.perf_counter() - t, time.process_time() - cpu
        print(f"round {k}: {len(reqs):,} queries in jobs of {args.job}: {seconds:.3f} s = "
              f"{seconds * 1000 / len(reqs):.3f} ms a query, CPU {cpu * 1000 / len(reqs):.3f} ms"
              + (" (under cProfile)" if prof is not None else "")
              + (f"  ERRORS {failed}" if failed else ""))
        if prof is None:
            per.append(seconds * 1000 / len(reqs))
            cpus.append(cpu * 1000 / len(reqs))
        else:
            total, got = shares(pstats.Stats(prof))
            print(f"  shares of serve ({total:.3f} s under the profiler):")
            for name, share in got.items():
                print(f"    {name:<32} {share * 100:5.1f} %")
    if len(per) > 1:
        print(f"median of rounds 2-{len(per)}: {statistics.median(per[1:]):.3f} ms a query, "
              f"CPU {statistics.median(cpus[1:]):.3f} ms (round 1 pays the first batch's caches)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench profile", description=__doc__)
    ap.add_argument("--notes", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=1_000, help="queries a round")
    ap.add_argument("--job", type=int, default=500, help="queries a job (default 500)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--cprofile", action="store_true",
                    help="run the last round under cProfile and print the phases' shares")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--redis-url", default=None, help="default: a private redis-server")
    args = ap.parse_args(argv)
    if args.job < 1 or args.queries < 1 or args.rounds < 1:
        ap.error("--job, --queries and --rounds must be >= 1")
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):  # as ``hivemind worker`` runs
        if args.redis_url:
            run(args.redis_url, args)
        else:
            with private_redis() as url:
                run(url, args)
    return 0
