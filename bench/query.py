"""``hivemind bench query``: query latency in the worker, end to end through RQ, batch
throughput, and an RQ no-op job baseline measured in the same run. Prints figures; never
asserts timings.

1. Generates seeded synthetic namespaces (default 10k and 100k notes): a Zipf-distributed
   vocabulary of pseudo-words, log-normal lengths (tens to thousands of tokens), ages 0..3
   years, some notes used 5+ times (longterm), some scratch, private or forgotten. Appends them
   with ``Client.append`` in chunks and projects them with the burst worker in this process.
2. In-worker latency: a ``QueryEngine`` over the store; full index load timed on its own, then
   N queries of 2..5 words (budgets 2k / 8k alternating), each timed twice: ``run_rank``
   (relevance, score, pack, order) and ``engine.answer`` (catch-up check, index refresh,
   rank, result encoding; what a query job does apart from writing the result key).
3. End to end: ``hivemind worker`` as a subprocess; single queries one at a time with
   ``Client.submit_query`` + ``result_json``.
4. Batch throughput: ``Client.submit_batch`` + ``batch_results`` with the default
   ``query_chunk``; then a smaller set with ``query_chunk=1`` (one RQ job per query) and the
   same set again with the default chunk.
5. Batch with common words, and the baseline: ``--rounds`` rounds (default 3), each a batch
   of queries drawn like the corpus (most notes are candidates) followed by no-op jobs
   (``bench.noop``) drained by a plain RQ SimpleWorker process. The VM's speed drifts between
   minutes, so the ratios compare the medians of the rounds, and each round's own ratio is
   printed too.

Without ``--redis-url`` a private ``redis-server`` is started on a free port in a temp dir and
stopped at the end. With ``--redis-url`` the bench writes only namespaces with a fresh random
prefix and deletes their keys afterwards (RQ's own job keys expire by their TTLs); the
worker it starts also runs any other job queued on that server, so figures from a shared
server are only indicative.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
from rq import Queue
from rq.job import Job, JobStatus

from bench import noop
from bench.core import drop_namespaces, private_redis
from hivemind_memory.api_stub.protocol.messages import Envelope, parse_request, utcnow
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.events.positions import format_pos
from hivemind_memory.events.schema import Event, Kind, NoteCreated, NoteForgotten, NoteUsed, Scope
from hivemind_memory.projections.ranking.index import NamespaceIndex
from hivemind_memory.projections.store.index_loader import load_index, read_snapshot
from hivemind_memory.projections.store.log import tail
from hivemind_memory.worker.engine import QueryEngine, run_rank

VOCAB = 4_000
"""Distinct words of the synthetic vocabulary."""
ZIPF_S = 1.05
"""Zipf exponent: the weight of the word of rank r is 1 / r ** ZIPF_S."""
AGENTS = tuple(f"agent{i}" for i in range(8))
CHUNK = 5_000
"""Events per ``Client.append`` call."""
BUDGETS = (2_000, 8_000)
MAX_WORDS = 2_500
"""Longest note in words (~1.7 tokens a word with the default ``ceil(bytes / 4)``)."""
USES = ((0, 0.70), (1, 0.10), (2, 0.06), (3, 0.04), (4, 0.03), (5, 0.03), (8, 0.04))
"""(``note.used`` events, share of notes): 7% of the notes reach the longterm threshold."""
COMMON_WORDS = 100
"""Queries leave out the commonest words of the vocabulary (as a search box would drop stop
words), except the ``--common`` sample, which draws like the corpus and so matches nearly
every note: the worst case, every note a candidate."""
SYLLABLES = tuple(c + v for c in "bdfgklmnprstvz" for v in ("a", "e", "i", "o", "u", "ai", "ou"))

_dec = msgspec.json.Decoder()


# -- synthetic data ----------------------------------------------------------------------------

def vocabulary(rng: random.Random, n: int = VOCAB) -> list[str]:
    """``n`` distinct pronounceable pseudo-words (2..4 syllables), in Zipf rank order."""
    seen: set[str] = set()
    words: list[str] = []
    while len(words) < n:
        w = "".join(rng.choices(SYLLABLES, k=rng.randint(2, 4)))
        if w not in seen:
            seen.add(w)
            words.append(w)
    return words


@dataclass
class Corpus:
    """A vocabulary with cumulative Zipf weights, for drawing texts and queries."""

    words: list[str]
    cum: list[float]

    @classmethod
    def make(cls, rng: random.Random) -> Corpus:
        words = vocabulary(rng)
        cum: list[float] = []
        acc = 0.0
        for r in range(1, len(words) + 1):
            acc += 1.0 / r**ZIPF_S
            cum.append(acc)
        return cls(words, cum)

    def text(self, rng: random.Random, n_words: int) -> str:
        return " ".join(rng.choices(self.words, cum_weights=self.cum, k=n_words))

    def query(self, rng: random.Random, skip: int = 0, most: int = 5) -> str:
        """2..``most`` distinct words drawn with the corpus' own Zipf weights, leaving out the
        ``skip`` commonest words (the analogue of stop words)."""
        words = self.words[skip:]
        base = self.cum[skip - 1] if skip else 0.0
        cum = [c - base for c in self.cum[skip:]]
        k = rng.randint(2, most)
        got: list[str] = []
        while len(got) < k:
            w = rng.choices(words, cum_weights=cum, k=1)[0]
            if w not in got:
                got.append(w)
        return " ".join(got)


@dataclass
class Generated:
    """What was generated for one namespace."""

    ns: str
    notes: int
    events: int
    longterm: int
    scratch: int
    private: int
    forgotten: int
    words: int


def generate_events(ns: str, n: int, corpus: Corpus, rng: random.Random, now: datetime,
                    sink: Callable[[list[Event]], object]) -> Generated:
    """Creates (with their uses) then forgets for ``n`` notes, passed to ``sink`` in chunks."""
    uses_vals = [u for u, _ in USES]
    uses_w = [w for _, w in USES]
    buf: list[Event] = []
    g = Generated(ns, n, 0, 0, 0, 0, 0, 0)
    forget: list[tuple[str, str, datetime]] = []

    def push(ev: Event) -> None:
        buf.append(ev)
        g.events += 1
        if len(buf) >= CHUNK:
            sink(buf[:])
            buf.clear()

    for i in range(n):
        nid = f"n{i}"
        agent = rng.choice(AGENTS)
        n_words = max(5, min(MAX_WORDS, int(rng.lognormvariate(math.log(40), 1.1))))
        age = timedelta(days=rng.random() * 3 * 365)
        created = now - age
        kind: Kind = "scratch" if rng.random() < 0.15 else "note"
        scope: Scope = "private" if rng.random() < 0.10 else "shared"
        push(NoteCreated(event_id=f"c{i}", ns=ns, note_id=nid, agent=agent, at=created,
                         text=corpus.text(rng, n_words), scope=scope, kind=kind))
        uses = rng.choices(uses_vals, uses_w)[0]
        for k in range(uses):
            push(NoteUsed(event_id=f"u{i}-{k}", ns=ns, note_id=nid, agent=rng.choice(AGENTS),
                          at=created + age * rng.random()))
        g.words += n_words
        g.scratch += kind == "scratch"
        g.private += scope == "private"
        g.longterm += uses >= 5
        if rng.random() < 0.02:
            forget.append((nid, agent, created + age * rng.random()))
    for j, (nid, agent, at) in enumerate(forget):
        push(NoteForgotten(event_id=f"f{j}", ns=ns, note_id=nid, agent=agent, at=at))
    g.forgotten = len(forget)
    if buf:
        sink(buf)
    return g


def query_requests(ns: str, n: int, corpus: Corpus, rng: random.Random,
                   skip: int = COMMON_WORDS) -> list[dict[str, Any]]:
    """``n`` live query requests: 2..5 words, budgets alternating, half with an agent."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        agent = rng.choice(AGENTS) if rng.random() < 0.5 else ""
        out.append({"ns": ns, "text": corpus.query(rng, skip),
                    "budget": BUDGETS[i % len(BUDGETS)], "agent": agent})
    return out


