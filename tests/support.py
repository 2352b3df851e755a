"""Shared test helpers: private redis-server processes on free ports and the CLI command.

Real-Redis tests skip on a machine without the binary, but fail when ``CI=true``.
Imported by ``conftest.py`` and by tests; nothing imports ``conftest.py``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

IN_CI = os.environ.get("CI", "").lower() == "true"


def free_port() -> int:
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


def need_binary() -> None:
    if shutil.which("redis-server") is None:
        msg = "redis-server binary not found"
        if IN_CI:
            pytest.fail(msg + " (CI=true: real-Redis tests must run)")
        pytest.skip(msg)


HIVEMIND = [sys.executable, "-m", "hivemind_memory.worker.cli"]
"""The ``hivemind`` command, run with this interpreter (works without the console script)."""
