"""``python -m bench scale restart``: the first query to a large namespace after a worker
restart (the target: answered within 2 s from the snapshot, or ``index_warming`` within 1 s;
never a timeout).

1. A private ``redis-server``; one namespace of ``--notes`` notes (the Zipf corpus of
   ``bench.query``), appended by this process, then folded into the read model the way
   ``hivemind replay`` does (``--seed-by replay``, the default: one fold of the log and one
   MULTI, minutes at 100k notes where projecting batch by batch took over 20 on a loaded
   machine; ``replay --verify`` checks the two give the same read model), or projected by an
   in-process burst worker (``--seed-by project``).
2. A ``hivemind worker`` process; the first query finds no snapshot: it must get
   ``index_warming`` at once while the worker builds the index in a thread; the bench retries
   every 2 s (``Retry-After``) until an answer comes (the build's wall time).
3. That worker is stopped and a new one started (its heartbeat seen); its first query loads
   the snapshot: wall time seen by the client (submit to result) and the worker's CPU
   seconds; then a second query (warm).
4. ``--commits`` more batches of one note each are projected (the changes stream trimmed to
   keep only the newest entry, as if ``CHANGES_MAXLEN`` had gone by) and the worker
   restarted again: the first query must still answer from the snapshot the projector kept
   current (``refresh_snapshot`` jobs), or get ``index_warming`` at once.

Wall times are on a shared machine (compare within one run); the CPU seconds are the
worker's own.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from typing import Any

import redis

from bench.core import private_redis, stop_processes
from bench.query import Corpus, generate_events
from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.connection import connect
from hivemind_memory.projections.store.readmodel import lagging
from hivemind_memory.worker.ops.heartbeat import read_beats

NS = "big"


def _cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def _worker(url: str, rq: redis.Redis) -> Iterator[int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIVEMIND_")}
    env.update(HIVEMIND_REDIS_URL=url, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    before = {b.name for b in read_beats(rq)}
    proc = subprocess.Popen([sys.executable, "-m", "hivemind_memory.worker.cli", "worker",
                             "--memory-budget", "4000"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not {b.name for b in read_beats(rq)} - before:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the worker did not start")
            time.sleep(0.05)  # an external process: nothing to block on
        yield proc.pid
    finally:
        stop_processes([proc])
        deadline = time.monotonic() + 30
        while any(b.name not in before for b in read_beats(rq)) and \
                time.monotonic() < deadline:
            time.sleep(0.1)  # its heartbeat gone: the next worker is the only one


def _ask(c: Client, text: str) -> tuple[float, dict[str, Any]]:
    t = time.perf_counter()
    res = c.query(NS, text, 300, timeout=600)
    return time.perf_counter() - t, res


def _code(res: dict[str, Any]) -> str:
    err = res.get("error")
    return "answered" if err is None else str(err.get("code"))


def _first(c: Client, pid: int, text: str, label: str) -> bool:
    """The first query after a (re)start, retried on ``index_warming``; True when it met the
    target (answered <= 2 s, or warming <= 1 s)."""
    cpu0 = _cpu(pid)
    wall, res = _ask(c, text)
    cpu = _cpu(pid) - cpu0
    code = _code(res)
    ok = (code == "answered" and wall <= 2) or (code == "index_warming" and wall <= 1)
    print(f"{label}: first query {code} in {wall:.2f} s wall (worker CPU {cpu:.2f} s): "
          f"{'meets' if ok else 'MISSES'} the target (answer <= 2 s, or index_warming <= 1 s)")
    if code not in ("answered", "index_warming"):
        raise SystemExit(f"{label}: {res}")
    t = time.perf_counter()
    tries = 0
    while code == "index_warming":
        time.sleep(2)  # Retry-After
        tries += 1
        _, res = _ask(c, text)
        code = _code(res)
    if tries:
        print(f"  answered {time.perf_counter() - t:.1f} s later ({tries} retries, the build "
              f"or the snapshot read in the worker's thread)")
    if code != "answered":
        raise SystemExit(f"{label}: {res}")
    wall, _ = _ask(c, text + " again")
    print(f"  next query {wall * 1000:.0f} ms wall")
    return ok


def _fill(url: str, notes: int, corpus: Corpus, seed_by: str = "replay") -> None:
    from hivemind_memory.projections.ranking.dupsketch import spec_of
    from hivemind_memory.projections.store.rebuild import fold_log, write_back
    from hivemind_memory.worker import runtime
    from hivemind_memory.worker.loop import run_worker
    from hivemind_memory.worker.projector import enqueue_behind

    r = connect(url)
    s = Settings(redis_url=url)
    c = Client(r, settings=s)
    t = time.perf_counter()
    generate_events(NS, notes, corpus, random.Random(1), datetime.now(UTC).replace(
        microsecond=0), c.append)
    append_s = time.perf_counter() - t
    t = time.perf_counter()
    rt = runtime.build(s, r)
    if seed_by == "replay":
        c0 = time.process_time()
        rb = fold_log(r, NS)
        # one MULTI of every note: longer than the store's socket timeout at 100k notes on
        # a loaded machine, so on a connection of its own without one
        bulk = redis.Redis.from_url(url, socket_timeout=None)
        try:
            if not write_back(bulk, NS, rb, spec=spec_of(c.config())):
                raise RuntimeError(f"replay of {NS} did not write back")
        finally:
            bulk.close()
        del rb
        run_worker(rt, burst=True)  # the projection jobs the appends queued: nothing left
        print(f"{notes:,} notes appended in {append_s:.0f} s, folded and written back as "
              f"replay does in {time.perf_counter() - t:.0f} s "
              f"({time.process_time() - c0:.0f} s CPU)")
        r.close()
        return
    for _ in range(10):  # a loaded machine times out a commit now and then: run it again
        run_worker(rt, burst=True)
        if not lagging(r, [NS]):
            break
        enqueue_behind(r, rt.project_queue)
    else:
        raise RuntimeError("the burst workers did not finish the projection")
    print(f"{notes:,} notes appended in {append_s:.0f} s, projected in "
          f"{time.perf_counter() - t:.0f} s (in-process burst worker)")
    r.close()


def _commits(url: str, n: int, corpus: Corpus) -> None:
    """``n`` batches of one note, each projected (a burst worker runs the snapshot refresh
    jobs they queue), then the changes stream trimmed to its newest entry."""
    from hivemind_memory.worker import runtime
    from hivemind_memory.worker.loop import run_worker
    from hivemind_memory.worker.projector import run_projection

    r = connect(url)
    s = Settings(redis_url=url)
    c = Client(r, settings=s)
    rt = runtime.build(s, r)
    rng = random.Random(2)
    t = time.perf_counter()
    for i in range(n):
        c.append([{"type": "note.created", "event_id": f"x{i}", "ns": NS, "note_id": f"x{i}",
                   "agent": "agent1", "text": corpus.text(rng, 30),
                   "at": datetime.now(UTC).isoformat()}])
        run_projection(r, rt.project_queue, NS, s)
    if run_worker(rt, burst=True) != 0:
        raise RuntimeError("the burst worker failed")
    r.xtrim(keys.changes(NS), maxlen=1, approximate=False)
    print(f"{n:,} more batches committed (the snapshot refreshed by the jobs they queued) in "
          f"{time.perf_counter() - t:.0f} s; the changes stream then trimmed to its last entry")
    r.close()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench scale restart", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--notes", type=int, default=100_000)
    ap.add_argument("--commits", type=int, default=keys.SNAPSHOT_REFRESH_CHANGES + 10,
                    help="batches committed before the last restart (default: one past "
                    "the snapshot refresh threshold)")
    ap.add_argument("--redis-url", help="an empty Redis to use instead of a private one")
    ap.add_argument("--seed-by", choices=("replay", "project"), default="replay",
                    help="fold the generated log as replay does (default), or project it "
                    "batch by batch with a burst worker")
    opts = ap.parse_args(argv)
    corpus = Corpus.make(random.Random(11))
    ok = True
    with ExitStack() as stack:
        url = opts.redis_url or stack.enter_context(private_redis())
        _fill(url, opts.notes, corpus, opts.seed_by)
        r = connect(url)
        rq = redis.Redis.from_url(url)
        c = Client(r, settings=Settings(redis_url=url))
        rng = random.Random(5)
        with _worker(url, rq) as pid:
            ok &= _first(c, pid, corpus.query(rng, 100), f"{opts.notes:,} notes, no snapshot")
        with _worker(url, rq) as pid:
            ok &= _first(c, pid, corpus.query(rng, 100),
                         f"{opts.notes:,} notes, worker restarted")
        _commits(url, opts.commits, corpus)
        with _worker(url, rq) as pid:
            ok &= _first(c, pid, corpus.query(rng, 100),
                         f"{opts.notes + opts.commits:,} notes, restarted after "
                         f"{opts.commits:,} commits and a trim")
        r.close()
        rq.close()
    print("all first queries met the target" if ok else "some first query MISSED the target "
          "(figures for people: the bench does not fail on timings)")
    return 0
