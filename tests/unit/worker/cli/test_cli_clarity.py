"""One time parser and one error style for every command; a warning that names a namespace
that has never seen an event; the listing labels context order and rank; progress bars only
on a terminal."""

from __future__ import annotations

import argparse
import io
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from hivemind_memory.worker.cli import args as cli_args
from hivemind_memory.worker.cli.args import parse_time, progress, time_arg
from hivemind_memory.worker.cli.main import build_parser
from hivemind_memory.worker.cli.output import print_result
from tests.support import HIVEMIND, RedisProc, free_port
from tests.support.beats import wait_for_workers
from tests.support.factories import created, jsonl

TIME_DESTS = {"as_of", "since", "until"}


def run(*args: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HIVEMIND, *args], input=stdin, capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=120, check=False)


def test_parse_time_accepts_rfc3339_and_a_bare_date_and_names_what_is_wrong() -> None:
    assert parse_time("2026-05-01") == datetime(2026, 5, 1, tzinfo=UTC)
    assert parse_time("2026-05-01T12:00:00Z") == datetime(2026, 5, 1, 12, tzinfo=UTC)
    t = parse_time("2026-05-01T14:00:00+02:00")
    assert t == datetime(2026, 5, 1, 12, tzinfo=UTC) and t.tzinfo is UTC
    assert parse_time("2026-05-01T14:00:00+02:00").utcoffset() == timedelta(0)
    assert datetime(2026, 5, 1, 14, tzinfo=timezone(timedelta(hours=2))) == t
    with pytest.raises(ValueError, match="no timezone"):
        parse_time("2026-05-01T12:00:00")
    with pytest.raises(ValueError, match="not a date"):
        parse_time("2026-02-30")
    with pytest.raises(ValueError, match="not an RFC 3339 time"):
        parse_time("yesterday")


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    ap = build_parser()
    sub = next(a for a in ap._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_every_time_argument_of_every_command_uses_the_one_parser() -> None:
    seen = []
    for name, p in _subcommands().items():
        for a in p._actions:
            if a.dest in TIME_DESTS:
                assert a.type is time_arg, f"hivemind {name} {a.option_strings}"
                seen.append(name)
    assert {"query", "replay"} <= set(seen)


def test_a_bare_date_means_the_same_for_query_and_replay() -> None:
    ap = build_parser()
    q = ap.parse_args(["query", "x", "--ns", "t", "--budget", "5", "--as-of", "2026-05-01"])
    r = ap.parse_args(["replay", "--ns", "t", "--as-of", "2026-05-01"])
    assert q.as_of == r.as_of == datetime(2026, 5, 1, tzinfo=UTC)


def test_usage_errors_have_the_cli_error_style() -> None:
    for argv in (["replay", "--ns", "t", "--as-of", "soon"],
                 ["query", "x", "--ns", "t", "--budget", "5", "--as-of", "2026-05-01T10:00"]):
        r = run(*argv, "--redis-url", "memory://")
        assert r.returncode == 2
        assert r.stderr.startswith("hivemind: argument --as-of: "), r.stderr
        assert "--help" in r.stderr and "Traceback" not in r.stderr


def test_unknown_namespace_warns_names_it_and_still_answers_empty() -> None:
    r = run("notes", "--ns", "nobody", "--redis-url", "memory://")
    assert r.returncode == 0
    assert "hivemind: warning: namespace 'nobody' has never seen an event" in r.stderr
    assert "0 note(s) in nobody" in r.stdout
    r = run("replay", "--ns", "nobody", "--as-of", "2026-01-01", "--redis-url", "memory://")
    assert r.returncode == 0 and r.stdout == "" and "'nobody'" in r.stderr
    err = io.StringIO()
    assert cli_args.warn_unknown_namespaces(["demo", "dmeo", "dmeo"], ["demo", "ops"],
                                            err) == ["dmeo"]
    assert err.getvalue().count("\n") == 1 and "did you mean 'demo'?" in err.getvalue()


@pytest.fixture
def server_with_worker(redis_server: RedisProc) -> Iterator[str]:
    c = redis_server.client()
    c.flushall()
    env = {**os.environ, "HIVEMIND_REDIS_URL": redis_server.url}
    w = subprocess.Popen([*HIVEMIND, "worker"], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    wait_for_workers(c)
    yield redis_server.url
    w.terminate()
    w.wait(timeout=30)
    c.flushall()
    c.close()


@pytest.mark.redis_server
def test_query_on_a_mistyped_namespace_warns_and_exits_0_with_a_valid_empty_result(
        server_with_worker: str) -> None:
    url = server_with_worker
    assert run("ingest", "-", stdin=jsonl([created("n1", ns="team", text="deploy key")]),
               HIVEMIND_REDIS_URL=url).returncode == 0
    r = run("query", "deploy", "--ns", "teem", "--budget", "50", "--json",
            HIVEMIND_REDIS_URL=url)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["notes"] == []
    assert "namespace 'teem' has never seen an event" in r.stderr
    assert "did you mean 'team'?" in r.stderr
    r = run("query", "deploy", "--ns", "team", "--budget", "50", HIVEMIND_REDIS_URL=url)
    assert r.returncode == 0 and "warning" not in r.stderr and "n1" in r.stdout


def test_listing_labels_context_order_and_rank() -> None:
    notes = [{"note_id": nid, "text": nid, "tokens": 10, "score": sc, "tier": "short"}
             for nid, sc in (("a", 0.9), ("b", 0.5), ("c", 0.7))]
    body = json.dumps({"query_id": "t.1", "ns": "t", "as_of": "2026-01-01T00:00:00Z",
                       "budget": 100, "used": 30, "method": "exact", "notes": notes}).encode()
    out = io.StringIO()
    assert print_result(body, False, out) == 0
    lines = out.getvalue().splitlines()
    assert lines[1].split()[:3] == ["ctx", "rank", "note_id"]
    rows = [ln.split()[:3] for ln in lines[2:5]]
    assert rows == [["1", "1", "a"], ["2", "3", "b"], ["3", "2", "c"]]
    assert "ctx: position in the context" in out.getvalue()


def test_explain_listing_names_the_older_versions_and_the_notes_stood_for() -> None:
    """``hivemind query --explain`` read by a person: a newer version's row names the older
    notes it won over (why its score is above rel x rec), a note standing for near-identical
    ones names them; a note with neither has no mark."""
    def cand(nid: str, score: float, **marks: list[str]) -> dict[str, Any]:
        return {"note_id": nid, "chosen": nid != "old", "relevance": 0.1, "recency": 0.9,
                "score": score, "cost": 10, "tier": "short", "uses": 0, "age_days": 3.0,
                **marks}
    cands = [cand("new", 0.45, updates=["old"], stands_for=[]),
             cand("old", 0.4, updates=[], stands_for=[]),
             cand("twin", 0.09, stands_for=["twin2", "twin3"])]
    body = json.dumps({"query_id": "t.1", "ns": "t", "as_of": "2026-01-01T00:00:00Z",
                       "budget": 100, "used": 20, "method": "exact", "notes": [],
                       "candidates": cands}).encode()
    out = io.StringIO()
    assert print_result(body, False, out) == 0
    rows = {ln.split()[1] if ln.split()[0] == "*" else ln.split()[0]: ln
            for ln in out.getvalue().splitlines() if "rel=" in ln}
    assert rows["new"].endswith(" updates=old")
    assert rows["twin"].endswith(" stands_for=twin2,twin3")
    assert "updates=" not in rows["old"] and "stands_for=" not in rows["old"]


def test_explain_listing_names_the_time_window_and_the_notes_in_it() -> None:
    """A question that names a time, in ``hivemind query --explain``: a line names the window
    and its gain, and the rows of the candidates written in it say so; the others do not."""
    def cand(nid: str) -> dict[str, Any]:
        return {"note_id": nid, "chosen": True, "relevance": 0.1, "recency": 0.9,
                "score": 0.09, "cost": 10, "tier": "short", "uses": 0, "age_days": 14.0}
    window = {"words": "two weeks ago", "start": "2025-12-14T12:00:00Z",
              "end": "2025-12-22T12:00:00Z", "gain": 1.62, "notes": ["planted"]}
    body = json.dumps({"query_id": "t.1", "ns": "t", "as_of": "2026-01-01T00:00:00Z",
                       "budget": 100, "used": 20, "method": "exact", "notes": [],
                       "candidates": [cand("planted"), cand("other")],
                       "time_windows": [window]}).encode()
    out = io.StringIO()
    assert print_result(body, False, out) == 0
    text = out.getvalue()
    assert ('time window "two weeks ago": 2025-12-14T12:00:00Z to 2025-12-22T12:00:00Z, '
            "logit +1.62 at most, 1 candidate(s) written in it") in text
    rows = {ln.split()[1]: ln for ln in text.splitlines() if "rel=" in ln}
    assert rows["planted"].endswith(" in-window") and "in-window" not in rows["other"]


def test_explain_listing_names_a_passages_place_and_its_rank_after_the_best() -> None:
    """A long note's passages in ``hivemind query --explain``: each row names its place
    (1-based) and, after the note's best passage, its rank and the weight that lowered its
    score (``passage_repeat``); a whole note has neither mark."""
    def cand(index: int | None, rank: int = 0) -> dict[str, Any]:
        place = None if index is None else {"index": index, "count": 3, "start": 0, "end": 9,
                                            **({"rank": rank} if rank else {})}
        return {"note_id": "long" if place else "short", "chosen": True, "relevance": 0.1,
                "recency": 0.9, "score": 0.09, "cost": 10, "tier": "short", "uses": 0,
                "age_days": 3.0, **({"passage": place} if place else {})}
    body = json.dumps({"query_id": "t.1", "ns": "t", "as_of": "2026-01-01T00:00:00Z",
                       "budget": 100, "used": 20, "method": "exact", "notes": [],
                       "candidates": [cand(1), cand(0, 1), cand(2, 2), cand(None)]}).encode()
    out = io.StringIO()
    assert print_result(body, False, out) == 0
    rows = [ln for ln in out.getvalue().splitlines() if "rel=" in ln]
    assert rows[0].endswith(" passage=2/3")
    assert rows[1].endswith(" passage=1/3 repeat=1 (score x passage_repeat^1)")
    assert rows[2].endswith(" passage=3/3 repeat=2 (score x passage_repeat^2)")
    assert "passage=" not in rows[3] and "repeat=" not in rows[3]


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bars_only_on_a_terminal_and_only_for_big_work(monkeypatch: Any) -> None:
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    assert type(progress(1_000_000, "x")).__name__ == "_NoBar"
    monkeypatch.setattr(sys, "stderr", _Tty())
    assert type(progress(10, "x")).__name__ == "_NoBar"
    bar = progress(1_000_000, "replay")
    bar.update(5000)
    bar.close()
    assert "replay" in sys.stderr.getvalue()


def test_replay_in_a_pipe_prints_no_progress_bar(tmp_path: Path) -> None:
    r = run("replay", "--ns", "x", "--verify", "--redis-url", "memory://")
    assert r.returncode == 0 and "\r" not in r.stderr and "it/s" not in r.stderr


def test_a_busy_metrics_port_is_a_clear_usage_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = run("worker", "--burst", "--metrics-port", str(port), "--redis-url", "memory://")
    assert r.returncode == 2
    [line] = [json.loads(ln) for ln in r.stderr.splitlines()]  # a worker's stderr is its log
    assert line["event"] == "command_failed" and line["exit_status"] == 2
    assert line["message"].startswith(f"cannot serve metrics on 127.0.0.1:{port}: ")


def test_metrics_on_port_0_report_the_port_they_got(tmp_path: Path) -> None:
    """``--metrics-port 0``: the system picks the port; the worker writes it to
    ``--metrics-port-file`` and logs it in ``metrics_serving`` (what tests read instead of
    drawing a port that another process could take before the worker binds it)."""
    port_file = tmp_path / "metrics.port"
    r = run("worker", "--burst", "--metrics-port", "0", "--metrics-port-file", str(port_file),
            "--redis-url", "memory://")
    assert r.returncode == 0, r.stderr
    port = int(port_file.read_text())
    [serving] = [x for x in map(json.loads, r.stderr.splitlines())
                 if x["event"] == "metrics_serving"]
    assert serving["port"] == port and 0 < port < 65536


def test_a_worker_that_cannot_reach_redis_says_so_in_one_json_line() -> None:
    r = run("worker", "--redis-url", f"redis://127.0.0.1:{free_port()}/0")
    assert r.returncode == 2
    lines = [json.loads(ln) for ln in r.stderr.splitlines()]
    assert [x["event"] for x in lines] == ["command_failed"]
    assert lines[0]["message"].startswith("cannot connect to redis://127.0.0.1:")


def test_export_and_sweep_warn_on_an_unknown_namespace_and_answer_empty() -> None:
    r = run("export", "--ns", "nobody", "--redis-url", "memory://")
    assert r.returncode == 0 and r.stdout == ""
    assert "namespace 'nobody' has never seen an event" in r.stderr
    assert "\r" not in r.stderr  # no progress bar in a pipe
    r = run("sweep", "--ns", "nobody", "--set", "bm25_k1=1.2", "--json",
            "--redis-url", "memory://")
    assert r.returncode == 0 and "namespace 'nobody' has never seen an event" in r.stderr


def _without_store_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("HIVEMIND_")}


def test_the_default_store_is_redis_on_localhost_and_every_command_names_it() -> None:
    """Pinned (issue 21, item 7): with no ``--redis-url`` / ``HIVEMIND_REDIS_URL`` the store is
    ``redis://localhost:6379/0`` and the command says so before it connects: a line on stderr,
    a service's first log line. The commands run here stop before connecting, so the test
    touches no Redis."""
    from hivemind_memory.api_stub.protocol.settings import DEFAULT_REDIS_URL, Settings

    assert DEFAULT_REDIS_URL == "redis://localhost:6379/0"
    s = Settings.from_env({})
    assert (s.redis_url, s.redis_url_source) == (DEFAULT_REDIS_URL, "default")
    assert Settings.from_env({"HIVEMIND_REDIS_URL": ""}).redis_url_source == "default"
    assert Settings.from_env({"HIVEMIND_REDIS_URL": "memory://"}).redis_url_source == "env"
    assert Settings.from_env({"HIVEMIND_REDIS_URL": "memory://"},
                             redis_url="memory://x").redis_url_source == "flag"
    # every other command takes a store, and main names the default for all of them
    no_store = {n for n, p in _subcommands().items()
                if not any(a.dest == "redis_url" for a in p._actions)}
    # audit: its subcommands take it; fsck: its --store is required (no default to name)
    assert no_store == {"demo", "curves", "audit", "fsck"}
    env = _without_store_env()
    r = subprocess.run([*HIVEMIND, "audit", "reproduce", "--ns", "t"], env=env,
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 2
    first, second = r.stderr.splitlines()
    assert first == ("hivemind: store: redis://localhost:6379/0 (the default: no --redis-url or "
                     "HIVEMIND_REDIS_URL given; --redis-url memory://PATH keeps an embedded "
                     "store in the directory PATH instead)")
    assert second.startswith("hivemind: give QUERY_ID(s)")
    r = subprocess.run([*HIVEMIND, "serve", "--host", "0.0.0.0"], env=env, capture_output=True,
                       text=True, timeout=60, check=False)
    assert r.returncode == 2
    lines = [json.loads(ln) for ln in r.stderr.splitlines()]
    assert [x["event"] for x in lines] == ["store_default", "command_failed"]
    assert lines[0]["store"] == "redis://localhost:6379/0"


def test_a_named_store_is_not_announced() -> None:
    for argv, env in ((["--redis-url", "memory://"], {}), ([], {"HIVEMIND_REDIS_URL": "memory://"})):
        r = subprocess.run([*HIVEMIND, "notes", "--ns", "x", *argv],
                           env={**_without_store_env(), **env}, capture_output=True, text=True,
                           timeout=60, check=False)
        assert r.returncode == 0 and "hivemind: store:" not in r.stderr, r.stderr
