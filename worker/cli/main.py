"""The ``hivemind`` command line. Thin: parse, connect, call, print, exit with the contract's
status (0 ok, 1 rejected/failed/different, 2 usage or connection error)."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from redis.exceptions import RedisError

from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.events.errors import ConfigError, HivemindError, StoreError, StoreLocked
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.urls import redact_url
from hivemind_memory.worker.cli.args import (
    TIME_HELP,
    Parser,
    announce_default_store,
    errors_as_log_lines,
    fail,
    ns_arg,
    time_arg,
)
from hivemind_memory.worker.cli.collector import without_collector
from hivemind_memory.worker.cli.output import redis_message, store_locked_message
from hivemind_memory.worker.cli.parsers import audit_parsers, fsck_parsers
from hivemind_memory.worker.cli.serve import add_parsers as serve_parsers


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--redis-url", help="store URL (default: $HIVEMIND_REDIS_URL, else "
                   "redis://localhost:6379/0, which the command then names on stderr; "
                   "memory:// = embedded, this process only; "
                   "memory://PATH = embedded, kept in the directory PATH; "
                   "redis+cluster://host:port[,host:port...] = a Redis Cluster)")
    p.add_argument("--rq-url", help="RQ's queues: a plain Redis (default: $HIVEMIND_RQ_URL, "
                   "else the store URL; required when the store is a redis+cluster:// URL)")
    p.add_argument("--config", help="ranking config TOML (default: $HIVEMIND_CONFIG)")


SERVICES = frozenset({"worker", "serve", "mcp"})
"""Long-running commands whose stderr is a log: their errors are log lines too."""

_ns_arg = ns_arg
_time_arg = time_arg


def _positive(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return n


class _Skipped:
    """The parser of a command ``build_parser(only=...)`` does not build: every call on it
    (``add_argument``, ``add_subparsers``, ``add_parser``...) does nothing and returns it."""

    def __getattr__(self, name: str) -> Any:
        return self._nothing

    def _nothing(self, *args: Any, **kwargs: Any) -> _Skipped:
        return self


class _OneCommand:
    """The subcommands action as ``build_parser(only=...)`` hands it to the code that
    registers the commands: only the command ``only`` gets a real parser."""

    def __init__(self, sub: Any, only: str) -> None:
        self.sub, self.only, self.found = sub, only, False

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        if name != self.only:
            return _Skipped()
        self.found = True
        return self.sub.add_parser(name, **kwargs)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command tree; with ``only``, the tree of that one command (what ``main``
    parses a command line with: the same parser for that command, without building two
    dozen others; the whole tree when ``only`` names no command, so ``hivemind --help``, a
    misspelt command and every usage message read as before)."""
    ap = Parser(prog="hivemind", description=__doc__)
    real = ap.add_subparsers(dest="cmd", required=True)
    sub: Any = real if only is None else _OneCommand(real, only)

    p = sub.add_parser("demo", help="the whole flow in one process on the embedded store")
    p.add_argument("--config", help="ranking config TOML")
    p.add_argument("--store", default="memory://",
                   help="embedded store URL: memory:// (default) or memory://PATH (kept on disk)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of the text")
    p.add_argument("--print-events", action="store_true",
                   help="only print the demo's events as JSON Lines (for ingest elsewhere)")

    p = sub.add_parser("ingest", help="validate and append events (JSON Lines)")
    p.add_argument("file", nargs="?", default="-", help="a .jsonl file, or - for stdin")
    p.add_argument("--skip-invalid", action="store_true",
                   help="append the good lines, report the bad ones (exit 1 if any)")
    p.add_argument("--no-schedule", action="store_true",
                   help="append only; do not enqueue projection jobs")
    _common(p)

    p = sub.add_parser("worker", help="RQ worker: projections and query jobs")
    p.add_argument("--burst", action="store_true",
                   help="drain all pending work, then exit 0 once every stream is projected")
    p.add_argument("--sweep-every", type=int, default=keys.SWEEP_INTERVAL_S, metavar="S",
                   help="when idle this long, schedule namespaces left behind (default "
                   f"{keys.SWEEP_INTERVAL_S} s)")
    p.add_argument("--metrics-port", type=int,
                   help="serve Prometheus metrics on this port (/metrics; 0: a free port, "
                   "logged in metrics_serving)")
    p.add_argument("--metrics-port-file", metavar="PATH",
                   help="once serving metrics, write their port to PATH (for --metrics-port 0)")
    p.add_argument("--metrics-host", default="127.0.0.1",
                   help="address for --metrics-port (default 127.0.0.1; 0.0.0.0 in a container)")
    p.add_argument("--shards", default="all", metavar="SPEC",
                   help="the shards whose queries this worker answers (of HIVEMIND_SHARDS): "
                   "'all' (default), 2, 0-3 or 0,2-3")
    p.add_argument("--memory-budget", type=int, metavar="MiB",
                   help="index memory this worker may hold (least recently used namespaces "
                   "evicted past it; default HIVEMIND_MEMORY_BUDGET_MIB, else a quarter of the "
                   "machine's or container's memory)")
    _common(p)

    p = sub.add_parser("status", help="namespaces (log, checkpoint, lag, dead letters, last "
                       "query) and live workers")
    p.add_argument("--json", action="store_true", help="one JSON object")
    _common(p)

    p = sub.add_parser("query", help="ask for the best notes that fit a token budget")
    p.add_argument("text")
    p.add_argument("--ns", required=True)
    p.add_argument("--budget", required=True, type=int)
    p.add_argument("--agent", default="", help="who asks (private notes only for their agent)")
    p.add_argument("--as-of", type=time_arg,
                   help=f"the state from events with at <= T, now = T; T: {TIME_HELP}")
    p.add_argument("--json", action="store_true", help="print the result object as JSON")
    p.add_argument("--explain", action="store_true", help="include every candidate")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds to wait (default 30)")
    _common(p)

    p = sub.add_parser("batch", help="answer a JSON Lines file of queries as queued jobs")
    p.add_argument("file", help='one query per line: {"ns","text","budget",...}, or -')
    p.add_argument("--timeout", type=float, default=600.0, help="seconds for the whole batch")
    _common(p)

    p = sub.add_parser("notes", help="the projected notes of a namespace")
    p.add_argument("--ns", required=True, type=_ns_arg)
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    _common(p)

    p = sub.add_parser("replay", help="rebuild projections from the log")
    p.add_argument("--ns", required=True, type=_ns_arg)
    p.add_argument("--as-of", type=time_arg,
                   help=f"print the state from events with at <= T (writes nothing); {TIME_HELP}")
    p.add_argument("--verify", action="store_true",
                   help="compare live and rebuilt; exit 1 if they differ (writes nothing)")
    _common(p)

    p = sub.add_parser("dead", help="the dead letters of a namespace, with the total")
    p.add_argument("--ns", required=True, type=_ns_arg)
    p.add_argument("--limit", type=_positive, default=1000,
                   help="show at most N, oldest first (default 1000); the total is always said")
    p.add_argument("--json", action="store_true",
                   help="one JSON object per line (id, entry, reason, at_ms); summary on stderr")
    _common(p)

    p = sub.add_parser("erase", help="erase notes: their text and embedding are removed from "
                       "everything hivemind wrote (the operator's act)")
    p.add_argument("note_ids", nargs="+", metavar="NOTE_ID", help="the notes to erase")
    p.add_argument("--ns", required=True, type=_ns_arg)
    p.add_argument("--timeout", type=float, default=60.0,
                   help="seconds to wait for the projector to fold the erasure (default 60)")
    p.add_argument("--json", action="store_true", help="one JSON object")
    _common(p)

    p = sub.add_parser("curves", help="recency multiplier per tier vs 5%% a day")
    p.add_argument("--out", help="write a PNG plot here (needs matplotlib) instead of a table")
    p.add_argument("--config", help="ranking config TOML")

    serve_parsers(sub, _common, _ns_arg)
    fsck_parsers(sub)
    audit_parsers(sub, _common, _ns_arg, _time_arg)
    if isinstance(sub, _OneCommand) and not sub.found:
        return build_parser()
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``hivemind`` console script."""
    argv = sys.argv[1:] if argv is None else list(argv)
    first = argv[0] if argv and not argv[0].startswith("-") else None
    args = build_parser(only=first).parse_args(argv)
    if args.cmd not in CLIENT_ONLY:
        _configure_logs()
    service = args.cmd in SERVICES
    errors_as_log_lines(service)
    try:
        return int(_dispatch(args))
    except StoreLocked as exc:  # a memory://PATH store another process (serve) holds
        cmd = args.cmd if args.cmd != "audit" else f"audit {args.audit_cmd}"
        return fail(store_locked_message(str(exc), cmd, getattr(args, "ns", None),
                                         getattr(args, "note_id", None)), 2)
    except (StoreError, ConfigError) as exc:
        return fail(str(exc), 2)
    except RedisError as exc:
        # e.g. the server went away or hit maxmemory mid-run. An interrupted ingest is safe
        # to re-run whole: repeated event_ids are applied once.
        return fail(f"Redis error: {redis_message(exc)}", 2)
    except HivemindError as exc:
        return fail(str(exc), 1)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (| head): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception:
        if not service:
            raise
        # a service's stderr is its log: even a crash is one log line (JSON in production)
        import structlog

        structlog.get_logger("hivemind.cli").exception("command_crashed", command=args.cmd)
        return 1


def _configure_logs() -> None:
    """JSON lines unless stderr is a terminal (``worker.ops.logs``). A client-only command on
    Redis logs nothing (its messages are stderr lines), so it never loads structlog."""
    from hivemind_memory.worker.ops import logs

    logs.configure()


def _settings(args: argparse.Namespace) -> Settings:
    return Settings.from_env(redis_url=getattr(args, "redis_url", None),
                             rq_url=getattr(args, "rq_url", None),
                             config_path=getattr(args, "config", None),
                             memory_budget_mib=getattr(args, "memory_budget", None))


COMMAND_MODULES = {
    **dict.fromkeys(("serve", "mcp"), "serve"),
    "fsck": "fsck",
    **dict.fromkeys(("audit", "export", "import", "calibrate", "sweep", "show"),
                    "audit_commands"),
    **dict.fromkeys(("query", "batch"), "query_commands"),
}
"""The module of ``hivemind_memory.worker.cli`` that holds each command's body (``commands``
when not named), imported only for the command that runs: ``batch`` and ``query`` import the
client side alone."""
CLIENT_ONLY = frozenset({"query", "batch"})
"""Commands that rank nothing in this process (no packer to choose)."""


def _dispatch(args: argparse.Namespace) -> int:
    with without_collector():
        mod: Any = importlib.import_module(
            f"hivemind_memory.worker.cli.{COMMAND_MODULES.get(args.cmd, 'commands')}")
    handler: Any = getattr(mod, f"cmd_{args.cmd}")
    if args.cmd in ("demo", "curves", "fsck"):
        return int(handler(args))
    s = _settings(args)
    if args.cmd in CLIENT_ONLY and s.redis_url.startswith("memory://"):
        _configure_logs()  # the embedded store logs (recovery, ...)
    if s.redis_url_source == "default":
        announce_default_store(redact_url(s.redis_url))
    if args.cmd not in CLIENT_ONLY:
        from hivemind_memory.projections.ranking.packing import use_packer

        use_packer(s.packer)
    return int(handler(args, s))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
