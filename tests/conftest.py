"""Fixtures: one contract suite per store (fakeredis and a real redis-server started here).

Real-Redis tests skip on a machine without the binary, but fail when ``CI=true``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis

IN_CI = os.environ.get("CI", "").lower() == "true"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class RedisProc:
    """A private redis-server on a free port (stop/start keep its data dir and port)."""

    port: int
    dir: Path
    appendonly: bool
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary is not None
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "yes" if self.appendonly else "no", "--appendfsync", "always",
             "--dir", str(self.dir), "--protected-mode", "no", "--daemonize", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        client = redis.Redis(port=self.port)
        while True:
            try:
                client.ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"redis-server on port {self.port} did not start") from None
                time.sleep(0.02)  # waiting for an external process to open its port
            finally:
                client.close()

    def stop(self, sig_kill: bool = False) -> None:
        if self.proc is None:
            return
        if sig_kill:
            self.proc.kill()
        else:
            self.proc.terminate()
        self.proc.wait(timeout=10)
        self.proc = None

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port)


def _need_binary() -> None:
    if shutil.which("redis-server") is None:
        msg = "redis-server binary not found"
        if IN_CI:
            pytest.fail(msg + " (CI=true: real-Redis tests must run)")
        pytest.skip(msg)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisProc]:
    """One private redis-server for the session (tests flush it)."""
    _need_binary()
    rp = RedisProc(_free_port(), tmp_path_factory.mktemp("redis"), appendonly=False)
    rp.start()
    yield rp
    rp.stop()


@pytest.fixture
def redis_factory(tmp_path: Path) -> Iterator[Callable[..., RedisProc]]:
    """Start extra private servers (AOF on) for restart and crash tests."""
    _need_binary()
    started: list[RedisProc] = []

    def make(appendonly: bool = True) -> RedisProc:
        d = tmp_path / f"redis{len(started)}"
        d.mkdir()
        rp = RedisProc(_free_port(), d, appendonly=appendonly)
        rp.start()
        started.append(rp)
        return rp

    yield make
    for rp in started:
        rp.stop(sig_kill=True)


@pytest.fixture(params=["fakeredis", pytest.param("redis-server", marks=pytest.mark.redis_server)])
def store(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A clean store: fakeredis, or a real redis-server (flushed)."""
    if request.param == "fakeredis":
        r = fakeredis.FakeRedis(server=fakeredis.FakeServer())
        yield r
        return
    rp: RedisProc = request.getfixturevalue("redis_server")
    r = rp.client()
    r.flushall()
    yield r
    r.flushall()
    r.close()
