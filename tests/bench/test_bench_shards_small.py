"""``python -m bench shards`` at a tiny size: every layout is measured, and with two shards
each namespace's index is held by one worker only (with one shard, both may hold it). No
timing assertions (the figures are for people)."""

from __future__ import annotations

import re

import pytest

from bench import shards

pytestmark = pytest.mark.redis_server


def test_shards_bench_measures_every_layout(capsys: pytest.CaptureFixture[str]) -> None:
    assert shards.main(["--namespaces", "6", "--notes", "5", "--queries", "30",
                        "--clients", "1"]) == 0
    out = capsys.readouterr().out
    rows = {m[1]: m[2] for m in re.finditer(r"^(1 worker|2 workers, \d shards?) +(\S+)", out,
                                            re.M)}
    assert set(rows) == {"1 worker", "2 workers, 2 shards", "2 workers, 1 shard"}, out
    one = int(rows["1 worker"])
    held = [int(n) for n in rows["2 workers, 2 shards"].split("/")]
    assert len(held) == 2 and sum(held) == one  # each namespace asked is in one worker
    assert "2 sharded workers / 1 worker: index memory" in out
