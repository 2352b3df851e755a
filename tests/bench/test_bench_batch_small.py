"""Smoke test of ``python -m bench batch`` at a tiny size: it runs every path with 1 and 2
workers to the end and prints every figure's label (timings are never asserted)."""

from __future__ import annotations

import re

import pytest

from bench.batch import main
from tests.support import need_binary

pytestmark = pytest.mark.redis_server

TINY = ["--notes", "300", "--queries", "30", "--own", "12", "--rounds", "1", "--noop", "20",
        "--workers", "1,2"]




def test_every_path_answers_every_query_beside_the_noop_rate(
        capsys: pytest.CaptureFixture[str]) -> None:
    need_binary()
    assert main(TINY) == 0
    out = capsys.readouterr().out
    assert "hivemind batch of an empty file" in out and "rq no-op baseline" in out
    assert "without the start" in out
    for workers in (1, 2):
        assert f"{workers} worker(s): no-op drain median" in out
        for load, n in (("dense", 30), ("own", 12)):
            for path in ("cli", "http", "sdk"):
                # every query of the round answered, none an error object
                assert re.search(rf"{workers} worker\(s\) round 1 {load} +{path} +{n} in ", out)
                assert re.search(rf"  {load} +{path} +[\d,]+ q/s = +[\d.]+x the no-op rate", out)
    assert "client CPU" in out and "of the CLI" in out
    assert "ERRORS" not in out and "FAILED" not in out


def test_bad_arguments_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as got:
        main(["--workers", "0"])
    assert got.value.code == 2
    assert "--workers: every count must be >= 1" in capsys.readouterr().err
