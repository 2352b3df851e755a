"""``python -m bench scale-cpu`` at a tiny size: every line is printed, with the agreement of the
candidate stage (really in use: the bench asserts ``dense_ready``) with the scan (no timing
assertions: the figures are for people; that the candidate path gives the scan's answer when
every note with evidence is proposed is ``test_dense``'s)."""

from __future__ import annotations

import re

import pytest

from bench import scale_cpu


@pytest.mark.slow
def test_scale_cpu_bench_prints_each_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert scale_cpu.main(["--sizes", "400", "--queries", "8"]) == 0
    out = capsys.readouterr().out
    assert "400 notes" in out and "after a restart" in out
    rows = re.findall(r"(selective|common-word) +CPU p50: scan .* same answer as the scan "
                      r"(\d+)/(\d+)", out)
    assert [r[0] for r in rows] == ["selective", "common-word"]
    # at 400 notes the 256 nearest cannot hold every note the query's cosine gives evidence,
    # so the agreement is a figure here, not a promise
    assert all(0 <= int(r[1]) <= int(r[2]) == 8 for r in rows)
