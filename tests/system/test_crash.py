"""Crash tests on a real redis-server with AOF: kill the worker (or Redis) anywhere, start it
again, and the projection neither loses nor double-counts anything.

The reference is twofold: the pure fold of the same log (``fold_log``) and use counts computed
here, from the generated file alone (distinct ``note.used`` event_ids per note, counted while
the note existed and was not forgotten).
"""

from __future__ import annotations

import bisect
import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from rq import Queue

from bench.data import Expected, generate
from hivemind_memory.api_stub.protocol import jobs
from hivemind_memory.api_stub.protocol.serializer import JSONSerializer
from hivemind_memory.events.positions import parse_pos
from hivemind_memory.projections.ranking.config import RankingConfig
from hivemind_memory.projections.state import tier_of
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.ingest import ingest
from hivemind_memory.projections.store.log import iter_all, tail
from hivemind_memory.projections.store.readmodel import (
    checkpoint,
    commit,
    prepare_batch,
    project_batch,
    read_notes,
)
from hivemind_memory.projections.store.rebuild import fold_log
from tests.support import HIVEMIND, RedisProc

pytestmark = pytest.mark.redis_server

CFG = RankingConfig()
BATCH = 200
LEASE_MS = 1000


# ---------------------------------------------------------------- helpers


def _env(url: str) -> dict[str, str]:
    return {**os.environ, "HIVEMIND_REDIS_URL": url, "HIVEMIND_BATCH_SIZE": str(BATCH),
            "HIVEMIND_LOCK_LEASE_MS": str(LEASE_MS)}


