"""``hivemind bench core`` on a small file: the projected store matches the pure fold and the
generator's expectation. No timing assertions (the figures are for people)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
import structlog

from bench import core as bench_core
from bench.data import generate
from hivemind_memory.projections.ranking.config import RankingConfig
from hivemind_memory.projections.state import pack_note
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.readmodel import read_notes
from tests.support import RedisProc

pytestmark = pytest.mark.redis_server


def test_small_bench_matches_on_the_session_server(redis_server: RedisProc) -> None:
    r = redis_server.client()
    r.flushall()
    try:
        figs = bench_core.run(redis_server.url, 3_000, n_namespaces=3, seed=21, batch_size=250)
        assert figs.worker_exit == 0
        assert figs.comparison.match, figs.comparison.diffs[:10]
        assert figs.comparison.notes > 100
        assert figs.redeliveries > 50
        # the bench cleans up after itself on a server it did not start
        assert not r.smembers(keys.NAMESPACES)
        assert not r.keys("hm:{bench-*")
    finally:
        r.flushall()
        r.close()


def test_bench_main_on_a_private_server_prints_match(
        capsys: pytest.CaptureFixture[str]) -> None:
    saved = structlog.get_config()
    try:
        assert bench_core.main(["--events", "1500", "--seed", "4"]) == 0
    finally:
        structlog.configure(**saved)  # main() configures logging like an entry point does
    out = capsys.readouterr().out
    assert "private redis-server" in out
    assert out.rstrip().endswith("MATCH")
    assert "events/s" in out and "peak RSS" in out


def test_compare_reports_a_lost_use(redis_server: RedisProc, tmp_path: Path) -> None:
    """The comparison is not vacuous: one use missing from the store is reported."""
    r = redis_server.client()
    r.flushall()
    try:
        figs = bench_core.run(redis_server.url, 800, n_namespaces=1, seed=2, keep=True)
        assert figs.comparison.match
        ns = figs.namespaces[0]
        nid, n = next((k, v) for k, v in read_notes(r, ns).items() if v.uses > 0)
        r.hset(keys.notes(ns), nid, pack_note(msgspec.structs.replace(n, uses=n.uses - 1)))
        path = tmp_path / "e.jsonl"
        exp = generate(path, 800, [ns], seed=2)  # the same file the bench generated
        cfg = RankingConfig()
        cmp = bench_core.compare(r, [ns], bench_core.pure_fold(path, cfg), exp, cfg)
        assert not cmp.match
        assert any(f"{ns}/{nid}:" in d for d in cmp.diffs)
    finally:
        r.flushall()
        r.close()
