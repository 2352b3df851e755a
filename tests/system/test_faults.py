"""Fault suites against a real redis-server, bounded for the default run; set
``HIVEMIND_SOAK=1`` for the long variants (more trials, longer load).

* a worker SIGKILLed at random points, many times, then a burst: nothing lost, nothing
  counted twice (live == pure fold == counts from the file alone, ``replay --verify`` 0);
* Redis ``kill -9`` (AOF, ``appendfsync always``) under load, writers and a worker running:
  no acknowledged append is lost, and the projection is exact;
* SIGTERM: the worker finishes the batch (and job) it is in, releases the lease, exits 0;
* writers, workers and query clients together for a bounded time: every query answered.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from rq.registry import StartedJobRegistry

from bench.data import generate
from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol import jobs
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.events.codec import decode_event
from hivemind_memory.events.errors import HivemindError
from hivemind_memory.events.positions import parse_pos
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.connection import connect
from hivemind_memory.projections.store.log import iter_all
from hivemind_memory.projections.store.readmodel import checkpoint, project_batch
from tests.support import HIVEMIND, RedisProc
from tests.support.beats import wait_for_workers
from tests.system.test_crash import (  # noqa: F401
    Progress,
    _cli,
    _env,
    _merge,
    assert_consistent,
    spawn,
)

pytestmark = pytest.mark.redis_server

SOAK = os.environ.get("HIVEMIND_SOAK", "") == "1"
"""Long variants: ``HIVEMIND_SOAK=1 pytest tests/system/test_faults.py``."""
KILL_TRIALS = 100 if SOAK else 12
REDIS_KILLS = 10 if SOAK else 3
LOAD_SECONDS = 120.0 if SOAK else 8.0


def test_worker_sigkilled_at_random_points_loses_and_doubles_nothing(
        redis_factory: Callable[..., RedisProc], spawn: Callable[..., Any],  # noqa: F811
        tmp_path: Path) -> None:
    rp = redis_factory()
    r = rp.client()
    namespaces = ["k-a", "k-b"]
    path = tmp_path / "e.jsonl"
    exp = generate(path, 600 * KILL_TRIALS, namespaces, seed=11)
    done = _cli(rp.url, "ingest", str(path))
    assert done.returncode == 0, done.stderr
    prog = Progress(r, namespaces)
    rng = random.Random(8)
    targets = sorted(rng.uniform(0, 0.95) for _ in range(KILL_TRIALS))
    kills = []
    for share in targets:
        w = spawn(rp.url)
        prog.wait(int(prog.total * share), w)
        # not a wait for work: moves the kill to a random point of the next batch
        time.sleep(rng.uniform(0, 0.05))
        w.send_signal(signal.SIGKILL)
        w.wait(timeout=10)
        kills.append(prog.done())
    assert len(kills) == KILL_TRIALS and sum(0 < k < prog.total for k in kills) >= \
        KILL_TRIALS // 2, kills
    done = _cli(rp.url, "worker", "--burst", timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert_consistent(r, rp.url, namespaces, [path], exp)
    print(f"worker SIGKILL trials: {KILL_TRIALS}, killed at {kills} of {prog.total}")


class Writer(threading.Thread):
    """Appends a file's lines in small chunks through ``Client.append``; a chunk that fails
    is re-sent until acknowledged (safe: a repeated event_id is applied once)."""

    def __init__(self, url: str, path: Path, chunk: int = 20) -> None:
        super().__init__(daemon=True)
        self.url, self.chunk = url, chunk
        self.lines = [json.loads(x) for x in path.read_text().splitlines()]
        self.acked: set[tuple[str, str]] = set()
        self.n_acked = 0
        self.failures = 0
        self.cond = threading.Condition()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            c: Client | None = None
            i = 0
            while i < len(self.lines):
                part = self.lines[i:i + self.chunk]
                try:
                    if c is None:
                        c = Client(connect(self.url), settings=Settings(redis_url=self.url))
                    c.append(part)
                except (redis.RedisError, HivemindError):
                    self.failures += 1  # Redis is down: send the same chunk again
                    c = None
                    continue
                with self.cond:
                    self.acked |= {(d["ns"], d["event_id"]) for d in part}
                    self.n_acked = i = i + len(part)
                    self.cond.notify_all()
        except BaseException as exc:  # surfaced by the test
            self.error = exc
            with self.cond:
                self.cond.notify_all()

    def wait_acked(self, n: int, timeout: float = 60) -> None:
        with self.cond:
            assert self.cond.wait_for(lambda: self.n_acked >= n or self.error is not None
                                      or not self.is_alive(), timeout), "writer stuck"
        assert self.error is None, self.error


def test_redis_kill9_under_load_loses_no_acknowledged_append(
        redis_factory: Callable[..., RedisProc], spawn: Callable[..., Any],  # noqa: F811
        tmp_path: Path) -> None:
    rp = redis_factory()  # AOF, appendfsync always
    namespaces = ["l-a", "l-b", "l-c"]
    files = [tmp_path / f"w{i}.jsonl" for i in range(2)]
    exps = [generate(f, 1500 * REDIS_KILLS, namespaces, seed=20 + i, tag=f"w{i}")
            for i, f in enumerate(files)]
    writers = [Writer(rp.url, f) for f in files]
    w = spawn(rp.url)
    for wr in writers:
        wr.start()
    total = len(writers[0].lines)
    for k in range(1, REDIS_KILLS + 1):
        writers[0].wait_acked(total * k // (REDIS_KILLS + 1))
        rp.stop(sig_kill=True)  # kill -9 under load
        rp.start()  # same dir and port: the AOF is replayed
        if w.poll() is not None:  # the worker died mid-job: its supervisor restarts it
            w = spawn(rp.url)
    for wr in writers:
        wr.join(timeout=120)
        assert not wr.is_alive() and wr.error is None, wr.error
    r = rp.client()
    logged: set[tuple[str, str]] = set()
    for ns in namespaces:
        logged |= {(ns, decode_event(f[b"d"]).event_id) for _, f in iter_all(r, ns)}
    acked = writers[0].acked | writers[1].acked
    lost = acked - logged
    assert not lost, f"{len(lost)} acknowledged event(s) lost"
    w.send_signal(signal.SIGKILL)
    w.wait(timeout=10)
    done = _cli(rp.url, "worker", "--burst", timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert_consistent(r, rp.url, namespaces, files, _merge(exps[0], exps[1]))
    print(f"redis kill -9: {REDIS_KILLS}, acknowledged {len(acked)}, lost {len(lost)}, "
          f"re-sent chunks {sum(wr.failures for wr in writers)}")


def test_sigterm_finishes_the_batch_and_exits_cleanly(
        redis_factory: Callable[..., RedisProc], spawn: Callable[..., Any],  # noqa: F811
        tmp_path: Path) -> None:
    rp = redis_factory(appendonly=False)
    r = rp.client()
    ns = "term"
    path = tmp_path / "e.jsonl"
    exp = generate(path, 20_000, [ns], seed=4)
    done = _cli(rp.url, "ingest", str(path))
    assert done.returncode == 0, done.stderr
    prog = Progress(r, [ns])
    w = spawn(rp.url)
    prog.wait(prog.total // 10, w)
    w.send_signal(signal.SIGTERM)
    assert w.wait(timeout=60) == 0
    # the batch (and the job) in progress finished: a batch boundary, no lease left, no job
    # abandoned in RQ's started registry
    cp = checkpoint(r, ns)
    ids = [eid for eid, _ in iter_all(r, ns)]
    done_n = sum(parse_pos(e) <= cp for e in ids)
    assert 0 < done_n < prog.total
    assert not r.exists(keys.lock(ns))
    assert StartedJobRegistry(jobs.PROJECT_QUEUE, connection=r).count == 0
    done = _cli(rp.url, "worker", "--burst", timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert_consistent(r, rp.url, [ns], [path], exp)


def test_writers_workers_and_readers_together_for_a_bounded_time(
        redis_factory: Callable[..., RedisProc], spawn: Callable[..., Any],  # noqa: F811
        tmp_path: Path) -> None:
    rp = redis_factory(appendonly=False)
    namespaces = ["c-a", "c-b"]
    files = [tmp_path / f"w{i}.jsonl" for i in range(2)]
    n = int(3000 * LOAD_SECONDS / 8)
    exps = [generate(f, n, namespaces, seed=30 + i, tag=f"c{i}") for i, f in enumerate(files)]
    workers = [spawn(rp.url), spawn(rp.url)]
    wait_for_workers(connect(rp.url))  # a query before their first heartbeat: shard_unavailable
    writers = [Writer(rp.url, f, chunk=10) for f in files]
    for wr in writers:
        wr.start()
    c = Client(connect(rp.url), settings=Settings(redis_url=rp.url))
    answered = errors = 0
    deadline = time.monotonic() + LOAD_SECONDS
    rng = random.Random(3)
    while time.monotonic() < deadline:
        qids = c.submit_batch([{"ns": rng.choice(namespaces), "text": rng.choice(
            ["redis stream", "lease batch", "agent budget"]), "budget": 200,
            "agent": "a0"} for _ in range(5)])
        for body in c.batch_results(qids, timeout=60):
            res = json.loads(body)
            answered += "error" not in res
            errors += "error" in res
    for wr in writers:
        wr.join(timeout=120)
        assert not wr.is_alive() and wr.error is None, wr.error
    assert errors == 0 and answered > 0
    for w in workers:
        assert w.poll() is None, "a worker died under load"
        w.send_signal(signal.SIGTERM)
        assert w.wait(timeout=60) == 0
    r = rp.client()
    done = _cli(rp.url, "worker", "--burst", timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert_consistent(r, rp.url, namespaces, files, _merge(exps[0], exps[1]))
    print(f"load {LOAD_SECONDS:g}s: {2 * n} events appended by 2 writers, 2 workers, "
          f"{answered} queries answered, {errors} errors")


def test_replay_while_a_worker_projects_keeps_every_dead_letter_once(
        redis_factory: Callable[..., RedisProc], tmp_path: Path) -> None:
    """Reproduction: under concurrency replay kept 5,940 of 8,852 dead letters (it
    moved the checkpoint past entries whose dead letters nobody then wrote)."""
    rp = redis_factory(appendonly=False)
    r = rp.client()
    ns = "rd"
    path = tmp_path / "e.jsonl"
    exp = generate(path, 12_000, [ns], seed=12)
    assert exp.dead[ns] > 100
    done = _cli(rp.url, "ingest", "--no-schedule", str(path))
    assert done.returncode == 0, done.stderr
    for _ in range(5):  # the live projector got some way
        project_batch(r, ns, 500)
    # a worker (small batches: it takes a while) and replays compete for the namespace
    env = {**_env(rp.url), "HIVEMIND_BATCH_SIZE": "20", "HIVEMIND_MAX_BATCHES_PER_JOB": "5"}
    w = subprocess.Popen([*HIVEMIND, "worker"], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        for _ in range(3):
            rep = subprocess.run([*HIVEMIND, "replay", "--ns", ns], env=env,
                                 capture_output=True, text=True, timeout=120, check=False)
            assert rep.returncode == 0, rep.stderr[-2000:]
        prog = Progress(r, [ns])
        prog.wait(prog.total, w)
    finally:
        w.send_signal(signal.SIGTERM)
        assert w.wait(timeout=60) == 0
    assert_consistent(r, rp.url, [ns], [path], exp)  # includes xlen(dead) == expected
