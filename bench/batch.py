"""``python -m bench batch``: a batch of queries answered the way users run one, end to end,
through ``hivemind batch`` (the CLI), ``POST /v1/ns/{ns}/queries`` (``hivemind serve``) and
the SDK's ``Memory.batch``, each beside the RQ no-op job rate measured in the same rounds.
Prints figures; never asserts timings.

1. One namespace of ``--notes`` synthetic notes (``bench.query``'s generator: log-normal
   lengths, a Zipf vocabulary, ages up to 3 years, uses, scratch, private and forgotten
   notes), appended and projected once.
2. Two workloads over it: ``dense`` (``--queries`` queries of 2-6 words, budgets drawn from
   500-8,000 tokens, one in ten drawn like the corpus, common words included, the rest
   leaving out the 100 commonest words) and ``own`` (``bench query``'s batch: 2-5 words,
   budgets 2,000 / 8,000, no common words), drawn afresh for every run of every path (a run
   finds no word in the worker's caches because a run before asked the same batch).
3. For each worker count (``--workers``, default 1 and 2) that many ``hivemind worker``
   processes are started, warmed up (each loads the index), and ``--rounds`` rounds run, each
   the no-op drain (``bench.noop``: one plain RQ ``SimpleWorker`` process, the per-job cost of
   RQ itself) followed by every path on every workload. Each path's figure is the median of
   its rounds over the median no-op rate (each round's own ratio printed too).
4. The CLI runs as users run it, ``hivemind batch FILE > out`` in a process of its own; its
   wall time includes the interpreter's start, and its CPU (user + system, from ``wait4``) is
   printed beside the wall time, also without the start (less the CPU and wall time of the
   round's ``hivemind batch`` of an empty file). ``serve`` runs as a process too (no tokens,
   loopback), and the HTTP client sends the batch in requests of at most the server's
   ``MAX_QUERIES``. The SDK runs in this process over the store URL.

Everything shares this machine's cores: the workers, Redis, the no-op worker, the server and
the client. Without ``--redis-url`` a private ``redis-server`` is started and stopped.
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import redis
from rq import Worker

from bench.core import _free_port, private_redis, stop_processes
from bench.query import (
    COMMON_WORDS,
    Corpus,
    drain_noops,
    load_namespace,
    noop_worker,
    query_requests,
)
from hivemind_memory.api_stub.protocol.settings import Settings

DENSE_COMMON = 0.10
"""Share of the dense workload's queries drawn like the corpus (common words included)."""
DENSE_BUDGETS = (500, 8_000)
"""The dense workload's budgets are drawn uniformly from this range."""
PATHS = ("cli", "http", "sdk")
"""The three ways a user runs a batch."""
NS = "bb"
"""The namespace (a random suffix with ``--redis-url``)."""

_dec = msgspec.json.Decoder()


def dense_requests(ns: str, n: int, corpus: Corpus, rng: random.Random) -> list[dict[str, Any]]:
    """The dense workload: 2-6 words, budgets 500-8,000, 10 % with common words."""
    out: list[dict[str, Any]] = []
    for _ in range(n):
        skip = 0 if rng.random() < DENSE_COMMON else COMMON_WORDS
        text = corpus.query(rng, skip, most=6)
        agent = rng.choice(("", "agent1", "agent2", "agent3"))
        out.append({"ns": ns, "text": text,
                    "budget": rng.randint(*DENSE_BUDGETS), "agent": agent})
    return out


@dataclass
class Run:
    """One path's batch in one round."""

    seconds: float
    answered: int
    errors: int
    client_cpu_s: float = 0.0
    out_bytes: int = 0

    @property
    def qps(self) -> float:
        return self.answered / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Series:
    """Every round of one (workers, workload, path)."""

    runs: list[Run] = field(default_factory=list)


