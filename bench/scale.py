"""``python -m bench scale``: events/s and queries/s with 1, 2, 4 workers over 1, 10, 1000
namespaces, on one Redis and on a 3-master Redis Cluster (RQ on a plain Redis beside it).

For each target, namespace count and worker count, on freshly flushed servers:

1. ``W`` ``hivemind worker`` processes are started; they sweep the empty store and idle.
2. ingest: a seeded file (``bench.data``) of ``--events`` events over the namespaces is
   validated and appended by this process (no jobs scheduled): ingest events/s.
3. projection: one projection job per namespace is queued; the clock stops when every
   namespace's checkpoint reached its stream's tail: projection events/s, and the CPU
   seconds the workers and the Redis servers spent (events per worker CPU-second is what a
   core can fold).
4. queries: ``--queries`` live queries spread over the namespaces are submitted in jobs of
   ``--query-chunk``; the clock stops when the last result arrived: queries/s.

Every run is checked: the projected notes must equal a pure in-memory fold of the same file
(exit 1 otherwise). Memory: Redis ``used_memory`` after projection over the events and notes
it holds (streams, read model, dedup sets together), and ``MEMORY USAGE`` of the notes hashes
per note.

Everything runs on this machine: workers, Redis servers and this process share its cores, so
more workers than cores measure contention, not scale. Private servers only (free ports, temp
dirs, stopped at the end).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import redis
from rq import Worker

from bench.core import _free_port, private_redis, pure_fold, stop_processes
from bench.data import _WORDS, generate
from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol import jobs
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.projections.ranking.config import RankingConfig
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.connection import connect
from hivemind_memory.projections.store.ingest import ingest
from hivemind_memory.projections.store.readmodel import lagging, read_notes
from hivemind_memory.projections.store.types import Store

POLL_S = 0.02
"""How often the bench looks whether the projection is done (it has nothing to block on)."""


@dataclass
class Row:
    """One measured configuration."""

    target: str
    namespaces: int
    workers: int
    events: int
    notes: int
    ingest_eps: float
    project_eps: float
    worker_cpu_s: float
    redis_cpu_s: float
    events_per_worker_cpu_s: float
    queries: int
    query_qps: float
    used_memory_bytes: int
    notes_hash_bytes: int


@contextmanager
def private_cluster(masters: int = 3) -> Iterator[str]:
    """A throwaway Redis Cluster of ``masters`` masters (no replicas, no persistence) on free
    ports; yields its ``redis+cluster://`` URL."""
    binary, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if binary is None or cli is None:
        raise RuntimeError("redis-server and redis-cli must be on PATH for the cluster target")
    with tempfile.TemporaryDirectory(prefix="hivemind-bench-cluster-") as d:
        ports = [_free_port() for _ in range(masters)]
        procs = []
        try:
            for port in ports:
                nd = Path(d) / str(port)
                nd.mkdir()
                procs.append(subprocess.Popen(
                    [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                     "--appendonly", "no", "--dir", str(nd), "--daemonize", "no",
                     "--cluster-enabled", "yes", "--cluster-port", str(_free_port()),
                     "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            for port, proc in zip(ports, procs, strict=True):
                _until(lambda p=port, pr=proc: _pings(p, pr), f"redis-server on {port}")
            out = subprocess.run([cli, "--cluster", "create",
                                  *[f"127.0.0.1:{p}" for p in ports], "--cluster-yes"],
                                 capture_output=True, text=True, timeout=60, check=False)
            if out.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed: {out.stdout}")
            _until(lambda: all(_cluster_ok(p) for p in ports), "cluster_state:ok")
            yield "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in ports)
        finally:
            for proc in procs:
                proc.terminate()
                proc.wait(timeout=30)


def _pings(port: int, proc: subprocess.Popen[bytes]) -> bool:
    if proc.poll() is not None:
        raise RuntimeError(f"redis-server on port {port} exited")
    c = redis.Redis(port=port)
    try:
        return bool(c.ping())
    except redis.ConnectionError:
        return False
    finally:
        c.close()


def _cluster_ok(port: int) -> bool:
    c = redis.Redis(port=port)
    try:
        return b"cluster_state:ok" in c.execute_command(  # type: ignore[no-untyped-call]
            "CLUSTER", "INFO")
    finally:
        c.close()


def _until(cond: Any, what: str, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(POLL_S)  # external processes: nothing to block on


def _masters(r: Store) -> list[redis.Redis]:
    """A plain client per master (one for a single Redis)."""
    if isinstance(r, redis.Redis):
        return [r]
    return [n.redis_connection for n in r.get_primaries()]  # type: ignore[no-untyped-call]


def _redis_cpu(r: Store) -> float:
    total = 0.0
    for m in _masters(r):
        info = m.info("cpu")
        total += float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    return total


def _used_memory(r: Store) -> int:
    return sum(int(m.info("memory")["used_memory"]) for m in _masters(r))


def _proc_cpu(pid: int) -> float:
    """User + system CPU seconds of a live process (Linux /proc)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _flush(r: Store, rq: redis.Redis) -> None:
    r.flushall()
    rq.flushall()


@contextmanager
def _workers(n: int, env: dict[str, str], rq: redis.Redis) -> Iterator[list[int]]:
    """``n`` idle ``hivemind worker`` processes; yields their pids; stopped (TERM) at exit."""
    procs = [subprocess.Popen([sys.executable, "-m", "hivemind_memory.worker.cli", "worker"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for _ in range(n)]
    try:
        _until(lambda: len(Worker.all(connection=rq)) >= n, f"{n} workers to register", 60)
        yield [p.pid for p in procs]
    finally:
        stop_processes(procs)


def _queries(nss: list[str], n: int) -> list[dict[str, Any]]:
    return [{"ns": nss[i % len(nss)], "text": f"{_WORDS[i % len(_WORDS)]} "
             f"{_WORDS[(3 * i + 1) % len(_WORDS)]}", "budget": 300} for i in range(n)]


def measure(target: str, url: str, rq_url: str, n_ns: int, n_workers: int, events_file: Path,
            n_events: int, expected: dict[str, Any], n_queries: int,
            query_chunk: int) -> Row:
    """One configuration, on flushed servers."""
    s = Settings(redis_url=url, rq_url=rq_url if target == "cluster" else None,
                 query_chunk=query_chunk)
    r = connect(url)
    rq = redis.Redis.from_url(rq_url)
    _flush(r, rq)
    nss = sorted(expected)
    env = {**os.environ, "HIVEMIND_REDIS_URL": url,
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    if s.rq_url is not None:
        env["HIVEMIND_RQ_URL"] = s.rq_url
    with _workers(n_workers, env, rq) as pids:
        # the workers swept an empty store at start; now append without scheduling
        base_memory = _used_memory(r)
        t0 = time.perf_counter()
        ingest(r, str(events_file), on_error=lambda msg: None)
        ingest_s = time.perf_counter() - t0
        cpu0 = sum(_proc_cpu(p) for p in pids)
        rcpu0 = _redis_cpu(r)
        q = jobs.queue(rq, jobs.PROJECT_QUEUE, s)
        t0 = time.perf_counter()
        jobs.schedule_namespaces(r, q, nss)
        _until(lambda: not lagging(r, nss), "the projection")
        project_s = time.perf_counter() - t0
        worker_cpu = sum(_proc_cpu(p) for p in pids) - cpu0
        redis_cpu = _redis_cpu(r) - rcpu0
        for ns in nss:
            if read_notes(r, ns) != expected[ns]:
                raise SystemExit(f"MISMATCH: {target} {n_ns} ns {n_workers} workers: the "
                                 f"projection of {ns} differs from the pure fold")
        used = _used_memory(r) - base_memory
        notes_bytes = sum(int(r.memory_usage(keys.notes(ns), samples=0) or 0) for ns in nss)
        c = Client(r, rq if target == "cluster" else None, settings=s)
        t0 = time.perf_counter()
        ids = c.submit_batch(_queries(nss, n_queries))
        bodies = list(c.batch_results(ids, timeout=600))
        query_s = time.perf_counter() - t0
        bad = [b for b in bodies if b"\"error\"" in b]
        if bad:
            raise SystemExit(f"query failed: {bad[0][:300]!r}")
    notes = sum(len(v) for v in expected.values())
    row = Row(target=target, namespaces=n_ns, workers=n_workers, events=n_events, notes=notes,
              ingest_eps=round(n_events / ingest_s), project_eps=round(n_events / project_s),
              worker_cpu_s=round(worker_cpu, 2), redis_cpu_s=round(redis_cpu, 2),
              events_per_worker_cpu_s=round(n_events / worker_cpu) if worker_cpu else 0,
              queries=n_queries, query_qps=round(n_queries / query_s, 1),
              used_memory_bytes=used, notes_hash_bytes=notes_bytes)
    _flush(r, rq)
    r.close()
    rq.close()
    return row


def run(opts: argparse.Namespace) -> list[Row]:
    rows: list[Row] = []
    cfg = RankingConfig()
    with tempfile.TemporaryDirectory(prefix="hivemind-bench-scale-") as d, ExitStack() as stack:
        rq_url = stack.enter_context(private_redis())
        urls = {"single": stack.enter_context(private_redis()) if "single" in opts.targets
                else "", "cluster": stack.enter_context(private_cluster())
                if "cluster" in opts.targets else ""}
        for n_ns in opts.namespaces:
            events_file = Path(d) / f"events-{n_ns}.jsonl"
            generate(events_file, opts.events, [f"s{i:04d}" for i in range(n_ns)], seed=13)
            expected = {ns: p.notes for ns, p in pure_fold(events_file, cfg).items()}
            for target in opts.targets:
                for n_w in opts.workers:
                    rq = rq_url if target == "cluster" else urls[target]  # one Redis: both
                    row = measure(target, urls[target], rq, n_ns, n_w, events_file,
                                  opts.events, expected, opts.queries, opts.query_chunk)
                    rows.append(row)
                    print(_line(row), flush=True)
    return rows


HEADER = (f"{'target':<8} {'ns':>5} {'wrk':>3} {'ingest ev/s':>11} {'proj ev/s':>9} "
          f"{'ev/wrk-cpu-s':>12} {'redis cpu s':>11} {'queries/s':>9} {'B/event':>8} "
          f"{'B/note':>7}")


def _line(row: Row) -> str:
    return (f"{row.target:<8} {row.namespaces:>5} {row.workers:>3} {row.ingest_eps:>11} "
            f"{row.project_eps:>9} {row.events_per_worker_cpu_s:>12} {row.redis_cpu_s:>11} "
            f"{row.query_qps:>9} {row.used_memory_bytes // max(row.events, 1):>8} "
            f"{row.notes_hash_bytes // max(row.notes, 1):>7}")


def _ints(value: str) -> list[int]:
    try:
        out = [int(x) for x in value.split(",") if x]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{value!r}: comma-separated integers") from exc
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"{value!r}: at least one integer >= 1")
    return out


def _targets(value: str) -> list[str]:
    out = [x for x in value.split(",") if x]
    bad = [x for x in out if x not in ("single", "cluster")]
    if bad or not out:
        raise argparse.ArgumentTypeError(f"{value!r}: targets are single and/or cluster")
    return out


def main(argv: list[str]) -> int:
    if argv[:1] == ["memory"]:  # worker memory against namespaces served (bench.scale_memory)
        from bench import scale_memory

        return scale_memory.main(argv[1:])
    if argv[:1] == ["restart"]:  # the first query after a worker restart (bench.scale_restart)
        from bench import scale_restart

        return scale_restart.main(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m bench scale", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=20_000, help="events per configuration")
    ap.add_argument("--queries", type=int, default=400, help="queries per configuration")
    ap.add_argument("--query-chunk", type=int, default=10, help="queries per query job")
    ap.add_argument("--workers", type=_ints, default=[1, 2, 4])
    ap.add_argument("--namespaces", type=_ints, default=[1, 10, 1000])
    ap.add_argument("--targets", type=_targets, default=["single", "cluster"])
    ap.add_argument("--json", help="also write the rows to this file as JSON")
    opts = ap.parse_args(argv)
    print(f"{opts.events} events, {opts.queries} queries per row; {os.cpu_count()} CPU(s)")
    print(HEADER)
    rows = run(opts)
    if opts.json:
        Path(opts.json).write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")
    return 0
