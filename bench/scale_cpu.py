"""``python -m bench scale-cpu``: the CPU part of ``bench scale``: a query's CPU at 10k / 100k
(/ 300k / 1M with ``--sizes``) notes, scanning every note against the candidate stage
(postings + the dense HNSW stage, ``projections.ranking.dense``), each beside bm25s's score +
sort + fill on the same notes, and the first query after a restart (snapshot decode + query).

In process, no Redis: the seeded corpus of ``bench.query`` (Zipf pseudo-words, 5-2,500 words a
note, 3 years of ages, 10 % private, 2 % forgotten) folded and indexed as a worker does
(``build_index`` with the config's embedder). Per query, one thread's CPU time
(``time.process_time`` with one BLAS thread) of what a query job does for it besides Redis:
parsing the request, ``run_rank`` (embedding the query, relevance, recency, packing,
ordering, the audit's left-out notes: ``audit_left_out``), the result object and the audit
event encoded; only the publish round trip to Redis is not in it. Selective queries
leave out the 100 commonest words (2-5 words); common-word queries draw like the corpus.
A worker keeps what the ranking rules derive from a note's text (its word set, a long note's
passages: ``ranker.KeptTexts``, ``QueryEngine.kept``) from query to query, as the table keeps
the query words' BM25 parts: the main figures are a worker's that has answered as many other
queries first (drawn with another seed, so a measured query meets some notes for the first
time); "first sight" is every query with kept texts of its own (``BatchMemo()``), every
note's words and passages derived again (what this bench printed before).
bm25s: ``BM25(method="lucene")`` over the same texts (its own tokenizer), per query
``get_scores``, the matching notes sorted by score, filled top-down into the same budget.
Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import msgspec
import numpy as np

from bench.query import Corpus, generate_events, query_requests
from hivemind_memory.api_stub.protocol.messages import encode, parse_request, utcnow
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.projections.ranking.config import DEFAULT, Candidates, RankingConfig
from hivemind_memory.projections.ranking.dense import build_dense
from hivemind_memory.projections.ranking.embedders import embedder_for
from hivemind_memory.projections.ranking.index import NamespaceIndex, build_index
from hivemind_memory.projections.ranking.ranker import BatchMemo, KeptTexts
from hivemind_memory.projections.ranking.snapshot import decode_index, encode_index
from hivemind_memory.projections.reduce import Projection
from hivemind_memory.worker.engine import run_rank, served, to_result


def _p50_ms(xs: list[float]) -> float:
    return statistics.median(xs) * 1000


def _cpu(fn: Callable[[], object]) -> float:
    t = time.process_time()
    fn()
    return time.process_time() - t


def _bm25s(texts: list[str], tokens: list[int]) -> Callable[[str, int], object]:
    import bm25s

    model = bm25s.BM25(method="lucene")
    model.index(bm25s.tokenize(texts, stopwords="en", show_progress=False),
                show_progress=False)
    cost = np.asarray(tokens)
    vocab = model.vocab_dict

    def ask(text: str, budget: int) -> object:
        ids = [vocab[w] for w in text.split(" ") if w in vocab]
        scores = model.get_scores(ids) if ids else np.zeros(len(texts))
        hit = scores.nonzero()[0]
        order = hit[np.argsort(-scores[hit], kind="stable")]
        room, out = budget, []
        for i in order.tolist():  # top-down fill, skipping a note that does not fit
            if cost[i] <= room:
                out.append(i)
                room -= int(cost[i])
        return out

    return ask


def measure(n: int, n_queries: int, seed: int, dense: Candidates) -> None:
    rng = random.Random(seed * 1_000_003 + n)
    corpus = Corpus.make(rng)
    events: list[Any] = []
    now = utcnow().replace(microsecond=0)
    generate_events("s", n, corpus, rng, now, events.extend)
    proj = Projection()
    proj.absorb((str(i), e, b"") for i, e in enumerate(events))
    del events
    embedder = embedder_for(DEFAULT.embedder)
    t = time.process_time()
    idx = build_index("s", proj.notes, embedder)
    build_s = time.process_time() - t
    live = [s for s in proj.notes.values() if s.active]
    ask_bm25s = _bm25s([s.text for s in live], [s.tokens for s in live])
    del proj
    cols, got = idx.cols, idx.derived
    assert got is not None
    m = len(cols)
    has = got.done(m) & (got.norm[:m] > 0) & cols.live[:m]
    scan_cfg = msgspec.structs.replace(DEFAULT, candidates=msgspec.structs.replace(
        dense, scan_max_notes=10**12))
    # the candidate stage whatever the size (by default it starts at scan_max_notes); the
    # dense index is built with the settings it is used with, or ``dense_ready`` refuses it
    cand_cfg = msgspec.structs.replace(DEFAULT, candidates=msgspec.structs.replace(
        dense, scan_max_notes=1))
    t = time.process_time()
    d = build_dense(got.mat[:m].astype(np.int8), has, cand_cfg.candidates, got.digest)
    dense_s = time.process_time() - t
    print(f"{n:,} notes ({idx.indexed():,} live): index build {build_s:.1f} CPU-s, dense "
          f"stage (HNSW) build {dense_s:.1f} CPU-s")
    snap = encode_index(idx)
    assert idx.attach_dense(d, cols)
    assert idx.dense_ready(cand_cfg) and not idx.dense_ready(scan_cfg)

    left_out = Settings().audit_left_out

    kept = KeptTexts()  # the worker's (``QueryEngine.kept``), filled by the warm-up below

    def one(i: NamespaceIndex, raw: dict[str, Any], cfg: RankingConfig,
            first_sight: bool = False) -> bytes:
        # what a query job does for one query besides Redis (``QueryEngine._rank`` and
        # ``_publish``): parse, rank with the audit's left-out notes, the result and the
        # audit entry encoded
        req = parse_request(raw)
        res = run_rank(i, req, cfg, now, BatchMemo(None if first_sight else kept), left_out,
                       embedder)
        result = to_result("s.q", req, now, res)
        body = encode(result)
        encode(served(result, "1-0", "c", req=req, body=body, seen="1-0", base_digest="c",
                      embedding="", served_at=now, why=res.why, embedder="e"))
        return body

    for label, skip in (("selective", 100), ("common-word", 0)):
        reqs = query_requests("s", n_queries, corpus, random.Random(seed + skip), skip)
        # a worker that has answered as many other queries (another seed) on both paths
        for raw in query_requests("s", n_queries, corpus, random.Random(seed + skip + 1), skip):
            one(idx, raw, cand_cfg)
            one(idx, raw, scan_cfg)
        for raw in reqs[:3]:  # the first pays lazy setup (layouts, caches)
            one(idx, raw, cand_cfg, first_sight=True)
            one(idx, raw, scan_cfg, first_sight=True)
        cold_scan = [_cpu(partial(one, idx, raw, scan_cfg, True)) for raw in reqs]
        cold_cand = [_cpu(partial(one, idx, raw, cand_cfg, True)) for raw in reqs]
        scan = [_cpu(partial(one, idx, raw, scan_cfg)) for raw in reqs]
        cand = [_cpu(partial(one, idx, raw, cand_cfg)) for raw in reqs]
        peer = [_cpu(partial(ask_bm25s, raw["text"], raw["budget"])) for raw in reqs]
        same = sum(one(idx, r, scan_cfg) == one(idx, r, cand_cfg) for r in reqs[:50])
        print(f"  {label:11} CPU p50: scan {_p50_ms(scan):6.2f} ms, candidates "
              f"{_p50_ms(cand):6.2f} ms, bm25s score+sort+fill {_p50_ms(peer):6.2f} ms; "
              f"candidates / bm25s {_p50_ms(cand) / _p50_ms(peer):.2f} x, scan / candidates "
              f"{_p50_ms(scan) / _p50_ms(cand):.1f} x; same answer as the scan "
              f"{same}/{min(50, len(reqs))}")
        print(f"  {'':11} first sight of every note's words and passages: scan "
              f"{_p50_ms(cold_scan):6.2f} ms, candidates {_p50_ms(cold_cand):6.2f} ms")
    first = query_requests("s", 2, corpus, random.Random(seed + 7), 100)
    t = time.process_time()
    fresh = decode_index(snap, "s")
    assert fresh is not None
    load_s = time.process_time() - t
    cold = _cpu(partial(one, fresh, first[0], scan_cfg))
    warm = _cpu(partial(one, fresh, first[1], scan_cfg))
    print(f"  after a restart: snapshot decode {load_s * 1000:.0f} ms CPU, first query "
          f"{cold * 1000:.1f} ms (scanning: the dense stage builds in a thread meanwhile), "
          f"second {warm * 1000:.1f} ms")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench scale-cpu")
    ap.add_argument("--sizes", default="10000,100000",
                    help="notes per namespace, comma-separated (300000, 1000000 on request)")
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args(argv)
    from threadpoolctl import threadpool_limits

    threadpool_limits(1)  # as ``hivemind worker`` runs
    for n in (int(x) for x in args.sizes.split(",")):
        measure(n, args.queries, args.seed, Candidates())
    return 0
