"""Golden answers: as-of query results recorded before a refactor must stay byte-identical.

The log and the queries are generated from a fixed seed (ages, lengths, uses, agents, scopes,
kinds and forgets all vary).
The worker runs today's lexical relevance explicitly (``GOLDEN_CONFIG``: ``analyzer = "plain"``,
``relevance = "bm25"`` and ``bm25_b = 0.75``, the defaults these answers were recorded under),
so they stay byte-identical whatever the defaults become.
``HIVEMIND_REGEN_GOLDEN=1 pytest tests/unit/projections/ranking/test_golden.py`` rewrites
``tests/golden/answers.jsonl``; do that only for a change that is meant to alter results, and
say why in the commit.
"""

from __future__ import annotations

import os
import random
from datetime import timedelta
from pathlib import Path
from typing import Any

import fakeredis
import msgspec

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.projections.ranking.config import DEFAULT, RankingConfig
from hivemind_memory.worker import runtime
from hivemind_memory.worker.loop import run_worker
from tests.support.factories import T0, created, forgotten, iso, used

GOLDEN_CONFIG = msgspec.structs.replace(DEFAULT, analyzer="plain", relevance="bm25",
                                        bm25_b=0.75)
"""The config the golden answers were recorded under (today's lexical relevance, BM25's
length normalisation at 0.75, the default until 2026-12-02)."""
GOLDEN = Path(__file__).resolve().parents[3] / "golden" / "answers.jsonl"
WORDS = ("redis", "stream", "checkpoint", "crash", "replay", "deploy", "worker", "budget",
         "token", "packing", "decay", "half", "life", "floor", "scratch", "longterm", "agent",
         "memory", "note", "query", "lease", "batch", "audit")


def golden_log(seed: int = 7) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    evs: list[dict[str, Any]] = []
    for i in range(120):
        nid = f"n{i:03d}"
        words = rnd.choices(WORDS, k=rnd.choice([3, 8, 20, 60]))
        extra: dict[str, Any] = {}
        if rnd.random() < 0.3:
            extra["tokens"] = rnd.choice([5, 50, 400, 1500])
        if rnd.random() < 0.15:
            extra["scope"] = "private"
        if rnd.random() < 0.2:
            extra["kind"] = "scratch"
        if rnd.random() < 0.1:
            extra["embedding"] = [round(rnd.uniform(-1, 1), 3) for _ in range(4)]
        author = rnd.choice(["alice", "bob", "carol"])
        evs.append(created(nid, agent=author,
                           at=T0 - timedelta(days=rnd.choice([0, 2, 30, 200, 400, 900]),
                                             hours=rnd.randrange(24)),
                           text=" ".join(words), **extra))
        for u in range(rnd.choice([0, 0, 1, 4, 5, 9])):
            user = rnd.choice(["alice", "bob"])
            # only the author may see (and so use) a private note, and only the author may
            # forget a note: the log holds no event the fold refuses
            evs.append(used(nid, f"u-{nid}-{u}", at=T0 + timedelta(days=u),
                            agent=author if extra.get("scope") == "private" else user))
        if rnd.random() < 0.05:
            evs.append(forgotten(nid, f"f-{nid}") | {"agent": author})
    return evs


def golden_queries() -> list[dict[str, Any]]:
    as_of = [iso(T0 + timedelta(days=d)) for d in (10, 100, 365)]
    qs: list[dict[str, Any]] = []
    for i, (text, budget) in enumerate([
        ("redis stream checkpoint", 500), ("packing budget token", 2000),
        ("decay half life floor", 120), ("agent memory audit", 8000),
        ("crash replay lease", 40), ("scratch", 300),
    ]):
        for agent in ("", "alice", "bob"):
            qs.append({"ns": "t", "text": text, "budget": budget, "agent": agent,
                       "as_of": as_of[i % 3], "explain": i % 2 == 0})
    qs.append({"ns": "t", "text": "redis worker", "budget": 3000, "agent": "carol",
               "as_of": as_of[1], "config": {"exact_max_cells": 10}, "explain": True})
    qs.append({"ns": "t", "text": "memory note", "budget": 700, "agent": "bob",
               "as_of": as_of[2], "config": {"order": "chronological",
                                             "short": {"half_life_days": 30}}})
    qs.append({"ns": "t", "text": "query", "budget": 900, "agent": "alice",
               "as_of": as_of[0], "embedding": [0.5, -0.2, 0.1, 0.9], "explain": True})
    return qs


def answers(cfg: RankingConfig = GOLDEN_CONFIG, log: list[dict[str, Any]] | None = None,
            queries: list[dict[str, Any]] | None = None) -> list[bytes]:
    """The answers a worker under ``cfg`` gives ``queries`` over ``log`` (by default the
    golden log and queries), in order."""
    store = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    s = Settings()
    rt = runtime.build(s, store)
    rt.cfg = cfg
    runtime.install(rt)
    c = Client(store, settings=s)
    c.append(golden_log() if log is None else log)
    ids = c.submit_batch(golden_queries() if queries is None else queries)
    assert run_worker(rt, burst=True) == 0
    return [c.result_json(q, timeout=5) for q in ids]


def check_golden(path: Path, got: list[bytes], queries: list[dict[str, Any]]) -> None:
    """``got`` (the answers to ``queries``) byte for byte as ``path`` holds them, or written
    there with ``HIVEMIND_REGEN_GOLDEN=1``."""
    if os.environ.get("HIVEMIND_REGEN_GOLDEN") == "1":
        path.write_bytes(b"".join(b + b"\n" for b in got))
    want = path.read_bytes().splitlines()
    assert len(want) == len(got) == len(queries)
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        assert g == w, f"query {i} ({queries[i]['text']!r}) differs from the golden answer"


def test_as_of_answers_match_the_golden_file() -> None:
    check_golden(GOLDEN, answers(), golden_queries())
