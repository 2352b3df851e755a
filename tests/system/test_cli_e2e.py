"""The CLI as a user runs it, against a private redis-server: a worker in one process,
ingest and query from others."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from rq import Queue

from hivemind_memory.api_stub.protocol.jobs import QUERY_QUEUE
from tests.support import HIVEMIND
from tests.support.beats import wait_for_workers
from tests.support.factories import created, forgotten, jsonl, used

pytestmark = pytest.mark.redis_server


def run(url: str, *args: str, stdin: str | None = None, timeout: float = 60,
        **env: str) -> subprocess.CompletedProcess[str]:
    e = {**os.environ, "HIVEMIND_REDIS_URL": url, **env}
    return subprocess.run([*HIVEMIND, *args], input=stdin, capture_output=True, text=True,
                          env=e, timeout=timeout, check=False)


@pytest.fixture
def worker(server: str) -> Iterator[subprocess.Popen[bytes]]:
    env = {**os.environ, "HIVEMIND_REDIS_URL": server}
    p = subprocess.Popen([*HIVEMIND, "worker"], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    # a query asked before the worker's first heartbeat gets shard_unavailable, as it should
    wait_for_workers(redis.Redis.from_url(server))
    yield p
    p.terminate()
    try:
        p.wait(timeout=15)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def test_ingest_then_query_from_another_shell_sees_the_new_note(
        server: str, worker: Any, tmp_path: Path) -> None:
    f = tmp_path / "ev.jsonl"
    f.write_text(jsonl([created("n1", text="the deploy key lives in vault"),
                        created("n2", text="lunch at noon")]))
    r = run(server, "ingest", str(f))
    assert r.returncode == 0, r.stderr
    q = run(server, "query", "the deploy key", "--ns", "t", "--budget", "100",
            "--json", "--timeout", "30")
    assert q.returncode == 0, q.stderr + q.stdout
    res = json.loads(q.stdout)
    assert [n["note_id"] for n in res["notes"]] == ["n1"]
    # written a moment before the next query, by yet another process
    r = run(server, "ingest", "-", stdin=jsonl([created("n3", text="deploy key rotated")]))
    assert r.returncode == 0, r.stderr
    q = run(server, "query", "deploy key", "--ns", "t", "--budget", "100", "--json")
    assert {n["note_id"] for n in json.loads(q.stdout)["notes"]} == {"n1", "n3"}
    q = run(server, "query", "deploy key", "--ns", "t", "--budget", "100")
    assert q.returncode == 0 and "used " in q.stdout and "n3" in q.stdout


def test_ingest_exit_codes_and_all_or_nothing(server: str, tmp_path: Path) -> None:
    f = tmp_path / "ev.jsonl"
    f.write_text(jsonl([created("n1")]) + '{"type":"note.used","event_id":"x"}\n')
    r = run(server, "ingest", str(f), "--no-schedule")
    assert r.returncode == 1 and "line 2" in r.stderr and "nothing appended" in r.stderr
    notes = run(server, "replay", "--ns", "t", "--verify")
    assert "0 live note(s), 0 rebuilt" in notes.stdout
    r = run(server, "ingest", str(f), "--skip-invalid", "--no-schedule")
    assert r.returncode == 1 and "appended 1" in r.stderr
    r = run(server, "ingest", str(tmp_path / "missing.jsonl"))
    assert r.returncode == 2 and "cannot read" in r.stderr
    r = run(server, "ingest", str(tmp_path))
    assert r.returncode == 2 and "Is a directory" in r.stderr and "Traceback" not in r.stderr
    r = run(server, "batch", str(tmp_path / "missing.jsonl"))
    assert r.returncode == 2 and "cannot read" in r.stderr
    r = run("redis://127.0.0.1:1/0", "ingest", str(f))
    assert r.returncode == 2 and "cannot connect" in r.stderr


def test_worker_burst_notes_replay(server: str, tmp_path: Path) -> None:
    f = tmp_path / "ev.jsonl"
    f.write_text(jsonl([created("a", scope="private", kind="scratch", tokens=42),
                        *[used("a", f"u{i}", agent="a") for i in range(5)],
                        used("a", "u0", agent="a"),  # a private note: used by its author
                        created("b"), forgotten("b", "fb")]))
    assert run(server, "ingest", str(f)).returncode == 0
    b = run(server, "worker", "--burst")
    assert b.returncode == 0, b.stderr
    assert '"event": "projection_batch"' in b.stderr
    out = run(server, "notes", "--ns", "t", "--json")
    rows = [json.loads(x) for x in out.stdout.splitlines()]
    assert list(rows[0]) == ["note_id", "agent", "scope", "kind", "tokens",
                                          "created_at", "uses", "last_used_at", "tier",
                                          "forgotten", "text", "version", "revised_at",
                                          "superseded_by", "erased", "metadata", "expires_at"]
    a, bb = rows
    assert (a["uses"], a["tier"], a["scope"], a["kind"], a["tokens"]) == \
        (5, "longterm", "private", "scratch", 42)
    assert bb["forgotten"] is True
    assert run(server, "replay", "--ns", "t", "--verify").returncode == 0
    # another ranking config is not drift: the read model holds facts, tiers come from the
    # config of whoever lists the notes
    cfg = tmp_path / "ten.toml"
    cfg.write_text("longterm_uses = 10\n")
    assert run(server, "replay", "--ns", "t", "--verify", "--config", str(cfg)).returncode == 0
    rows10 = [json.loads(x) for x in run(server, "notes", "--ns", "t", "--json", "--config",
                                         str(cfg)).stdout.splitlines()]
    assert (rows10[0]["uses"], rows10[0]["tier"]) == (5, "scratch")
    import redis

    redis.Redis.from_url(server).hdel("hm:{t}:notes", "a")
    v = run(server, "replay", "--ns", "t", "--verify")
    assert v.returncode == 1 and "1 difference" in v.stdout
    assert run(server, "replay", "--ns", "t").returncode == 0
    assert run(server, "replay", "--ns", "t", "--verify").returncode == 0
    asof = run(server, "replay", "--ns", "t", "--as-of", "2026-01-01T12:00:00Z")
    assert [json.loads(x)["uses"] for x in asof.stdout.splitlines()] == [0, 0]


def test_query_errors_and_batch(server: str, tmp_path: Path) -> None:
    q = run(server, "query", "x", "--ns", "t", "--budget", "0", "--json")
    assert q.returncode == 1
    err = json.loads(q.stdout)
    assert err["error"]["code"] == "invalid_request" and "budget" in err["error"]["message"]
    q = run(server, "query", "x", "--ns", "t", "--budget", "5", "--timeout", "0.3")
    assert q.returncode == 1 and "shard_unavailable" in q.stdout  # no worker: said, no hang
    assert "no worker is running for namespace 't'" in q.stdout
    assert run(server, "ingest", "-", stdin=jsonl([created("n1", text="alpha")])).returncode == 0
    bf = tmp_path / "q.jsonl"
    bf.write_text('{"ns":"t","text":"alpha","budget":10}\nnot json\n'
                  '{"ns":"t","text":"alpha","budget":10,"agent":"bad agent"}\n'
                  # nearest off: in a one-note namespace a query that finds nothing by its
                  # words answers with its nearest note by meaning (calibration.nearest)
                  '{"ns":"t","text":"beta","budget":10,'
                  '"config":{"calibration":{"nearest":0}}}\n')
    env = {**os.environ, "HIVEMIND_REDIS_URL": server}
    w = subprocess.Popen([*HIVEMIND, "worker"], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        wait_for_workers(redis.Redis.from_url(server))
        b = run(server, "batch", str(bf), "--timeout", "30")
    finally:
        w.terminate()
        w.wait(timeout=15)
    out, errtxt = b.stdout, b.stderr
    lines = [json.loads(x) for x in out.splitlines()]
    assert len(lines) == 4 and b.returncode == 1, errtxt
    assert [n["note_id"] for n in lines[0]["notes"]] == ["n1"]
    assert "line 2" in lines[1]["error"]["message"]
    assert "line 3" in lines[2]["error"]["message"] and "agent" in lines[2]["error"]["message"]
    assert lines[3]["notes"] == []
    assert "2 error(s)" in errtxt


def test_redis_error_mid_ingest_is_exit_2_with_a_clear_message(
        redis_factory: Any, tmp_path: Path) -> None:
    rp = redis_factory(appendonly=False)
    rp.client().config_set("maxmemory", "2mb")
    f = tmp_path / "big.jsonl"
    f.write_text(jsonl([created(f"n{i}", text="x" * 500) for i in range(20_000)]))
    r = run(rp.url, "ingest", str(f))
    assert r.returncode == 2, r.stderr[-500:]
    assert "then the store failed" in r.stderr and "maxmemory" in r.stderr
    assert "Traceback" not in r.stderr and "XADD" not in r.stderr
    # the count said is the exact count in the log (it was under-reported)
    said = int(re.search(r"appended (\d+) event", r.stderr).group(1))  # type: ignore[union-attr]
    db = rp.client()
    assert said == db.xlen("hm:{t}:events") > 0
    # a NEW namespace hitting maxmemory mid-append: exact count, and if anything landed the
    # namespace is registered and scheduled, so a worker projects it
    g = tmp_path / "fresh.jsonl"
    g.write_text(jsonl([created(f"m{i}", ns="fresh", text="y" * 500) for i in range(3000)]))
    db.config_set("maxmemory", str(int(db.info("memory")["used_memory"]) + 150_000))
    r = run(rp.url, "ingest", str(g))
    assert r.returncode == 2, r.stderr[-500:]
    said = int(re.search(r"appended (\d+) event", r.stderr).group(1))  # type: ignore[union-attr]
    assert said == db.xlen("hm:{fresh}:events") > 0, r.stderr
    assert db.sismember("hm:namespaces", "fresh")
    assert db.exists("hm:{fresh}:scheduled")
    db.config_set("maxmemory", "0")
    w = run(rp.url, "worker", "--burst")
    assert w.returncode == 0, w.stderr[-2000:]
    for ns in ("t", "fresh"):
        assert db.get(f"hm:{{{ns}}}:checkpoint") == db.xrevrange(
            f"hm:{{{ns}}}:events", count=1)[0][0]


def _workers(url: str, n: int) -> list[subprocess.Popen[bytes]]:
    """``n`` ``hivemind worker`` processes, returned once RQ counts them all on the query
    queue (each blocked on it, so a batch's jobs go to both at once)."""
    from rq import Worker

    env = {**os.environ, "HIVEMIND_REDIS_URL": url}
    procs = [subprocess.Popen([*HIVEMIND, "worker"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for _ in range(n)]
    r = redis.Redis.from_url(url)
    deadline = time.monotonic() + 60
    while Worker.count(connection=r, queue=Queue(QUERY_QUEUE, connection=r)) < n:
        assert time.monotonic() < deadline, f"{n} workers did not register"
        time.sleep(0.05)  # other processes starting: nothing to block on
    wait_for_workers(r)
    return procs


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait(timeout=15)


@pytest.mark.slow
def test_a_batch_answers_the_same_bytes_in_input_order_whatever_the_worker_count(
        server: str, tmp_path: Path) -> None:
    # as-of queries: the same log and query give the same id and bytes on any worker, so the
    # outputs of one and two workers compare byte for byte (the second run's results are
    # deleted first: an as-of query already answered is not asked again)
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]
    assert run(server, "ingest", "-", stdin=jsonl([
        created(f"n{i}", text=f"{words[i % 6]} {words[(i * 5) % 6]} note {i}")
        for i in range(40)])).returncode == 0
    bf = tmp_path / "q.jsonl"
    bf.write_text("".join(json.dumps({
        "ns": "t", "text": f"{words[i % 6]} {words[(i * 7 + 1) % 6]}", "budget": 5 + i % 40,
        "as_of": "2031-01-01T00:00:00Z"}) + "\n" for i in range(120)))
    r = redis.Redis.from_url(server)
    outs = []
    for n in (1, 2):
        for key in r.scan_iter(match="hm:*:result:*"):
            r.delete(key)
        procs = _workers(server, n)
        before = {k for k in r.scan_iter(match="rq:job:*")}
        try:
            b = run(server, "batch", str(bf), "--timeout", "120")
        finally:
            _stop(procs)
        assert b.returncode == 0, b.stderr
        outs.append(b.stdout)
        jobs = [r.hget(k, "worker_name") for k in set(r.scan_iter(match="rq:job:*")) - before
                if (r.hget(k, "description") or b"").startswith(b"answer ")]
        if n == 2:  # the batch was split and both workers answered part of it
            assert len(jobs) >= 2 and len(set(jobs)) == 2, jobs
    lines = outs[0].splitlines()
    assert len(lines) == 120 and outs[1] == outs[0]
    got = [json.loads(x) for x in lines]
    assert [g["budget"] for g in got] == [5 + i % 40 for i in range(120)]  # input order
    assert sum(len(g["notes"]) for g in got) > 60 and not any("error" in g for g in got)
