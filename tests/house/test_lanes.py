"""The test suite's own rules: a test that starts a process or a real Redis is in the slow lane
by itself (``tests/conftest.py``'s ``slow_reason``), so ``pytest -m "not slow"`` stays fast; a
private redis-server never talks through another process's server on the port it drew."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import redis

import tests.support
from tests.conftest import LANES, _process_name
from tests.support import RedisProc, need_binary


class Samples:
    """Functions to classify (in a class: the hook follows the functions a test names, not a
    class's, so this module's own classifying test stays in the fast lane)."""

    @staticmethod
    def starts_a_process() -> None:
        subprocess.run(["true"], check=True)

    @staticmethod
    def calls_a_helper_that_starts_one() -> None:
        _starts_a_process()

    @staticmethod
    def pure(x: int) -> int:
        return sorted([x, 1])[0]

    @staticmethod
    def nested_start() -> None:
        def inner() -> None:
            subprocess.run(["true"], check=True)

        inner()


def _starts_a_process() -> None:
    subprocess.run(["true"], check=True)


def test_a_process_is_found_through_helpers_and_nested_functions() -> None:
    assert _process_name(Samples.starts_a_process, set()) == "subprocess"
    assert _process_name(Samples.calls_a_helper_that_starts_one, set()) == "subprocess"
    assert _process_name(Samples.nested_start, set()) == "subprocess"
    assert _process_name(Samples.pure, set()) is None


def test_the_support_helpers_that_start_processes_are_found() -> None:
    from tests.support.frontdoor import start_live, start_serve

    assert _process_name(start_serve, set()) is not None
    assert _process_name(tests.support.RedisProc.start, set()) is not None
    assert _process_name(start_live, set()) is None  # a server in this process: fast


def test_this_session_classified_this_modules_tests(request: pytest.FixtureRequest) -> None:
    """The hook ran over this session's items (before any ``-m`` deselection): this module's
    test that starts a redis-server is slow, this one is not."""
    mine = request.node.nodeid.split("::")[0]
    assert LANES[f"{mine}::test_a_redis_server_never_talks_through_another_on_its_port"
                 ] == "uses RedisProc"
    assert LANES[request.node.nodeid] is None


def test_a_redis_server_never_talks_through_another_on_its_port(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    need_binary()
    first = RedisProc(0, tmp_path / "a", appendonly=False)
    (tmp_path / "a").mkdir()
    first.start()
    try:
        # a port taken by another server: the start fails rather than talk to that server
        (tmp_path / "b").mkdir()
        taken = RedisProc(first.port, tmp_path / "b", appendonly=False)
        with pytest.raises(RuntimeError, match="redis-server"):
            taken.start()
        # with port 0 a drawn port that turns out taken is drawn again
        draws = iter([first.port])
        real = tests.support.free_port
        monkeypatch.setattr(tests.support, "free_port", lambda: next(draws, None) or real())
        (tmp_path / "c").mkdir()
        second = RedisProc(0, tmp_path / "c", appendonly=False)
        second.start()
        try:
            assert second.port != first.port
            c = redis.Redis(port=second.port)
            assert int(c.info("server")["process_id"]) == second.proc.pid  # type: ignore[union-attr]
            c.close()
        finally:
            second.stop()
    finally:
        first.stop()
