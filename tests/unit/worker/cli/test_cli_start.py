"""What a ``hivemind batch`` process pays before its first query: the parser of its one
command, and only the client side's modules (no SDK, no worker, no write path, no servers)."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from hivemind_memory.worker.cli.main import build_parser


def _commands(ap: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _helps(p: argparse.ArgumentParser, prefix: str = "") -> dict[str, str]:
    """The help of ``p`` and of every command below it (``audit list``...), by name."""
    out = {prefix: p.format_help()}
    if any(isinstance(a, argparse._SubParsersAction) for a in p._actions):
        for name, child in _commands(p).items():
            out |= _helps(child, f"{prefix} {name}".strip())
    return out


COMMANDS = sorted(_commands(build_parser()))


@pytest.mark.parametrize("cmd", COMMANDS)
def test_the_parser_of_one_command_is_that_of_the_whole_tree(cmd: str) -> None:
    """``main`` builds only the command it runs: the same arguments, defaults and help."""
    whole = _commands(build_parser())[cmd]
    [(name, alone)] = _commands(build_parser(only=cmd)).items()
    assert name == cmd
    assert _helps(alone) == _helps(whole)
    assert [(a.dest, a.option_strings, a.default, a.type, a.required, a.nargs)
            for a in alone._actions] == \
        [(a.dest, a.option_strings, a.default, a.type, a.required, a.nargs)
         for a in whole._actions]


def test_a_name_that_is_no_command_gets_the_whole_tree() -> None:
    """So ``hivemind --help`` and a misspelt command list every command, as before."""
    assert sorted(_commands(build_parser(only="bach"))) == COMMANDS
    assert build_parser(only="bach").format_help() == build_parser().format_help()
    assert len(COMMANDS) > 15


def test_the_batch_path_imports_only_the_client_side() -> None:
    """``hivemind batch`` (main, then its command module) loads neither the SDK nor the
    worker, the write path (fold, read model, erasure, cluster appends, ingest), the ranking's
    similarity, the servers (their tokens, Starlette, uvicorn, the MCP SDK, the metrics
    client), structlog, fakeredis or numpy."""
    code = ("import sys; import hivemind_memory.worker.cli.main as m; "
            "import hivemind_memory.worker.cli.query_commands; "
            "m.build_parser(only='batch').parse_args(['batch', 'f']); "
            "print('\\n'.join(sorted(sys.modules)))")
    got = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, timeout=60).stdout.split())
    pkg = "hivemind_memory"
    worker = {m for m in got if m.startswith(f"{pkg}.worker.")}
    assert worker <= {f"{pkg}.worker.cli", f"{pkg}.worker.cli.main", f"{pkg}.worker.cli.args",
                      f"{pkg}.worker.cli.output", f"{pkg}.worker.cli.parsers",
                      f"{pkg}.worker.cli.collector",
                      f"{pkg}.worker.cli.serve", f"{pkg}.worker.cli.query_commands"}, worker
    absent = {f"{pkg}.api_stub.sdk", f"{pkg}.projections.reduce",
              f"{pkg}.projections.store.readmodel", f"{pkg}.projections.store.erasure",
              f"{pkg}.projections.store.cluster", f"{pkg}.projections.store.ingest",
              f"{pkg}.projections.ranking.similarity", f"{pkg}.api_stub.server.tokens",
              f"{pkg}.api_stub.server.http", "starlette", "uvicorn", "mcp",
              "prometheus_client", "structlog", "fakeredis", "numpy", "difflib"}
    assert not absent & got, sorted(absent & got)
    assert {f"{pkg}.api_stub.client", "redis", "rq"} <= got
