"""Smoke test of ``hivemind bench query`` at tiny sizes: it runs to the end and prints every
figure's label (timings are never asserted)."""

from __future__ import annotations

import pytest

from bench.query import main
from tests.support import RedisProc, need_binary

pytestmark = pytest.mark.redis_server

LABELS = (
    "namespace bq",
    "generate ",
    "append ",
    "project ",
    "index full load",
    "run_rank",
    "engine.answer",
    "relevant notes per query",
    "run_rank, common-word queries",
    "worker subprocess: first query",
    "end-to-end single query",
    "batch query_chunk=",
    "batch query_chunk=1 (",
    ", the same 4 queries",
    "worker-side (queries_served duration_ms)",
    "rq no-op baseline",
    "ratios to the no-op job",
    "total ",
)
TINY = ["--sizes", "300,500", "--queries", "3", "--e2e", "3", "--batch", "12",
        "--batch-chunk1", "4", "--noop", "10"]




def test_private_server_run_prints_every_figure(capsys: pytest.CaptureFixture[str]) -> None:
    need_binary()
    assert main(TINY) == 0
    out = capsys.readouterr().out
    for label in LABELS:
        assert label in out, label
    assert "in-worker bq-300" in out and "in-worker bq-500" in out
    assert "ERRORS" not in out and "FAILED" not in out


def test_given_server_keeps_only_foreign_keys(redis_server: RedisProc,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    r = redis_server.client()
    r.flushall()
    r.set("someone-else", b"1")
    try:
        assert main(["--sizes", "300", *TINY[2:], "--redis-url", redis_server.url]) == 0
        out = capsys.readouterr().out
        for label in LABELS:
            assert label.replace("namespace bq", "namespace bq-") in out, label
        assert r.get("someone-else") == b"1"
        assert list(r.scan_iter(match="hm:{bq-*")) == []
    finally:
        r.flushall()
        r.close()
