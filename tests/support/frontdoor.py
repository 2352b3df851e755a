"""Helpers of the front-door tests: a server on a real socket (in this process, or the
``hivemind serve`` command) and a small HTTP caller."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn

from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.api_stub.server.tokens import TokenTable
from hivemind_memory.projections.store.connection import close_embedded
from hivemind_memory.worker.cli.serve import ServerApp, build
from tests.support import HIVEMIND, bound_port

_SERVES = itertools.count()
"""Numbers the ``serve`` processes of this test process (their log and port files)."""

ALICE = "alice-secret-000000000"
BOB = "bob-secret-00000000000"
OPS = "ops-secret-00000000000"
OTHER = "other-ns-secret-000000"
TOKENS = TokenTable.from_entries([
    {"secret": ALICE, "ns": ["team-a"], "agent": "alice", "rights": ["write", "query"]},
    {"secret": BOB, "ns": ["team-a"], "agent": "bob", "rights": ["write", "query"]},
    {"secret": OPS, "ns": ["*"], "agent": "ops", "rights": ["write", "query", "admin"]},
    {"secret": OTHER, "ns": ["team-b"], "agent": "carol", "rights": ["write", "query"]},
])


def created(eid: str, nid: str, text: str, **kw: Any) -> dict[str, Any]:
    """A ``note.created`` event as an HTTP body carries it (the path names the namespace, the
    token the agent)."""
    return {"type": "note.created", "event_id": eid, "note_id": nid,
            "at": "2026-05-01T09:00:00Z", "text": text, **kw}


def call(base: str, method: str, path: str, body: Any = None, token: str | None = None,
         raw: bytes | None = None, headers: dict[str, str] | None = None
         ) -> tuple[int, Any]:
    """``(status, decoded JSON body)`` of one request."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@dataclass
class Live:
    """A server in this process on a free port (uvicorn in a thread)."""

    base: str
    served: ServerApp
    server: uvicorn.Server
    thread: threading.Thread
    store_url: str

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.served.close()
        if self.store_url.startswith("memory://"):
            close_embedded(self.store_url)  # closes and unlocks the log file


def start_live(store_url: str, tokens: TokenTable | None = TOKENS,
               max_body: int | None = None, query_timeout_s: float = 30.0,
               memory_budget_mib: int | None = None,
               env: dict[str, str] | None = None,
               warm_inline_max_notes: int | None = None) -> Live:
    served = build(Settings.from_env(env or {}, redis_url=store_url,
                                     memory_budget_mib=memory_budget_mib,
                                     warm_inline_max_notes=warm_inline_max_notes), tokens,
                   max_body=max_body, query_timeout_s=query_timeout_s)
    config = uvicorn.Config(served.app, host="127.0.0.1", port=0, log_level="warning",
                            access_log=False)
    sock = config.bind_socket()  # port 0: the system picks a free port, no race to rebind it
    port = int(sock.getsockname()[1])
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)  # waiting for the server thread to start serving its socket
    return Live(f"http://127.0.0.1:{port}", served, server, thread, store_url)


@dataclass
class ServeProc:
    """``hivemind serve`` as its own process."""

    proc: subprocess.Popen[bytes]
    base: str
    stderr: Path
    port: int

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def start_serve(args: list[str], cwd: Path, port: int = 0,
                env: dict[str, str] | None = None) -> ServeProc:
    """Run ``hivemind serve ARGS --port PORT`` in ``cwd`` (no ``HIVEMIND_*`` variable but
    ``env``'s); return once /healthz answers. With port 0 (the default) the server binds a
    port the system picks and reports it with ``--port-file``: no port is drawn, closed and
    rebound, so no other process can take it in between."""
    tag = next(_SERVES)
    err = cwd / f"serve-{tag}.err"
    port_file = cwd / f"serve-{tag}.port"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("HIVEMIND_")},
           **(env or {})}
    with err.open("wb") as fh:  # the child keeps its own copy of the descriptor
        proc = subprocess.Popen([*HIVEMIND, "serve", *args, "--port", str(port),
                                 "--port-file", str(port_file)], cwd=cwd,
                                stdout=subprocess.DEVNULL, stderr=fh, env=env)
    deadline = time.monotonic() + 30

    def failed() -> RuntimeError:
        proc.kill()
        proc.wait(timeout=10)
        return RuntimeError("hivemind serve did not start: "
                            + err.read_text(errors="replace")[-2000:])

    try:
        port = bound_port(port_file, proc, "hivemind serve")
    except RuntimeError:
        raise failed() from None
    base = f"http://127.0.0.1:{port}"
    while True:
        try:
            with urllib.request.urlopen(base + "/healthz", timeout=2):
                return ServeProc(proc, base, err, port)
        except (urllib.error.URLError, ConnectionError):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise failed() from None
            time.sleep(0.05)  # waiting for an external process to start serving
