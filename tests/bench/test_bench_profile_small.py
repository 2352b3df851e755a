"""Smoke test of ``python -m bench profile`` at a tiny size: every round answers every query
(no error object) and the cProfile round prints every phase's share (timings are never
asserted)."""

from __future__ import annotations

import re

import pytest

from bench.profile import PHASES, main
from tests.support import need_binary

pytestmark = pytest.mark.redis_server


def test_rounds_answer_every_query_and_the_profile_names_each_phase(
        capsys: pytest.CaptureFixture[str]) -> None:
    need_binary()
    assert main(["--notes", "300", "--queries", "30", "--job", "7", "--rounds", "3",
                 "--cprofile"]) == 0
    out = capsys.readouterr().out
    for k in (1, 2):
        assert re.search(rf"round {k}: 30 queries in jobs of 7: [\d.]+ s = [\d.]+ ms a query, "
                         rf"CPU [\d.]+ ms\n", out)
    assert re.search(r"round 3: .*\(under cProfile\)\n", out)
    assert "ERRORS" not in out
    shares = {name.strip(): float(v) for name, v in
              re.findall(r"^ {4}(.+?) +([\d.]+) %$", out, flags=re.M)}
    assert set(shares) == {name.strip() for name in PHASES}
    assert 0 < shares["calibrated relevance"] < 100 and 0 < shares["rank_index"] < 100
    assert re.search(r"median of rounds 2-2: [\d.]+ ms a query, CPU [\d.]+ ms", out)


def test_bad_arguments_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as got:
        main(["--job", "0"])
    assert got.value.code == 2
    assert "--job, --queries and --rounds must be >= 1" in capsys.readouterr().err
