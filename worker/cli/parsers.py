"""The parsers of the commands whose bodies live in heavier modules (``audit_commands``,
``fsck``): building the whole command tree imports none of them, so a command that needs
little (``batch``, ``query``) starts fast."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


def _share(value: str) -> float:
    try:
        v = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not 0.0 <= v < 1.0:
        raise argparse.ArgumentTypeError(f"must be within [0, 1), got {value}")
    return v


def _hours(value: str) -> float:
    try:
        v = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of hours: {value!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return v


def audit_parsers(sub: Any, common: Callable[[argparse.ArgumentParser], None],
                ns_arg: Callable[[str], str], time_arg: Callable[[str], Any]) -> None:
    """Register the commands on the ``hivemind`` parser."""
    p = sub.add_parser("audit", help="served queries: list them, reproduce them exactly")
    asub = p.add_subparsers(dest="audit_cmd", required=True)
    a = asub.add_parser("list", help="served queries, newest first, with what each was shown")
    a.add_argument("--ns", required=True, type=ns_arg)
    a.add_argument("--agent", help="only this agent's queries")
    a.add_argument("--since", type=time_arg, help="served at or after T (RFC 3339)")
    a.add_argument("--until", type=time_arg, help="served at or before T (RFC 3339)")
    a.add_argument("--limit", type=int, default=20, help="page size (default 20)")
    a.add_argument("--before", help="the next page: older than this audit id (printed at the end)")
    a.add_argument("--json", action="store_true", help="one JSON object per line")
    common(a)
    a = asub.add_parser("reproduce", help="re-run served queries exactly as they ran")
    a.add_argument("--ns", required=True, type=ns_arg)
    a.add_argument("query_ids", nargs="*", metavar="QUERY_ID")
    a.add_argument("--all", action="store_true", help="every served query of the namespace")
    a.add_argument("--json", action="store_true", help="one JSON object per query")
    common(a)
    a = asub.add_parser("explain", help="why a served query got these notes and not others")
    a.add_argument("--ns", required=True, type=ns_arg)
    a.add_argument("query_id", metavar="QUERY_ID")
    a.add_argument("--note", metavar="NOTE_ID", help="and what became of this note")
    a.add_argument("--limit", type=int, default=30,
                   help="left-out notes listed (default 30; --json lists every one)")
    a.add_argument("--recorded", action="store_true",
                   help="only what the audit entry recorded (do not re-run on the log)")
    a.add_argument("--json", action="store_true", help="one JSON object")
    common(a)

    p = sub.add_parser("export", help="the namespace's log as JSON Lines (ingest accepts it)")
    p.add_argument("--ns", required=True, type=ns_arg)
    p.add_argument("--until", type=time_arg,
                   help="only the log appended up to T (a prefix) and queries served by then")
    p.add_argument("--with-audit", action="store_true",
                   help="also the served queries, config history and query embeddings")
    p.add_argument("--out", "-o", help="write here instead of stdout")
    common(p)

    p = sub.add_parser("import", help="restore an export (events, and audit lines if any)")
    p.add_argument("file")
    p.add_argument("--no-schedule", action="store_true",
                   help="append only; do not enqueue projection jobs")
    common(p)

    p = sub.add_parser("calibrate", help="fit the calibrated relevance to a namespace's "
                       "labels or to the uses its agents reported")
    p.add_argument("--ns", required=True, type=ns_arg)
    p.add_argument("--labels", metavar="FILE",
                   help='JSON Lines of {"query", "relevant": [note ids], "agent", "budget", '
                        '"as_of"} (default: the served queries and the uses that followed)')
    p.add_argument("--holdout", type=_share, default=0.2,
                   help="share of the queries held out to measure recall (default 0.2)")
    p.add_argument("--window", type=_hours, default=24.0, metavar="HOURS",
                   help="a use counts if reported this many hours after the query (24)")
    p.add_argument("--budget", type=int, default=None,
                   help="measure recall at this budget (default: each query's own)")
    p.add_argument("--seed", type=int, default=0, help="seed of the held-out split (0)")
    p.add_argument("--out", "-o", help="write the fitted config (TOML) here")
    p.add_argument("--json", action="store_true", help="the report as one JSON object")
    common(p)

    p = sub.add_parser("sweep", help="replay served queries under other ranking constants")
    p.add_argument("--ns", required=True, type=ns_arg)
    p.add_argument("--set", dest="sets", action="append", required=True, metavar="KEY=V1,V2",
                   help="a config key (dotted: short.floor) and the values to try; repeatable "
                        "(every combination runs)")
    p.add_argument("--queries", type=int, help="only the N most recent served queries")
    p.add_argument("--json", action="store_true", help="one JSON object per row")
    common(p)

    p = sub.add_parser("show", help="a note, its events in log order, the queries that got it")
    p.add_argument("--ns", required=True, type=ns_arg)
    p.add_argument("note_id")
    p.add_argument("--json", action="store_true", help="one JSON object")
    common(p)


def fsck_parsers(sub: Any) -> None:
    """Register ``fsck`` on the ``hivemind`` parser."""
    p = sub.add_parser("fsck", help="check (and repair) the log of a memory://PATH store")
    p.add_argument("--store", required=True, metavar="memory://PATH",
                   help="the embedded store whose PATH/streams.log to check")
    p.add_argument("--repair", action="store_true",
                   help="rewrite the log so that it replays, losing no acknowledged record "
                   "(the old file is kept as streams.log.before-fsck-N)")
    p.add_argument("--drop-unreadable", action="store_true",
                   help="with --repair: also leave out unreadable bytes between records (the "
                   "records they held are lost)")
    p.add_argument("--json", action="store_true", help="one JSON object")
