"""One log format: every line a worker writes in JSON mode parses as JSON (RQ's own failure
tracebacks included); a start and a stop line; one worker name across idle re-sweeps."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import structlog
from rq import Worker

from hivemind_memory.api_stub.protocol.jobs import QUERY_JOB, QUERY_QUEUE, queue
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.worker.loop import redact_url
from hivemind_memory.worker.ops import logs
from hivemind_memory.worker.ops.status import namespace_status
from tests.support import HIVEMIND, RedisProc
from tests.support.factories import created, jsonl
from tests.support.frontdoor import start_serve


@pytest.fixture
def restore_logging() -> Any:
    yield
    logs.configure(json=True, stream=io.StringIO())  # leave no handler on a closed stream


def test_json_mode_puts_our_lines_and_stdlib_tracebacks_on_one_line_each(
        restore_logging: Any) -> None:
    buf = io.StringIO()
    logs.configure(json=True, stream=buf)
    structlog.get_logger("hivemind.test").info("thing_done", ns="t", count=3)
    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        logging.getLogger("rq.worker").error("job failed:\n%s", "Traceback...\n  more",
                                             exc_info=True)
        structlog.get_logger("hivemind.test").exception("query_failed", query_id="q1")
    logging.getLogger("redis.connection").warning("redis says %s", "hi")
    lines = buf.getvalue().splitlines()
    objs = [json.loads(ln) for ln in lines]
    assert len(objs) == 4
    assert objs[0]["event"] == "thing_done" and objs[0]["count"] == 3
    assert objs[0]["level"] == "info" and objs[0]["logger"] == "hivemind.test"
    assert objs[1]["logger"] == "rq.worker" and "ValueError: boom" in objs[1]["exception"]
    assert objs[2]["event"] == "query_failed" and "Traceback" in objs[2]["exception"]
    assert objs[3]["level"] == "warning" and objs[3]["event"] == "redis says hi"
    assert all("timestamp" in o for o in objs)


def test_console_mode_is_readable_not_json(restore_logging: Any) -> None:
    buf = io.StringIO()
    logs.configure(json=False, stream=buf)
    structlog.get_logger("hivemind.test").info("thing_done", ns="t")
    line = buf.getvalue().strip()
    assert "thing_done" in line and "ns=t" in line
    with pytest.raises(json.JSONDecodeError):
        json.loads(line)


def test_json_is_the_default_when_the_stream_is_not_a_terminal(restore_logging: Any) -> None:
    buf = io.StringIO()  # isatty() is False
    logs.configure(stream=buf)
    structlog.get_logger("x").info("e")
    assert json.loads(buf.getvalue())["event"] == "e"


def test_redact_hides_the_password_only() -> None:
    assert redact_url("redis://:s3cret@db:6379/0") == "redis://:***@db:6379/0"
    assert redact_url("redis://user:pw@db/1") == "redis://user:***@db/1"
    assert redact_url("redis://db:6379/0") == "redis://db:6379/0"


def _wait(cond: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)  # polling an external process, bounded by the deadline


@pytest.mark.redis_server
def test_worker_json_lines_start_stop_and_one_name_across_idle_sweeps(
        redis_factory: Callable[..., RedisProc], tmp_path: Path) -> None:
    rp = redis_factory(appendonly=False)
    env = {**os.environ, "HIVEMIND_REDIS_URL": rp.url}
    err = (tmp_path / "worker.err").open("w+")
    w = subprocess.Popen([*HIVEMIND, "worker", "--sweep-every", "1"], env=env,
                         stdout=subprocess.DEVNULL, stderr=err)
    c = rp.client()
    try:
        _wait(lambda: len(Worker.all(connection=c)) == 1, 30, "the worker to register")
        [first] = Worker.all(connection=c)
        names = {first.name}
        for round_ in range(2):  # appended without scheduling: only the idle sweep finds them
            evs = [created(f"n{round_}-{i}", ns="idle") for i in range(5)]
            r = subprocess.run([*HIVEMIND, "ingest", "-", "--no-schedule"], input=jsonl(evs),
                               env=env, capture_output=True, text=True, timeout=60, check=False)
            assert r.returncode == 0, r.stderr
            _wait(lambda: namespace_status(c, "idle", _now()).lag_entries == 0, 30,
                  "an idle sweep to schedule the namespace")
            names |= {x.name for x in Worker.all(connection=c)}
        # a job that fails inside RQ: its traceback must come out as one JSON line
        queue(c, QUERY_QUEUE, Settings()).enqueue(QUERY_JOB, ["not an envelope"])
        _wait(lambda: Worker.all(connection=c)[0].failed_job_count >= 1, 30, "the failure")
        [now_w] = Worker.all(connection=c)
        assert names == {first.name}  # one registration for the whole run
        assert now_w.successful_job_count >= 2  # counters kept across idle sweeps
    finally:
        w.send_signal(signal.SIGTERM)
        w.wait(timeout=30)
        c.close()
        if w.returncode != 0:
            err.close()
    assert w.returncode == 0
    err.seek(0)
    text = err.read()
    err.close()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    objs = [json.loads(ln) for ln in lines]  # every line is JSON
    events = [o["event"] for o in objs]
    start = objs[events.index("worker_started")]
    assert start["name"] == first.name and start["config_digest"]
    assert start["queues"] == ["hivemind-query", "hivemind-project"]
    stop = objs[events.index("worker_stopped")]
    assert stop["reason"] == "signal SIGTERM" and stop["jobs"] >= 3
    failures = [o for o in objs if o.get("logger", "").startswith("rq")
                and o["level"] == "error"]
    assert failures and "Traceback" in failures[0]["event"]


def _now() -> datetime:
    return datetime.now(UTC)


def test_serve_writes_only_json_lines(tmp_path: Path) -> None:
    srv = start_serve(["--redis-url", "memory://data"], tmp_path)
    try:
        for path in ("/healthz", "/metrics", "/no-such-page"):
            try:
                with urllib.request.urlopen(srv.base + path, timeout=10) as resp:
                    resp.read()
            except urllib.error.HTTPError as exc:
                assert exc.code == 404 and path == "/no-such-page"
    finally:
        srv.stop()
    lines = [ln for ln in srv.stderr.read_text().splitlines() if ln.strip()]
    objs = [json.loads(ln) for ln in lines]  # every line is JSON
    events = [o["event"] for o in objs]
    assert "serve_started" in events and "serve_without_tokens" in events
    started = objs[events.index("serve_started")]
    assert started["url"].startswith("http://127.0.0.1:") and started["metrics"] == "/metrics"


def test_serve_refusal_is_a_log_line_too(tmp_path: Path) -> None:
    r = subprocess.run([*HIVEMIND, "serve", "--host", "0.0.0.0", "--redis-url", "memory://"],
                       capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path)
    assert r.returncode == 2
    [line] = [json.loads(ln) for ln in r.stderr.splitlines()]
    assert line["event"] == "command_failed" and "without --tokens" in line["message"]


def test_a_flood_of_one_kind_of_line_is_rate_limited_with_a_count() -> None:
    """50 lines of a kind at once, then 10 a second; the next line written says how many
    were dropped; another kind of line is not held back by the flood."""
    import io
    import logging

    from hivemind_memory.worker.ops.logs import RateLimit

    now = [0.0]
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(RateLimit(burst=50, rate=10.0, clock=lambda: now[0]))
    lg = logging.getLogger("test.flood")
    lg.propagate = False
    lg.addHandler(handler)
    try:
        for _ in range(10_000):
            lg.error("accept failed: too many open files")
        lg.error("another kind")
        assert out.getvalue().count("accept failed") == 50
        assert out.getvalue().count("another kind") == 1
        now[0] = 0.1  # one line's worth of tokens later
        lg.error("accept failed: too many open files")
        lines = out.getvalue().splitlines()
        assert lines[-1] == "accept failed: too many open files [suppressed 9950 like this]"
        lg.error("accept failed: too many open files")
        assert len(out.getvalue().splitlines()) == len(lines)  # the bucket is empty again
        now[0] = 100.0
        for _ in range(60):
            lg.error("accept failed: too many open files")
        assert out.getvalue().count("accept failed") == 51 + 50  # refilled to the burst only
    finally:
        lg.removeHandler(handler)


def test_the_configured_log_is_rate_limited() -> None:
    """``configure`` puts the limit on the one handler every line goes through."""
    import io

    import structlog

    from hivemind_memory.worker.ops import logs

    out = io.StringIO()
    logs.configure(json=True, stream=out)
    try:
        log = structlog.get_logger("hivemind.http")
        for i in range(1000):
            log.warning("http_request", status=503, n=i)
        assert 50 <= out.getvalue().count('"http_request"') < 1000
        for i in range(1000):
            log.info("http_request", status=200, n=i)  # info lines are never held back
        assert out.getvalue().count('"status": 200') == 1000
    finally:
        logs.configure(json=True, stream=io.StringIO())