def _env(url: str) -> dict[str, str]:
    """The CLI's environment: the store, this checkout, and bytecode caching on (as an
    installed command runs; a shell with ``PYTHONDONTWRITEBYTECODE`` set would compile the
    package's modules again at every start)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "HIVEMIND_REDIS_URL": url,
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}


def run_cli(url: str, infile: Path, outfile: Path) -> Run:
    """``hivemind batch infile > outfile`` as a process of its own: wall time, its CPU."""
    with open(outfile, "wb") as out:
        t = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "hivemind_memory.worker.cli", "batch",
                                 str(infile)], env=_env(url), stdout=out,
                                stderr=subprocess.PIPE)
        _, status, ru = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - t
    assert proc.stderr is not None
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    proc.returncode = os.waitstatus_to_exitcode(status)
    answered = errors = size = 0
    with open(outfile, "rb") as fh:
        for line in fh:
            size += len(line)
            answered += 1
            errors += b',"error":{' in line[:200]
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"hivemind batch exited {proc.returncode}: {err[-500:]}")
    return Run(seconds, answered, errors, ru.ru_utime + ru.ru_stime, size)


def run_http(port: int, ns: str, reqs: Sequence[dict[str, Any]], per_request: int) -> Run:
    """``POST /v1/ns/{ns}/queries`` in requests of ``per_request`` over one connection."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    answered = errors = size = 0
    bodies = [msgspec.json.encode([{k: v for k, v in r.items() if k != "ns"}
                                   for r in reqs[i:i + per_request]])
              for i in range(0, len(reqs), per_request)]
    got: list[bytes] = []
    t = time.perf_counter()
    try:
        for body in bodies:
            conn.request("POST", f"/v1/ns/{ns}/queries", body=body,
                         headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            data = resp.read()
            if resp.status != 200:
                raise RuntimeError(f"POST queries: {resp.status} {data[:300]!r}")
            got.append(data)
    finally:
        conn.close()
    seconds = time.perf_counter() - t
    for data in got:  # what the caller does with the answers is not the path's time
        answers = _dec.decode(data)
        answered += len(answers)
        errors += sum("error" in a for a in answers)
        size += len(data)
    return Run(seconds, answered, errors, out_bytes=size)


def run_sdk(mem: Any, reqs: Sequence[dict[str, Any]]) -> Run:
    """``Memory.batch`` in this process (its CPU is this process's)."""
    c0 = time.process_time()
    t = time.perf_counter()
    got = mem.batch([dict(r) for r in reqs])
    seconds = time.perf_counter() - t
    return Run(seconds, len(got), sum("error" in g for g in got),
               time.process_time() - c0)


@contextmanager
def workers(n: int, url: str, rq: redis.Redis) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``n`` ``hivemind worker`` processes, registered; stopped (TERM) at exit."""
    before = len(Worker.all(connection=rq))
    procs = [subprocess.Popen([sys.executable, "-m", "hivemind_memory.worker.cli", "worker"],
                              env=_env(url), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for _ in range(n)]
    try:
        deadline = time.monotonic() + 60
        while len(Worker.all(connection=rq)) < before + n:
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError(f"{n} hivemind workers did not register")
            time.sleep(0.05)  # other processes starting: nothing to block on
        yield procs
    finally:
        stop_processes(procs)


@contextmanager
def server(url: str) -> Iterator[int]:
    """``hivemind serve`` (no tokens, loopback) on a free port; yields the port."""
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "hivemind_memory.worker.cli", "serve",
                             "--port", str(port)],
                            env=_env(url), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/healthz")
                if c.getresponse().status == 200:
                    c.close()
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("hivemind serve did not start")
            time.sleep(0.05)  # a process opening its port: nothing to block on
        yield port
    finally:
        stop_processes([proc])


@dataclass
class Options:
    notes: int
    queries: int
    own: int
    workers: list[int]
    rounds: int
    noop: int
    seed: int


def measure(url: str, opts: Options, ns: str) -> None:
    from hivemind_memory import Memory
    from hivemind_memory.api_stub.server.schemas import MAX_QUERIES
    from hivemind_memory.projections.store.connection import connect
    from hivemind_memory.worker import runtime

    s = Settings.from_env(redis_url=url)
    rt = runtime.build(s, connect(url))
    runtime.install(rt)
    rng = random.Random(opts.seed)
    corpus = Corpus.make(rng)
    load_namespace(rt, ns, opts.notes, corpus, opts.seed)
    def dense() -> list[dict[str, Any]]:
        return dense_requests(ns, opts.queries, corpus, rng)

    def own() -> list[dict[str, Any]]:
        return query_requests(ns, opts.own, corpus, rng)

    draw = {"dense": dense, "own": own}
    per_request = MAX_QUERIES
    with tempfile.TemporaryDirectory(prefix="hivemind-bench-batch-") as d:
        files = {}
        for name, make in draw.items():
            files[name] = Path(d) / f"{name}.jsonl"
            files[name].write_bytes(b"".join(msgspec.json.encode(r) + b"\n" for r in make()))
        empty = Path(d) / "empty.jsonl"
        empty.write_bytes(b"")
        outfile = Path(d) / "out.jsonl"
        mem = Memory(url, ns=ns, agent="bench", timeout=600)
        with noop_worker(url) as noop_proc, server(url) as port:
            for n_workers in opts.workers:
                with workers(n_workers, url, rt.rq):
                    for _ in range(2):  # every worker loads the index, every path warms up
                        run_cli(url, files["own"], outfile)
                    series: dict[tuple[str, str], Series] = {}
                    rates: list[float] = []
                    starts: list[Run] = []
                    for k in range(opts.rounds):
                        rates.append(drain_noops(rt, opts.noop, noop_proc))
                        starts.append(run_cli(url, empty, outfile))
                        print(f"  {n_workers} worker(s) round {k + 1} hivemind batch of an "
                              f"empty file (the process's fixed cost): "
                              f"{starts[-1].seconds * 1000:,.0f} ms wall, "
                              f"{starts[-1].client_cpu_s * 1000:,.0f} ms CPU")
                        for name, make in draw.items():
                            for path in PATHS:
                                # a fresh batch for every run: no run finds its words in
                                # the worker's caches because an earlier run asked the same
                                reqs = make()
                                if path == "cli":
                                    files[name].write_bytes(b"".join(
                                        msgspec.json.encode(r) + b"\n" for r in reqs))
                                r = (run_cli(url, files[name], outfile) if path == "cli" else
                                     run_http(port, ns, reqs, per_request) if path == "http"
                                     else run_sdk(mem, reqs))
                                series.setdefault((name, path), Series()).runs.append(r)
                                print(f"  {n_workers} worker(s) round {k + 1} {name:<5} "
                                      f"{path:<4} {r.answered:,} in {r.seconds:.2f} s = "
                                      f"{r.qps:,.0f} q/s"
                                      + (f", client CPU {r.client_cpu_s:.2f} s" if
                                         r.client_cpu_s else "")
                                      + (f", {r.out_bytes / max(r.answered, 1) / 1024:.1f} "
                                         f"KiB an answer" if r.out_bytes else "")
                                      + (f"  ERRORS {r.errors}" if r.errors else ""))
                    report(n_workers, rates, series, starts)
        mem.close()


def report(n_workers: int, rates: list[float], series: dict[tuple[str, str], Series],
           starts: list[Run]) -> None:
    rate = statistics.median(rates)
    print(f"{n_workers} worker(s): no-op drain median {rate:,.0f} jobs/s "
          f"({', '.join(f'{r:,.0f}' for r in rates)}); hivemind batch's start (an empty "
          f"file) median {statistics.median(z.seconds for z in starts) * 1000:,.0f} ms wall, "
          f"{statistics.median(z.client_cpu_s for z in starts) * 1000:,.0f} ms CPU")
    for (name, path), ser in sorted(series.items(), key=lambda kv: (kv[0][0] != "dense",
                                                                      PATHS.index(kv[0][1]))):
        qps = statistics.median(r.qps for r in ser.runs)
        each = ", ".join(f"{r.qps / x:.1f}x" for r, x in zip(ser.runs, rates, strict=True))
        cli = series.get((name, "cli"))
        vs = ""
        if path != "cli" and cli is not None:
            vs = f"; {qps / statistics.median(r.qps for r in cli.runs):.2f} of the CLI"
        cpu = ""
        if path == "cli":  # and without the interpreter's start (an empty batch's process)
            share = statistics.median(r.client_cpu_s / r.seconds for r in ser.runs)
            batch = statistics.median((r.client_cpu_s - z.client_cpu_s)
                                      / max(r.seconds - z.seconds, 1e-9)
                                      for r, z in zip(ser.runs, starts, strict=True))
            cpu = (f"; client CPU {100 * share:.0f} % of wall, {100 * batch:.0f} % without "
                   "the start (the round's empty batch)")
        print(f"  {name:<5} {path:<4} {qps:7,.0f} q/s = {qps / rate:4.1f}x the no-op rate "
              f"(rounds {each}){vs}{cpu}")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench batch", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--notes", type=int, default=10_000, help="notes of the namespace")
    ap.add_argument("--queries", type=int, default=1_000, help="queries of the dense batch")
    ap.add_argument("--own", type=int, default=500, help="queries of the own batch")
    ap.add_argument("--workers", default="1,2", help="worker counts, comma-separated")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--noop", type=int, default=500, help="no-op jobs a round")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--redis-url", default=None,
                    help="use this Redis, which must be empty (default: a private "
                         "redis-server, stopped at the end)")
    return ap


def main(argv: list[str] | None = None) -> int:
    from hivemind_memory.worker.ops import logs

    ap = _parser()
    args = ap.parse_args(argv)
    try:
        counts = [int(x) for x in args.workers.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--workers: not a comma-separated list of ints: {args.workers!r}")
    if not counts or min(counts) < 1:
        ap.error("--workers: every count must be >= 1")
    if min(args.notes, args.queries, args.own, args.rounds, args.noop) < 1:
        ap.error("--notes, --queries, --own, --rounds and --noop must be >= 1")
    logs.configure(level="warning")
    opts = Options(args.notes, args.queries, args.own, counts, args.rounds, args.noop,
                   args.seed)
    started = time.perf_counter()
    old = signal.signal(signal.SIGTERM, _terminate)
    try:
        if args.redis_url is not None:
            r = redis.Redis.from_url(args.redis_url)
            if r.dbsize():
                ap.error(f"--redis-url {args.redis_url}: the database is not empty (the "
                         "bench starts workers that would run its jobs)")
            r.close()
            measure(args.redis_url, opts, NS)
        else:
            with private_redis() as url:
                print(f"redis private redis-server at {url}")
                measure(url, opts, NS)
    finally:
        signal.signal(signal.SIGTERM, old)
    print(f"total {time.perf_counter() - started:.1f} s")
    return 0


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)