def _cli(url: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run the real ``hivemind`` command line against the private server."""
    return subprocess.run([*HIVEMIND, *args], env=_env(url),
                          capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start ``hivemind worker`` processes (logs in tmp_path); kill any left at teardown."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(url: str, *args: str) -> subprocess.Popen[bytes]:
        log = open(tmp_path / f"worker-{len(procs)}.log", "wb")  # noqa: SIM115 (closed below)
        p = subprocess.Popen([*HIVEMIND, "worker", *args],
                             env=_env(url), stdout=log, stderr=log)
        log.close()  # the child holds its own descriptor
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)


def independent_counts(path: Path) -> tuple[dict[tuple[str, str], int], set[tuple[str, str]]]:
    """Uses per created note and the forgotten notes, from the JSON Lines file alone."""
    created: set[tuple[str, str]] = set()
    forgotten: set[tuple[str, str]] = set()
    seen: set[tuple[str, str]] = set()
    uses: dict[tuple[str, str], int] = {}
    with open(path, "rb") as fh:
        for line in fh:
            d = json.loads(line)
            note, eid = (d["ns"], d["note_id"]), (d["ns"], d["event_id"])
            if eid in seen:
                continue  # a redelivery
            seen.add(eid)
            if d["type"] == "note.created" and note not in created:
                created.add(note)
                uses[note] = 0
            elif note in created and note not in forgotten:
                if d["type"] == "note.used":
                    uses[note] += 1
                elif d["type"] == "note.forgotten":
                    forgotten.add(note)
    return uses, forgotten


class Progress:
    """How many stream entries of the given namespaces are at or before their checkpoints."""

    def __init__(self, r: Any, namespaces: list[str]) -> None:
        self.r = r
        self.ids = {ns: [parse_pos(eid) for eid, _ in iter_all(r, ns)] for ns in namespaces}
        self.total = sum(len(v) for v in self.ids.values())

    def done(self) -> int:
        return sum(bisect.bisect_right(ids, checkpoint(self.r, ns))
                   for ns, ids in self.ids.items())

    def wait(self, at_least: int, proc: subprocess.Popen[bytes] | None,
             timeout_s: float = 60) -> int:
        """Block on the namespaces' changes streams until ``done() >= at_least``."""
        deadline = time.monotonic() + timeout_s
        after = {keys.changes(ns): b"0-0" for ns in self.ids}
        for k in after:
            got = self.r.xrevrange(k, count=1)
            after[k] = got[0][0] if got else b"0-0"
        while (n := self.done()) < at_least:
            assert proc is None or proc.poll() is None, f"worker exited with {proc.returncode}"
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"projection stuck at {n}/{self.total} (wanted {at_least})"
            for k, entries in self.r.xread(after, block=max(1, int(min(remaining, 0.2) * 1000))):
                after[k.decode()] = entries[-1][0]
        return n


def assert_consistent(r: Any, url: str, namespaces: list[str], files: list[Path],
                      exp: Expected) -> None:
    """Live == pure fold, ``replay --verify`` passes, counts == the independent counts."""
    verifies = [subprocess.Popen([*HIVEMIND, "replay", "--ns", ns,
                                  "--verify"], env=_env(url), stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT) for ns in namespaces]
    outputs: list[bytes] = []
    try:
        uses: dict[tuple[str, str], int] = {}
        forgotten: set[tuple[str, str]] = set()
        for f in files:
            u, g = independent_counts(f)
            uses.update(u)
            forgotten |= g
        assert uses == exp.uses, "the test's own count and the generator disagree"
        assert forgotten == exp.forgotten
        for ns in namespaces:
            assert checkpoint(r, ns) == tail(r, ns)
            live = read_notes(r, ns)
            rebuilt = fold_log(r, ns)
            assert live == rebuilt.projection.notes
            got = {nid: n.uses for nid, n in live.items()}
            assert got == {nid: u for (ens, nid), u in uses.items() if ens == ns}
            assert {nid for nid, n in live.items() if n.forgotten} == {
                nid for (ens, nid) in forgotten if ens == ns}
            for nid, n in live.items():
                assert tier_of(n.uses, n.kind, CFG) == exp.tier((ns, nid), CFG.longterm_uses), nid
            # dead letters and seen ids are written in the same commit: never twice, never lost
            assert r.xlen(keys.dead(ns)) == exp.dead[ns] == len(rebuilt.projection.dead)
            assert r.scard(keys.seen(ns)) == exp.distinct_event_ids[ns]
    finally:  # collect the verifies (and never leave them running)
        for v in verifies:
            outputs.append(v.communicate(timeout=60)[0])
    for ns, v, out in zip(namespaces, verifies, outputs, strict=True):
        assert v.returncode == 0, f"replay --ns {ns} --verify: {out.decode()[-2000:]}"


def _merge(a: Expected, b: Expected) -> Expected:
    return Expected(
        events=a.events + b.events, uses={**a.uses, **b.uses}, kinds={**a.kinds, **b.kinds},
        forgotten=a.forgotten | b.forgotten,
        dead={ns: a.dead.get(ns, 0) + b.dead.get(ns, 0) for ns in a.dead | b.dead},
        distinct_event_ids={ns: a.distinct_event_ids.get(ns, 0) + b.distinct_event_ids.get(ns, 0)
                            for ns in a.distinct_event_ids | b.distinct_event_ids},
        redeliveries=a.redeliveries + b.redeliveries)


def _snapshot(r: Any, ns: str) -> tuple[Any, ...]:
    """Everything a commit writes, read in one MULTI."""
    p = r.pipeline(transaction=True)
    p.get(keys.checkpoint(ns))
    p.hgetall(keys.notes(ns))
    p.smembers(keys.seen(ns))
    p.xlen(keys.dead(ns))
    p.xlen(keys.changes(ns))
    return tuple(p.execute())


# ---------------------------------------------------------------- tests


def test_sigkill_worker_or_redis_mid_run_then_restart_loses_and_doubles_nothing(
        redis_factory: Callable[..., RedisProc], spawn: Callable[..., subprocess.Popen[bytes]],
        tmp_path: Path) -> None:
    rp = redis_factory()  # AOF on, appendfsync always
    r = rp.client()
    namespaces = ["crash-a", "crash-b", "crash-c"]
    path = tmp_path / "events.jsonl"
    exp = generate(path, 20_000, namespaces, seed=3)
    done = _cli(rp.url, "ingest", str(path))
    assert done.returncode == 0, done.stderr
    prog = Progress(r, namespaces)
    assert prog.total == 20_000

    killed_at = []
    plan = ((0.05, 0, "worker"), (0.3, 3, "worker"), (0.55, 7, "redis"), (0.8, 12, "worker"))
    for share, jitter_ms, victim in plan:
        w = spawn(rp.url)
        prog.wait(int(prog.total * share), w)
        # Not a wait for work: the wait above returns right after a commit, so this delay
        # moves the kill to varied points of the next batch (XRANGE, fold, Lua, RQ calls).
        time.sleep(jitter_ms / 1000)
        if victim == "worker":
            w.send_signal(signal.SIGKILL)
            w.wait(timeout=10)
            killed_at.append(prog.done())
            continue
        r.close()
        rp.stop(sig_kill=True)  # Redis dies under the worker
        with contextlib.suppress(subprocess.TimeoutExpired):
            # Mid-job the worker dies with a ConnectionError (systemd/compose restart it);
            # caught between jobs, RQ's dequeue loop retries the connection instead.
            w.wait(timeout=10)
        rp.start()  # same dir and port: the AOF (fsynced on every write) is replayed
        r = prog.r = rp.client()
        if w.poll() is None:
            w.send_signal(signal.SIGKILL)
            w.wait(timeout=10)
        killed_at.append(prog.done())
    assert killed_at == sorted(killed_at)
    assert sum(0 < n < prog.total for n in killed_at) >= 3, killed_at  # really mid-run

    done = _cli(rp.url, "worker", "--burst", timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert prog.done() == prog.total
    assert_consistent(r, rp.url, namespaces, [path], exp)


def test_stale_commit_is_a_noop_and_redis_restart_keeps_state(
        redis_factory: Callable[..., RedisProc], tmp_path: Path) -> None:
    rp = redis_factory()  # AOF on, appendfsync always
    r = rp.client()
    ns = "stale"
    path = tmp_path / "events.jsonl"
    exp = generate(path, 3_000, [ns], seed=5)
    rep = ingest(r, str(path), on_error=pytest.fail)
    assert rep.appended == 3_000
    for _ in range(3):
        assert project_batch(r, ns, BATCH) is not None

    # Worker A folds a batch and is "killed" before committing; B takes over and commits.
    a = prepare_batch(r, ns, BATCH)
    a_bigger = prepare_batch(r, ns, 2 * BATCH + 17)  # overlapping, not equal, range
    b = prepare_batch(r, ns, BATCH)
    assert a is not None and a_bigger is not None and b is not None
    assert a.result.notes and a.result.seen  # the stale batch would change things
    assert commit(r, b, 1) is True
    after_b = _snapshot(r, ns)
    assert commit(r, a, 2) is False  # A wakes up: its checkpoint moved, nothing written
    assert commit(r, a_bigger, 3) is False
    assert _snapshot(r, ns) == after_b

    # Redis dies (SIGKILL) between prepare and commit: what was committed survives, the
    # prepared batch is still current and commits once.
    c = prepare_batch(r, ns, BATCH)
    assert c is not None
    r.close()
    rp.stop(sig_kill=True)
    rp.start()
    r = rp.client()
    assert _snapshot(r, ns) == after_b
    assert commit(r, c, 4) is True  # the script cache is empty now: EVALSHA falls back
    after_c = _snapshot(r, ns)
    assert after_c[0] == c.new_checkpoint.encode()

    # Redis dies right after a commit: the commit is durable and is not applied again.
    d = prepare_batch(r, ns, BATCH)
    assert d is not None
    assert commit(r, d, 5) is True
    after_d = _snapshot(r, ns)
    r.close()
    rp.stop(sig_kill=True)
    rp.start()
    r = rp.client()
    assert _snapshot(r, ns) == after_d
    assert commit(r, d, 6) is False  # a retry of the same commit is a no-op

    while project_batch(r, ns, BATCH) is not None:
        pass
    assert_consistent(r, rp.url, [ns], [path], exp)


def test_worker_started_after_unscheduled_ingest_catches_up_and_follows_new_events(
        redis_factory: Callable[..., RedisProc], spawn: Callable[..., subprocess.Popen[bytes]],
        tmp_path: Path) -> None:
    rp = redis_factory()
    r = rp.client()
    namespaces = ["sweep-a", "sweep-b"]
    first = tmp_path / "first.jsonl"
    exp1 = generate(first, 4_000, namespaces, seed=8)
    done = _cli(rp.url, "ingest", "--no-schedule", str(first))
    assert done.returncode == 0, done.stderr
    q = Queue(jobs.PROJECT_QUEUE, connection=r, serializer=JSONSerializer)
    assert q.count == 0  # nobody asked for a projection
    assert all(checkpoint(r, ns) == (0, 0) for ns in namespaces)

    w = spawn(rp.url)  # not --burst: a long-running worker
    prog = Progress(r, namespaces)
    prog.wait(prog.total, w)  # the startup sweep found both namespaces behind

    second = tmp_path / "second.jsonl"
    exp2 = generate(second, 2_000, namespaces, seed=9, tag="b")
    done = _cli(rp.url, "ingest", str(second))  # ordinary ingest while the worker runs
    assert done.returncode == 0, done.stderr
    prog = Progress(r, namespaces)
    assert prog.total == 6_000
    prog.wait(prog.total, w)
    assert w.poll() is None

    w.send_signal(signal.SIGTERM)  # RQ's warm shutdown
    assert w.wait(timeout=30) == 0
    assert_consistent(r, rp.url, namespaces, [first, second], _merge(exp1, exp2))


def test_independent_counts_match_the_generator(tmp_path: Path) -> None:
    """The two references agree with each other (so neither can be trivially wrong)."""
    path = tmp_path / "e.jsonl"
    exp = generate(path, 5_000, ["x", "y"], seed=1)
    uses, forgotten = independent_counts(path)
    assert uses == exp.uses and forgotten == exp.forgotten
    assert exp.redeliveries > 100
    assert any(u >= CFG.longterm_uses for u in uses.values())
    assert any(0 < u < CFG.longterm_uses for u in uses.values())
    assert sum(exp.dead.values()) > 50
    lines = path.read_bytes().splitlines()
    assert len(lines) == 5_000
    assert all(msgspec.json.decode(x)["ns"] in ("x", "y") for x in lines[:10])


def test_a_busy_projection_job_does_not_strand_the_namespace(
        redis_server: RedisProc, tmp_path: Path) -> None:
    """Regression (found by this suite): a job that found the lease held for longer than it
    waits (2 x lease) returned 'busy' and kept the 'scheduled' marker, so later appends
    scheduled nothing and the namespace stalled until the marker's TTL ran out."""
    from hivemind_memory.api_stub.protocol.jobs import schedule_projection
    from hivemind_memory.api_stub.protocol.settings import Settings
    from hivemind_memory.worker.projector import run_projection
    from hivemind_memory.worker.runtime import build

    r = redis_server.client()
    r.flushall()
    s = Settings.from_env({}, redis_url=redis_server.url, lock_lease_ms=100)
    rt = build(s, r)
    ns = "busy"

    def schedule(nss: set[str]) -> None:
        for n in nss:
            schedule_projection(r, rt.project_queue, n)

    path = tmp_path / "e.jsonl"
    generate(path, 300, [ns], seed=1)
    # Someone else holds the lease for longer than a job waits (2 x lease): a query catching
    # the namespace up inline, or `hivemind replay`.
    r.set(keys.lock(ns), "someone-else", px=60_000)
    ingest(r, str(path), on_error=pytest.fail, on_chunk=schedule)
    assert rt.project_queue.count == 1
    rt.project_queue.empty()  # type: ignore[no-untyped-call]  # a worker takes the job and:
    assert run_projection(r, rt.project_queue, ns, s)["status"] == "busy"
    r.delete(keys.lock(ns))  # the other holder is done
    more = tmp_path / "more.jsonl"
    generate(more, 10, [ns], seed=2, tag="x")
    ingest(r, str(more), on_error=pytest.fail, on_chunk=schedule)
    try:
        # Someone must be going to project the namespace: a queued job (or no stale marker).
        assert rt.project_queue.count >= 1 or not r.exists(keys.scheduled(ns))
    finally:
        r.flushall()
        r.close()
