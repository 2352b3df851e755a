"""Smoke test of ``python -m bench writes`` at a tiny size: every mode over both paths with one
and two clients writes every note, the check's cost and its recall against the query-based
check are printed, and the lookup never reports a note the writer may not see (timings are
never asserted)."""

from __future__ import annotations

import re

import pytest

from bench.writes import main
from tests.support import need_binary

pytestmark = pytest.mark.redis_server


def test_every_mode_and_path_writes_and_the_recall_is_printed(
        capsys: pytest.CaptureFixture[str]) -> None:
    need_binary()
    assert main(["--sizes", "400", "--writes", "4", "--clients", "1,2", "--probes", "12"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"lookup of bw-400: [\d,]+ buckets, [\d,]+ records", out)
    assert re.search(r"check of a fresh note: CPU [\d.]+ ms, wall [\d.]+ ms, Redis in the "
                     r"lookup script [\d.]+ ms", out)
    one = re.search(r"default remember of a fresh note, in process: CPU [\d.]+ ms, wall [\d.]+ "
                    r"ms a write; (\d+) of 12 in one step, (\d+) by the full check; ([\d.]+) "
                    r"bucket reads a write, Redis in it [\d.]+ ms a call; ([\d.]+) one-step "
                    r"script calls a write, Redis in it [\d.]+ ms a call; Redis in both "
                    r"[\d.]+ ms a write", out)
    assert one is not None and int(one.group(1)) + int(one.group(2)) == 12
    assert int(one.group(1)) > 0 and float(one.group(3)) >= 1 and float(one.group(4)) >= 1
    got = re.search(r"recall vs the query-based check: (\d+) of (\d+) pairs .* (\d+) not "
                    r"visible to the writer", out)
    assert got is not None and int(got.group(3)) == 0
    assert int(got.group(2)) > 0 and int(got.group(1)) >= 0.9 * int(got.group(2))
    for clients, n in ((1, 4), (2, 8)):
        for path in ("http", "sdk"):
            for mode in ("append", "ignore", "report", "supersede", "keep"):
                assert re.search(rf"{clients} client\(s\) {path} +{mode} +[\d.]+ writes/s .*"
                                 rf"\({n} writes, 0 merged\)", out), (clients, path, mode)
            assert re.search(rf"{clients} client\(s\) {path} +rate / ignore's: append", out)


def test_bad_arguments_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as got:
        main(["--clients", "0"])
    assert got.value.code == 2
    assert "every count must be >= 1" in capsys.readouterr().err
