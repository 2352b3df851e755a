"""What every command shares about its arguments: one time parser, one namespace check, one
error style (``hivemind: <what was wrong>`` on stderr, exit 2 for usage errors), warnings,
and progress bars that appear only on a terminal."""

from __future__ import annotations

import argparse
import os
import re
import sys
from datetime import UTC, date, datetime
from typing import IO, Any, NoReturn

import msgspec

from hivemind_memory.events.schema import NS_PATTERN
from hivemind_memory.events.times import to_utc

TIME_HELP = "RFC 3339 time with a timezone (2026-05-01T12:00:00Z), or a date (= 00:00Z that day)"
"""The help text of every time argument."""
PROGRESS_MIN = 10_000
"""Work smaller than this many units gets no progress bar (it is over in a blink)."""


class Parser(argparse.ArgumentParser):
    """argparse with the CLI's error style: ``hivemind: <message>`` and a pointer to --help."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"hivemind: {message} (see: {self.prog} --help)\n")


def parse_time(value: str) -> datetime:
    """An RFC 3339 time with a timezone, converted to UTC; a bare date ``YYYY-MM-DD`` means
    that day at 00:00:00Z. Raises ``ValueError`` naming what is wrong."""
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
        try:
            d = date.fromisoformat(value)
        except ValueError as exc:
            raise ValueError(f"{value!r} is not a date: {exc}") from exc
        return datetime(d.year, d.month, d.day, tzinfo=UTC)
    try:
        t = msgspec.json.decode(msgspec.json.encode(value), type=datetime)
    except msgspec.ValidationError as exc:
        raise ValueError(f"{value!r} is not an RFC 3339 time: {exc}") from exc
    if t.tzinfo is None:
        raise ValueError(f"{value!r} has no timezone (e.g. {value}Z for UTC)")
    return to_utc(t, repr(value))  # range-checked: an offset must not overflow the year


def time_arg(value: str) -> datetime:
    """``parse_time`` as an argparse type (a bad value is a usage error)."""
    try:
        return parse_time(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def ns_arg(value: str) -> str:
    """A namespace name as an argparse type."""
    if not re.fullmatch(NS_PATTERN, value):
        raise argparse.ArgumentTypeError(f"namespace {value!r} must match {NS_PATTERN}")
    return value


_as_log_lines = False


def errors_as_log_lines(on: bool) -> None:
    """For long-running commands (worker, serve) whose stderr is a log: ``fail`` writes a
    log line (JSON in production) instead of the ``hivemind: ...`` line."""
    global _as_log_lines
    _as_log_lines = on


def fail(message: str, code: int = 2, err: IO[str] | None = None) -> int:
    """Print an error in the CLI's style and return the exit status to use."""
    if _as_log_lines and err is None:
        import structlog  # a service's: its logs are configured

        structlog.get_logger("hivemind.cli").error("command_failed", message=message,
                                                   exit_status=code)
    else:
        print(f"hivemind: {message}", file=err or sys.stderr)
    return code


def announce_default_store(url: str, err: IO[str] | None = None) -> None:
    """Say which store a command uses when nobody named one (``--redis-url``,
    ``HIVEMIND_REDIS_URL``): a line on stderr, or for a service the first log line."""
    why = "no --redis-url or HIVEMIND_REDIS_URL given"
    other = "--redis-url memory://PATH keeps an embedded store in the directory PATH instead"
    if _as_log_lines and err is None:
        import structlog  # a service's: its logs are configured

        structlog.get_logger("hivemind.cli").info("store_default", store=url, reason=why,
                                                  alternative=other)
    else:
        print(f"hivemind: store: {url} (the default: {why}; {other})", file=err or sys.stderr)


def warn(message: str, err: IO[str] | None = None) -> None:
    """Print a warning in the CLI's style (stderr; the command goes on)."""
    print(f"hivemind: warning: {message}", file=err or sys.stderr)


def warn_unknown_namespaces(asked: list[str], known: list[str],
                            err: IO[str] | None = None) -> list[str]:
    """Warn about each namespace that has never seen an event (a typo answers "0 notes"
    otherwise); returns them. Suggests a close known name when there is one."""
    unknown = [ns for ns in dict.fromkeys(asked) if ns not in set(known)]
    for ns in unknown:
        import difflib  # only to suggest a name: a command that asks no unknown never loads it

        close = difflib.get_close_matches(ns, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        warn(f"namespace {ns!r} has never seen an event; the answer is empty{hint}", err)
    return unknown


def progress(total: int | None, desc: str, unit: str = "ev", *,
             minimum: int = PROGRESS_MIN) -> Any:
    """A tqdm bar on stderr when stderr is a terminal and the work is big enough; otherwise
    an object whose ``update``/``close`` do nothing (logs and pipes stay clean)."""
    if not sys.stderr.isatty() or (total is not None and total < minimum):
        return _NoBar()
    from tqdm import tqdm  # a terminal only: a piped command never loads it

    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False)


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def write_port_file(path: str, port: int) -> None:
    """``PORT`` and a newline in ``path``, whole or not at all (written beside it, then renamed
    over it), so a reader polling for the file never sees half a number."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="ascii") as fh:
        fh.write(f"{port}\n")
    os.replace(tmp, path)
