"""``python -m bench scale restart`` at a tiny size: each first query is measured through a
real worker and answered (the figures are for people; no timing assertion)."""

from __future__ import annotations

import gc

import pytest

from bench import scale

pytestmark = [pytest.mark.redis_server,
              # one connection of the bench's in-process burst workers is left to the GC
              # (not found this session; the bench, not the product)
              pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")]


def test_scale_restart_bench_measures_each_first_query(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert scale.main(["restart", "--notes", "60", "--commits", "3"]) == 0
    out = capsys.readouterr().out
    assert "60 notes, no snapshot: first query answered" in out  # 60 < 20,000: inline
    assert "60 notes, worker restarted: first query answered" in out
    assert "63 notes, restarted after 3 commits and a trim: first query answered" in out
    gc.collect()  # here, under this test's filter, not at the session's end