# -- statistics --------------------------------------------------------------------------------

def pct(xs: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (``p`` in 0..100) of a non-empty sample."""
    s = sorted(xs)
    return s[max(0, math.ceil(p / 100 * len(s)) - 1)]


def ms_summary(secs: Sequence[float]) -> str:
    ms = [x * 1000 for x in secs]
    return (f"p50 {pct(ms, 50):8.2f} ms  p99 {pct(ms, 99):8.2f} ms  "
            f"max {max(ms):8.2f} ms  (n={len(ms)})")


# -- steps ---------------------------------------------------------------------------------------

def load_namespace(rt: Any, ns: str, n: int, corpus: Corpus, seed: int) -> None:
    """Generate, append and project one namespace; print what it took."""
    from hivemind_memory.api_stub.client import Client
    from hivemind_memory.worker.loop import run_worker

    client = Client(rt.store, rt.rq, rt.settings)
    rng = random.Random(seed * 1_000_003 + n)
    append_s = 0.0
    mib = 0.0

    def sink(events: list[Event]) -> None:
        nonlocal append_s, mib
        mib += sum(len(e.text) for e in events if isinstance(e, NoteCreated)) / 2**20
        t = time.perf_counter()
        client.append(events)
        append_s += time.perf_counter() - t

    t = time.perf_counter()
    g = generate_events(ns, n, corpus, rng, utcnow().replace(microsecond=0), sink)
    gen_s = time.perf_counter() - t - append_s
    t = time.perf_counter()
    code = run_worker(rt, burst=True)
    project_s = time.perf_counter() - t
    if code != 0:
        raise RuntimeError(f"burst worker exited {code} projecting {ns}")
    print(f"namespace {ns}: {g.notes:,} notes, {g.events:,} events, {g.words:,} words "
          f"(mean {g.words / g.notes:.0f}, {mib:.0f} MiB of text); longterm {g.longterm:,}, "
          f"scratch {g.scratch:,}, private {g.private:,}, forgotten {g.forgotten:,}")
    print(f"  generate {gen_s:6.2f} s   append {append_s:6.2f} s "
          f"({g.events / append_s:,.0f} events/s, Client.append in chunks of {CHUNK:,})   "
          f"project {project_s:6.2f} s ({g.events / project_s:,.0f} events/s)")


def _rank_once(idx: NamespaceIndex, raw: dict[str, Any], cfg: Any,
               stats: dict[str, Any], embedder: Any) -> float:
    req = parse_request(raw)
    now = utcnow()
    t = time.perf_counter()
    res = run_rank(idx, req, cfg, now, embedder=embedder)  # embeds the query on its own
    secs = time.perf_counter() - t
    # plain queries leave res.candidates empty: count the notes with relevance > 0 instead
    # (outside the timed part; private notes of other agents still counted)
    stats["cands"].append(len(idx.relevance(req.text, req.embedding, cfg, req.agent)))
    stats["methods"][res.method] = stats["methods"].get(res.method, 0) + 1
    return secs


def _cand_summary(stats: dict[str, Any]) -> str:
    c = stats["cands"]
    return (f"relevant notes per query: p50 {pct(c, 50):,} p99 {pct(c, 99):,} max {max(c):,}; "
            f"methods {dict(sorted(stats['methods'].items()))}")


def in_worker(rt: Any, ns: str, reqs: list[dict[str, Any]],
              common: list[dict[str, Any]]) -> None:
    """Index full load, then ``run_rank`` and ``engine.answer`` latency per query, then
    ``run_rank`` alone on the common-word sample."""
    engine = QueryEngine(rt.store, rt.cfg, rt.settings)
    idx = NamespaceIndex(ns)
    t = time.perf_counter()
    load_index(rt.store, idx, embedder=engine.embedder)
    load_s = time.perf_counter() - t
    engine.live[ns] = idx
    pos = format_pos(tail(rt.store, ns))
    engine.answer([Envelope(f"{ns}.warm", pos, reqs[0])])  # the first pays any lazy setup
    print(f"in-worker {ns}: index full load {load_s * 1000:,.0f} ms "
          f"({idx.indexed():,} indexed notes; includes embedding them with "
          f"{engine.embedder.name if engine.embedder else 'no embedder'} and writing the "
          f"snapshot)")
    snap_s = []
    for _ in range(3):
        fresh = NamespaceIndex(ns)
        t = time.perf_counter()
        if not read_snapshot(rt.store, fresh):
            raise RuntimeError(f"no index snapshot of {ns} after a full load")
        snap_s.append(time.perf_counter() - t)
    print(f"  index snapshot load (HGETALL + decode) median of 3: "
          f"{statistics.median(snap_s) * 1000:,.0f} ms; worker RSS with this index loaded "
          f"from the snapshot: {index_rss_mib(rt.settings.redis_url, ns):,.0f} MiB")
    rank_s: list[float] = []
    answer_s: list[float] = []
    stats: dict[str, Any] = {"cands": [], "methods": {}}
    for raw in reqs:
        rank_s.append(_rank_once(idx, raw, rt.cfg, stats, engine.embedder))
        env = Envelope(f"{ns}.{uuid.uuid4().hex[:24]}", pos, raw)
        t = time.perf_counter()
        [q] = engine.answer([env])
        answer_s.append(time.perf_counter() - t)
        if q.result is None:
            raise RuntimeError(f"in-worker query failed: {(q.body or b'').decode()[:200]}")
    print(f"  run_rank      {ms_summary(rank_s)}")
    print(f"  engine.answer {ms_summary(answer_s)}")
    print(f"  {_cand_summary(stats)}")
    if common:
        cstats: dict[str, Any] = {"cands": [], "methods": {}}
        common_s = [_rank_once(idx, raw, rt.cfg, cstats, engine.embedder) for raw in common]
        print(f"  run_rank, common-word queries {ms_summary(common_s)}")
        print(f"  {_cand_summary(cstats)}")


def index_rss_mib(redis_url: str, ns: str) -> float:
    """Peak RSS of a fresh process that connects, builds the runtime and loads ``ns``'s index
    the way a worker's first query does (snapshot, then catch-up), then answers one query.
    Read from ``VmHWM`` (``ru_maxrss`` survives fork and exec: a child would report the
    bench's own peak)."""
    code = (
        "import resource, sys\n"
        "from hivemind_memory.api_stub.protocol.settings import Settings\n"
        "from hivemind_memory.projections.store.connection import connect\n"
        "from hivemind_memory.worker import runtime\n"
        "from hivemind_memory.projections.ranking.index import NamespaceIndex\n"
        "from hivemind_memory.projections.store.index_loader import refresh_index\n"
        "from hivemind_memory.projections.ranking.embedders import embedder_for\n"
        "from hivemind_memory.api_stub.protocol.messages import QueryRequest, utcnow\n"
        "from hivemind_memory.worker.engine import run_rank\n"
        "runtime.single_threaded_blas()\n"
        "s = Settings.from_env(redis_url=sys.argv[1])\n"
        "rt = runtime.build(s, connect(s.redis_url))\n"
        "emb = embedder_for(rt.cfg.embedder)\n"
        "idx = NamespaceIndex(sys.argv[2]); refresh_index(rt.store, idx, emb)\n"
        "run_rank(idx, QueryRequest(ns=sys.argv[2], text='w1 w2', budget=2000), rt.cfg,\n"
        "         utcnow(), embedder=emb)\n"
        "hwm = [ln for ln in open('/proc/self/status') if ln.startswith('VmHWM')]\n"
        "print(int(hwm[0].split()[1]) / 1024 if hwm else "
        "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run([sys.executable, "-c", code, redis_url, ns], check=True,
                         capture_output=True, text=True, env=env)
    return float(out.stdout.strip().splitlines()[-1])


def wait_served(rq: Any, proc: subprocess.Popen[bytes], within_s: float = 120.0) -> None:
    """Return once a live worker serves a query queue (its first heartbeat), or raise if the
    worker process exits or does not beat within ``within_s``."""
    from hivemind_memory.projections.store.beats import served_queues

    deadline = time.monotonic() + within_s
    while not served_queues(rq):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the worker process never served a queue (exit {proc.poll()})")
        time.sleep(0.05)  # polling Redis for another process's first heartbeat


@contextmanager
def worker_process(redis_url: str, logdir: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``hivemind worker`` in a subprocess (logs to a file), stopped (TERM, then KILL) at exit."""
    env = {**os.environ, "HIVEMIND_REDIS_URL": redis_url,
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    logfile = logdir / "worker.log"
    with open(logfile, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "hivemind_memory.worker.cli", "worker"],
                                env=env, stdout=fh, stderr=subprocess.STDOUT)
        try:
            yield proc
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=10)
    if proc.returncode not in (0, -signal.SIGTERM):
        tail_lines = logfile.read_text(errors="replace").splitlines()[-20:]
        print(f"worker exited {proc.returncode}; last log lines:", file=sys.stderr)
        for line in tail_lines:
            print("  " + line, file=sys.stderr)


def served_ms(logfile: Path, ids: Sequence[str]) -> list[float]:
    """The worker's own ``duration_ms`` of the given queries, from its ``queries_served`` log
    lines (answer + result write, without the RQ job overhead or the client's round trips)."""
    want = set(ids)
    out: list[float] = []
    with open(logfile, "rb") as fh:
        for line in fh:
            if b'"queries_served"' not in line:
                continue
            try:
                obj = _dec.decode(line)
            except msgspec.DecodeError:
                continue
            if isinstance(obj, dict):
                out += [float(ms) / 1000 for qid, ms in zip(
                    obj.get("query_ids", []), obj.get("duration_ms", []), strict=False)
                    if qid in want]
    return out


def _worker_side(logfile: Path | None, ids: Sequence[str]) -> str:
    if logfile is None:
        return ""
    got = served_ms(logfile, ids)
    for _ in range(40):  # the worker logs a query just after writing its result
        if len(got) >= len(ids):
            break
        time.sleep(0.025)
        got = served_ms(logfile, ids)
    return f"\n  worker-side (queries_served duration_ms) {ms_summary(got)}" if got else ""


def _check(body: bytes) -> bool:
    obj = _dec.decode(body)
    return isinstance(obj, dict) and "error" not in obj


def end_to_end(client: Any, reqs: list[dict[str, Any]], logfile: Path | None = None) -> float:
    """Single queries one at a time; returns the p50 in seconds."""
    lat: list[float] = []
    ids: list[str] = []
    errors = 0
    for raw in reqs:
        t = time.perf_counter()
        qid = client.submit_query(raw["ns"], raw["text"], raw["budget"], agent=raw["agent"])
        body = client.result_json(qid, timeout=60)
        lat.append(time.perf_counter() - t)
        ids.append(qid)
        errors += not _check(body)
    print(f"end-to-end single query (submit_query + result_json, {reqs[0]['ns']}):")
    print(f"  {ms_summary(lat)}" + (f"  ERRORS {errors}" if errors else "")
          + _worker_side(logfile, ids))
    return statistics.median(lat)


def batch(client: Any, reqs: list[dict[str, Any]], label: str,
          logfile: Path | None = None) -> float:
    """``submit_batch`` + ``batch_results``; returns queries per second."""
    t0 = time.perf_counter()
    ids = client.submit_batch(reqs)
    t1 = time.perf_counter()
    errors = sum(not _check(b) for b in client.batch_results(ids, timeout=600))
    t2 = time.perf_counter()
    qps = len(reqs) / (t2 - t0)
    print(f"batch {label}: {len(reqs):,} queries in {t2 - t0:.2f} s = {qps:,.0f} queries/s "
          f"(submit {1000 * (t1 - t0):,.0f} ms)" + (f"  ERRORS {errors}" if errors else "")
          + _worker_side(logfile, ids))
    return qps


@contextmanager
def noop_worker(redis_url: str) -> Iterator[subprocess.Popen[bytes]]:
    """A plain RQ worker for the no-op jobs (``bench.noop``, same worker class and serializer
    as ``hivemind worker``), stopped on exit."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.Popen([sys.executable, "-m", "bench.noop", redis_url], env=env)
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def drain_noops(rt: Any, n: int, proc: subprocess.Popen[bytes]) -> float:
    """Enqueue ``n`` no-op jobs at once for ``proc`` (``noop_worker``); its drain rate
    (jobs/s)."""
    q: Queue = noop.queue(rt.rq)
    datas = [Queue.prepare_data(noop.JOB, result_ttl=60, failure_ttl=600,
                                description="bench noop") for _ in range(n)]
    return _drain_noops(rt, q, datas, n, proc)


def _single_noops(q: Queue, n: int) -> float:
    lat: list[float] = []
    for _ in range(n + 5):  # the first few warm the connections up
        t = time.perf_counter()
        job = q.enqueue(noop.JOB, result_ttl=60, failure_ttl=600, description="bench noop")
        if job.latest_result(timeout=10) is None:
            raise RuntimeError(f"no-op job {job.id} had no result within 10 s")
        lat.append(time.perf_counter() - t)
    lat = lat[5:]
    print(f"rq no-op job end to end, one at a time (enqueue + latest_result): {ms_summary(lat)}")
    return statistics.median(lat)


def _drain_noops(rt: Any, q: Queue, datas: list[Any], n: int,
                 proc: subprocess.Popen[bytes]) -> float:
    t0 = time.perf_counter()
    jobs = q.enqueue_many(datas)
    t1 = time.perf_counter()
    last = jobs[-1]
    deadline = time.monotonic() + 120
    while True:
        status = last.get_status()
        if status in (JobStatus.FINISHED, JobStatus.FAILED):
            break
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError(f"no-op jobs not drained (last job {status})")
        time.sleep(0.005)  # polling the job status: RQ offers nothing to block on here
    wall = time.perf_counter() - t0
    got = [j for j in Job.fetch_many([j.id for j in jobs], connection=rt.rq,
                                     serializer=q.serializer) if j is not None]
    failed = sum(j.get_status(refresh=False) != JobStatus.FINISHED for j in got)
    starts = [j.started_at for j in got if j.started_at is not None]
    ends = [j.ended_at for j in got if j.ended_at is not None]
    span = (max(ends) - min(starts)).total_seconds() if starts and ends else wall
    rate = n / span if span > 0 else float("inf")
    print(f"rq no-op baseline: {n:,} jobs drained at {rate:,.0f} jobs/s "
          f"({1000 / rate:.2f} ms a job; wall {wall:.2f} s incl. enqueue_many "
          f"{1000 * (t1 - t0):,.0f} ms)" + (f"  FAILED {failed}" if failed else ""))
    return rate


@dataclass
class Options:
    sizes: list[int]
    queries: list[int]
    common: list[int]
    e2e: int
    batch: int
    batch_chunk1: int
    noop: int
    seed: int
    rounds: int


def run(url: str, opts: Options, prefix: str) -> list[str]:
    """Every step against the Redis at ``url``; returns the namespaces written."""
    from hivemind_memory.api_stub.client import Client
    from hivemind_memory.projections.store.connection import connect
    from hivemind_memory.worker import runtime

    s = Settings.from_env(redis_url=url)
    rt = runtime.build(s, connect(url))
    runtime.install(rt)
    runtime.single_threaded_blas()  # as ``hivemind worker`` runs (the in-worker figures)
    rng = random.Random(opts.seed)
    corpus = Corpus.make(rng)
    nss = [f"{prefix}-{n}" for n in opts.sizes]
    for ns, n in zip(nss, opts.sizes, strict=True):
        load_namespace(rt, ns, n, corpus, opts.seed)
    for ns, nq, nc in zip(nss, opts.queries, opts.common, strict=True):
        in_worker(rt, ns, query_requests(ns, nq, corpus, rng),
                  query_requests(ns, nc, corpus, rng, skip=0))

    ns = nss[0]
    with tempfile.TemporaryDirectory(prefix="hivemind-bench-query-") as d, \
            worker_process(url, Path(d)) as proc:
        client = Client(rt.store, rt.rq, s)
        wlog = Path(d) / "worker.log"
        t = time.perf_counter()
        wait_served(rt.rq, proc)  # a query before its first heartbeat is shard_unavailable
        warm = query_requests(ns, 1, corpus, rng)[0]
        body = client.result_json(client.submit_query(ns, warm["text"], warm["budget"]), 120)
        if not _check(body):
            raise RuntimeError(f"warm-up query failed: {body.decode()[:200]}")
        print(f"worker subprocess: first query {1000 * (time.perf_counter() - t):,.0f} ms "
              f"(worker start + index full load of {ns})")
        p50 = end_to_end(client, query_requests(ns, opts.e2e, corpus, rng), wlog)
        qps = batch(client, query_requests(ns, opts.batch, corpus, rng),
                    f"query_chunk={s.query_chunk} ({ns})", wlog)
        # the same queries with one job per query, then again batched, for a like-for-like
        # comparison (each run recomputes every answer: live queries are never cached)
        small = query_requests(ns, opts.batch_chunk1, corpus, rng)
        one = Client(rt.store, rt.rq, replace(s, query_chunk=1))
        qps1 = batch(one, small, f"query_chunk=1 ({ns})", wlog)
        batch(client, small, f"query_chunk={s.query_chunk}, the same {len(small):,} queries",
              wlog)
        # the common-word batch and the no-op drain, alternated: the VM's speed drifts from
        # one minute to the next and the ratio compares the two, so each round measures both
        # back to back and the medians are compared
        commons: list[float] = []
        rates: list[float] = []
        with noop_worker(url) as noop_proc:
            for k in range(opts.rounds):
                common = query_requests(ns, opts.batch, corpus, rng, skip=0)
                commons.append(batch(client, common, f"query_chunk={s.query_chunk}, common "
                                     f"words included ({ns}), round {k + 1}", wlog))
                rates.append(drain_noops(rt, opts.noop, noop_proc))
            noop_p50 = _single_noops(noop.queue(rt.rq), opts.e2e)
    rate, qps_common = statistics.median(rates), statistics.median(commons)
    print("ratios to the no-op job:")
    print(f"  no-op drain rate, median of {len(rates)} rounds: {rate:,.0f} jobs/s "
          f"({', '.join(f'{r:,.0f}' for r in rates)})")
    print(f"  single query end to end p50 = {p50 * rate:.1f} no-op jobs at the drain rate; "
          f"{p50 / noop_p50:.2f} x a single no-op job end to end")
    print(f"  batch (chunk {s.query_chunk}) = {qps / rate:.1f}x the no-op job rate; "
          f"chunk 1 = {qps1 / rate:.2f}x; common words included = {qps_common / rate:.1f}x "
          f"(median of {len(commons)} rounds; each round "
          f"{', '.join(f'{c / r:.1f}x' for c, r in zip(commons, rates, strict=True))})")
    return nss


def _ints(value: str) -> list[int]:
    try:
        out = [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of ints: {value!r}") from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"every value must be >= 1: {value!r}")
    return out


def _counts(value: str) -> list[int]:
    try:
        out = [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of ints: {value!r}") from None
    if not out or min(out) < 0:
        raise argparse.ArgumentTypeError(f"every value must be >= 0: {value!r}")
    return out


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="hivemind bench query", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=_ints, default=[10_000, 100_000],
                    help="notes per namespace, comma-separated (default 10000,100000); "
                         "the end-to-end steps use the first")
    ap.add_argument("--queries", type=_ints, default=None,
                    help="in-worker queries per size, comma-separated or one value for all "
                         "(default 200 below 50k notes, else 30)")
    ap.add_argument("--common", type=_counts, default=None,
                    help="in-worker queries per size drawn like the corpus, common words "
                         "included (run_rank only; default 10 below 50k notes, else 2)")
    ap.add_argument("--e2e", type=int, default=100, help="single end-to-end queries")
    ap.add_argument("--batch", type=int, default=500, help="queries of the batch run")
    ap.add_argument("--batch-chunk1", type=int, default=100,
                    help="queries of the query_chunk=1 batch run")
    ap.add_argument("--noop", type=int, default=500, help="no-op jobs of the baseline")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of the common-word batch and the no-op drain, alternated "
                         "(the ratio compares their medians)")
    ap.add_argument("--redis-url", default=None,
                    help="use this Redis (default: a private redis-server, stopped at the end)")
    return ap


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``hivemind bench query``."""
    from hivemind_memory.worker.ops import logs

    ap = _parser()
    args = ap.parse_args(argv)
    logs.configure(level="warning")
    queries = _per_size(ap, "--queries", args.queries, args.sizes, 200, 30)
    common = _per_size(ap, "--common", args.common, args.sizes, 10, 2)
    if min(args.e2e, args.batch, args.batch_chunk1, args.noop, args.rounds) < 1:
        ap.error("--e2e, --batch, --batch-chunk1, --noop and --rounds must be >= 1")
    opts = Options(args.sizes, queries, common, args.e2e, args.batch, args.batch_chunk1,
                   args.noop, args.seed, args.rounds)
    # SIGTERM (e.g. a timeout) must still stop the worker subprocess and the server
    old = signal.signal(signal.SIGTERM, _terminate)
    try:
        return _main(args, opts)
    finally:
        signal.signal(signal.SIGTERM, old)


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _per_size(ap: argparse.ArgumentParser, flag: str, given: list[int] | None,
              sizes: list[int], small: int, large: int) -> list[int]:
    out = given or [small if n < 50_000 else large for n in sizes]
    if len(out) == 1:
        out = out * len(sizes)
    if len(out) != len(sizes):
        ap.error(f"{flag} takes one value or one per size")
    return out


def _main(args: argparse.Namespace, opts: Options) -> int:
    started = time.perf_counter()
    if args.redis_url is not None:
        prefix = f"bq-{uuid.uuid4().hex[:8]}"
        print(f"redis {args.redis_url} (namespaces {prefix}-*)")
        from hivemind_memory.projections.store.connection import connect

        try:
            run(args.redis_url, opts, prefix)
        finally:
            r = connect(args.redis_url)
            nss = [f"{prefix}-{n}" for n in args.sizes]
            drop_namespaces(r, nss)
            for ns in nss:  # result keys and done markers (they would expire anyway)
                for key in r.scan_iter(match=f"hm:{{{ns}}}:*", count=1000):
                    r.delete(key)
            r.close()
    else:
        with private_redis() as url:
            print(f"redis private redis-server at {url} (appendonly yes, appendfsync everysec)")
            run(url, opts, "bq")
    print(f"total {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
