"""Micro-benchmark of the ranking core: packing and scoring, medians of repeated runs.

``hivemind bench ranking [--repeats N] [--quick] [--seed S]``. Synthetic, seeded data; pure
functions only (no store, no clock other than ``perf_counter`` around each call).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import TypeVar

from hivemind_memory.projections.ranking.config import DEFAULT, RankingConfig
from hivemind_memory.projections.ranking.index import build_index
from hivemind_memory.projections.ranking.packing import Item, pack
from hivemind_memory.projections.ranking.ranker import rank_index
from hivemind_memory.projections.state import NoteState

NOW = datetime(2026, 6, 1, tzinfo=UTC)
"""Fixed 'now' of the synthetic corpus."""
PACK_SIZES = (50, 500, 5_000)
PACK_BUDGETS = (2_000, 8_000, 32_000)
SCORE_SIZES = (10_000, 100_000)
QUERIES = ("w3 w41 w977", "w1500 w2600", "w0 w1 w2 w7 w30")
"""Common, rare and very common terms (the vocabulary is Zipf-distributed: w0 is the commonest)."""
VOCAB = 5_000

T = TypeVar("T")


def timed(fn: Callable[[], T], repeats: int) -> tuple[float, T]:
    """Median seconds of ``repeats`` calls, and the last result."""
    times: list[float] = []
    result: T | None = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    assert result is not None
    return statistics.median(times), result


def pack_items(rng: random.Random, n: int) -> list[Item]:
    return [Item(f"n{i}", rng.randint(20, 2_000), rng.random()) for i in range(n)]


def synthetic_notes(rng: random.Random, n: int) -> list[NoteState]:
    words = [f"w{i}" for i in range(VOCAB)]
    weights = [1.0 / (i + 1) for i in range(VOCAB)]
    notes = []
    for i in range(n):
        length = rng.choice((10, 30, 80, 200, 600))
        text = " ".join(rng.choices(words, weights, k=rng.randint(length // 2, length)))
        notes.append(
            NoteState(
                note_id=f"note-{i}",
                agent=rng.choice(("alice", "bob", "carol")),
                scope="private" if rng.random() < 0.1 else "shared",
                kind="scratch" if rng.random() < 0.2 else "note",
                text=text,
                tokens=max(1, len(text) // 4),
                created_at=NOW - timedelta(days=rng.random() * 730),
                uses=rng.choice((0, 0, 0, 1, 2, 4, 5, 9)),
            )
        )
    return notes


def bench_packing(
    rng: random.Random, repeats: int, sizes: Sequence[int], cfg: RankingConfig
) -> None:
    """Pack random items (costs 20..2,000, values 0..1) at each size and budget, with the
    configured cap and with exact packing off (``exact_max_cells=0``: greedy+swap) beside it."""
    print(f"packing (exact_max_cells={cfg.exact_max_cells:,} vs 0; median of {repeats})")
    print(f"{'candidates':>10} {'budget':>7} {'method':>12} {'ms':>9} {'value':>9} {'bound':>9}")
    for n in sizes:
        items = pack_items(rng, n)
        for budget in PACK_BUDGETS:
            for cap in (cfg.exact_max_cells, 0):
                secs, res = timed(partial(pack, items, budget, cap), repeats)
                print(
                    f"{n:>10,} {budget:>7,} {res.method:>12} {secs * 1e3:>9.2f} "
                    f"{res.total_value:>9.3f} {res.upper_bound:>9.3f}"
                )


def bench_scoring(
    rng: random.Random, repeats: int, sizes: Sequence[int], cfg: RankingConfig
) -> None:
    """Index synthetic notes, then time the relevance and ranking of a few queries."""
    print(
        f"scoring: NamespaceIndex.relevance_slots + rank_index (the worker's path), budget 8,000 "
        f"(median of {repeats}); 'explain' builds every candidate, 'lean' only the packed notes"
    )
    print(
        f"{'notes':>8} {'query':>18} {'matches':>8} {'scores ms':>10} {'explain ms':>10} "
        f"{'lean ms':>8} {'method':>12}"
    )
    for n in sizes:
        notes = synthetic_notes(rng, n)
        t0 = time.perf_counter()
        ix = build_index("bench", {note.note_id: note for note in notes})
        build = time.perf_counter() - t0
        print(f"{n:>8,} index build {build:.2f} s ({build / n * 1e6:.1f} µs/note)")
        for q in QUERIES:
            s_secs, (slots, rel) = timed(partial(ix.relevance_slots, q, None, cfg, "alice"),
                                         repeats)
            run = partial(rank_index, ix, slots, rel, agent="alice", now=NOW, budget=8_000,
                          cfg=cfg)
            r_secs, res = timed(run, repeats)
            l_secs, _ = timed(partial(run, explain=False), repeats)
            print(
                f"{n:>8,} {q:>18} {len(rel):>8,} {s_secs * 1e3:>10.1f} {r_secs * 1e3:>10.1f} "
                f"{l_secs * 1e3:>8.1f} {res.method:>12}"
            )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its figures; returns the exit status."""
    parser = argparse.ArgumentParser(prog="hivemind bench ranking", description=__doc__)
    parser.add_argument("--repeats", type=int, default=5, help="runs per figure (median shown)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the synthetic data")
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke test)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    rng = random.Random(args.seed)
    cfg = DEFAULT
    bench_packing(rng, args.repeats, (50, 500) if args.quick else PACK_SIZES, cfg)
    print()
    bench_scoring(rng, args.repeats, (1_000,) if args.quick else SCORE_SIZES, cfg)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
