"""``hivemind serve`` (HTTP API + MCP at /mcp) and ``hivemind mcp`` (MCP over stdio).

On the embedded store (``memory://``, ``memory://PATH``) nothing else can reach the store, so
the worker runs in this process (``worker.inprocess``); on Redis, run ``hivemind worker``
beside the server.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.projections.store.urls import redact_url
from hivemind_memory.worker.cli.args import fail, write_port_file

if TYPE_CHECKING:  # the parser of every command imports this module: the bodies import it
    from hivemind_memory.api_stub.server.tokens import TokenTable

LOOPBACK_NAMES = ("localhost",)


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    import ipaddress

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class ServerApp:
    """An assembled server: the ASGI app and what must be stopped with it."""

    app: Any
    client: Any
    worker: Any | None

    def close(self) -> None:
        if self.worker is not None:
            self.worker.stop()


def build(settings: Settings, tokens: TokenTable | None, host: str = "127.0.0.1",
          max_body: int | None = None, query_timeout_s: float = 30.0) -> ServerApp:
    """Connect, start the in-process worker on the embedded store, assemble HTTP + MCP."""
    from hivemind_memory.api_stub.client import Client
    from hivemind_memory.api_stub.sdk import Memory
    from hivemind_memory.api_stub.server.http import ServerOptions
    from hivemind_memory.api_stub.server.mcp import build_server, token_resolver
    from hivemind_memory.api_stub.server.routes import create_app
    from hivemind_memory.api_stub.server.schemas import MAX_BODY_BYTES
    from hivemind_memory.worker import runtime
    from hivemind_memory.worker.inprocess import InProcessWorker

    client = Client.connect(settings)
    store = client.store
    worker = None
    opts = ServerOptions(tokens=tokens, max_body=max_body or MAX_BODY_BYTES,
                         query_timeout_s=query_timeout_s)
    if settings.redis_url.startswith("memory://"):
        worker = InProcessWorker(runtime.build(settings, store)).start()
        w = worker
        opts.on_write = w.kick  # readiness counts its heartbeat, as /metrics does
        opts.caught_up = w.caught_up.is_set
    on_write = opts.on_write

    def make(ns: str, agent: str, admin: bool) -> Memory:
        return Memory.over_client(client, ns=ns, agent=agent, timeout=query_timeout_s,
                                  on_write=on_write, admin=admin)

    mcp = build_server(token_resolver(tokens, make, settings.note_ids == "owned"))
    star = mcp.streamable_http_app(streamable_http_path="/mcp", stateless_http=True,
                                   json_response=True, host=host)
    [route] = [r for r in star.routes if getattr(r, "path", None) == "/mcp"]
    opts.mcp_app = route.app  # type: ignore[attr-defined]  # the Route's ASGI endpoint
    opts.mcp_lifespan = mcp.session_manager.run
    return ServerApp(create_app(client, opts), client, worker)


def cmd_serve(args: argparse.Namespace, s: Settings) -> int:
    import structlog  # here, not at import: the parser of every command imports this module
    import uvicorn

    from hivemind_memory.api_stub.server.limits import protocol_with
    from hivemind_memory.api_stub.server.tokens import load_tokens

    log = structlog.get_logger("hivemind.serve")
    if args.max_body is not None and args.max_body < 1:
        return fail("--max-body must be at least 1 byte")
    tokens = load_tokens(args.tokens) if args.tokens else None
    if tokens is None:
        if not is_loopback(args.host):
            return fail(f"refusing to serve on {args.host} without --tokens (anyone could read "
                        "and write every namespace); bind 127.0.0.1 or give a tokens file")
        log.warning("serve_without_tokens", host=args.host,
                    note="loopback only, no authentication; the agent is whatever a request "
                    "names")
    served = build(s, tokens, args.host, args.max_body)
    try:
        config = uvicorn.Config(served.app, host=args.host, port=args.port, log_level="warning",
                                access_log=False, log_config=None,
                                http=protocol_with(s.http_read_timeout_s),  # arrives in time
                                limit_concurrency=s.http_max_connections)
        sock = config.bind_socket()  # --port 0: the system picks a free port, reported below
        sock.listen(config.backlog)  # connections wait in the backlog from now on, not refused
        port = int(sock.getsockname()[1])
        where = "in-process worker" if served.worker is not None else "run `hivemind worker` too"
        # stderr is the log: JSON lines in production, uvicorn's lines through the same handler
        log.info("serve_started", url=f"http://{args.host}:{port}", port=port,
                 store=redact_url(s.redis_url), workers=where, mcp="/mcp", docs="/docs",
                 metrics="/metrics")
        if args.port_file:
            write_port_file(args.port_file, port)
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        served.close()
    return 0


def cmd_mcp(args: argparse.Namespace, s: Settings) -> int:
    from hivemind_memory.api_stub.sdk import Memory
    from hivemind_memory.api_stub.server.mcp import build_server, fixed_resolver

    mem = Memory(s.redis_url, ns=args.ns, agent=args.agent, timeout=args.timeout, settings=s)
    try:
        build_server(fixed_resolver(mem)).run("stdio")
    finally:
        mem.close()
    return 0


def _agent_arg(value: str) -> str:
    import re

    from hivemind_memory.events.schema import ID_PATTERN

    if not re.match(ID_PATTERN, value):
        raise argparse.ArgumentTypeError(f"agent {value!r} must match {ID_PATTERN}")
    return value


def add_parsers(sub: Any, common: Any, ns_arg: Any) -> None:
    """The ``serve`` and ``mcp`` subcommands."""
    p = sub.add_parser("serve", help="HTTP JSON API with per-agent tokens (and MCP at /mcp)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080,
                   help="port (default 8080; 0: a free port, logged in serve_started)")
    p.add_argument("--port-file", metavar="PATH",
                   help="once listening, write the bound port to PATH (for --port 0)")
    p.add_argument("--tokens", help="TOML tokens file; without it only loopback is served")
    p.add_argument("--max-body", type=int, help="largest request body in bytes (default 1 MiB)")
    common(p)

    p = sub.add_parser("mcp", help="MCP server over stdio (remember, recall, used, revise, forget)")
    p.add_argument("--ns", required=True, type=ns_arg)
    p.add_argument("--agent", required=True, type=_agent_arg,
                   help="the agent every tool call acts as")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for a recall")
    common(p)
