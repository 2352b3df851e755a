"""``python -m bench writes``: how fast ``remember`` writes with each ``duplicates`` mode, over
HTTP (``hivemind serve``) and the SDK, beside a plain append, in one run; what the
near-duplicate check costs; and what it finds against the query-based check it replaced.
Prints figures; never asserts timings.

1. One namespace per size (``--sizes``, default 10,000 and 100,000 notes; ``bench.query``'s
   generator: a Zipf vocabulary, log-normal lengths, private and forgotten notes), appended
   once, then folded into the read model as ``hivemind replay`` does (``--seed-by replay``,
   the default: ``rebuild.fold_log`` + ``write_back``, which files the lookup from the folded
   notes in bulk) or by a burst worker batch by batch (``--seed-by project``, the projector's
   own path; slow at 100k on a loaded machine). Either way the read model and the lookup are
   what the projector would have made (``replay --verify`` compares them). One
   ``hivemind worker`` process projects what the writes append.
2. **Check cost**: ``Client.check_duplicates`` (the full check) of ``--probes`` fresh notes in
   this process: CPU (``time.process_time``) and wall time per check, and how many notes the
   lookup named; then ``--probes`` default ``remember`` calls of fresh notes: CPU and wall time
   a write, how many took the one-step path (``dupappend``) and how many the full check, the
   one-step script's calls a write and Redis's time in it (the SLOWLOG's durations).
3. **Recall**: ``--probes`` near-duplicates made from notes of the namespace (words dropped,
   replaced and added at random rates) checked both ways: the lookup, and the check of before
   (``query_based_check``: a query of the text with ``explain``, the Jaccard overlap of each
   candidate, exactly as ``Client.near_duplicates`` did). Recall = the share of the pairs the
   query-based check reports (overlap >= the threshold) that the lookup reports too. Every note
   the lookup reports is checked to be one the writer may see (active; shared or its own).
4. **Write rates**: for 1 and 4 clients (``--clients``; threads, each its own connection), each
   path (``http``, ``sdk``) writes ``--writes`` fresh notes per client with each mode
   (``append``: ``POST .../events`` or ``Memory.append`` of a ``note.created``; then
   ``remember`` with ``ignore``, ``report`` (the default), ``supersede``, ``keep``): writes/s
   and p50 latency, and each mode's rate over ``ignore``'s. Each mode writes in ``--rounds``
   turns, the modes taking turns (forwards, then backwards), so a machine whose load drifts
   weighs on every mode alike.

Without ``--redis-url`` a private ``redis-server`` is started and stopped.
"""

from __future__ import annotations

import argparse
import http.client
import random
import socket
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import redis

from bench.batch import server, workers
from bench.core import private_redis
from bench.query import AGENTS, Corpus, load_namespace
from hivemind_memory.api_stub.protocol.settings import Settings

MODES = ("append", "ignore", "report", "supersede", "keep")
"""``append`` is the plain append; the others are ``remember``'s ``duplicates`` modes."""
PATHS = ("http", "sdk")
MAX_QUERY_CHARS = 16_384
"""The old check queried the note's first this many characters (``QueryRequest.text``)."""


def query_based_check(client: Any, ns: str, agent: str, text: str, cfg: Any
                      ) -> list[tuple[str, float]]:
    """The near-duplicate check before the lookup (the reference): the candidates of one
    query of the text (read-your-writes, explain), those whose word overlap reaches the
    threshold. It is an audited query, run through RQ and a worker."""
    from hivemind_memory.projections.ranking.similarity import near_duplicates

    for _ in range(300):  # a worker's first load of a large namespace answers index_warming
        res = client.query(ns, text[:MAX_QUERY_CHARS], 1, agent=agent, explain=True,
                           timeout=300)
        if res.get("error", {}).get("code") != "index_warming":
            break
        time.sleep(2)
    if "error" in res:
        raise RuntimeError(f"reference query failed: {res['error']}")
    return near_duplicates(text, ((c["note_id"], c["text"]) for c in res["candidates"]), cfg)


def fresh_text(corpus: Corpus, rng: random.Random) -> str:
    """A new note of 10-300 words with a word of its own (so no two are twins)."""
    return corpus.text(rng, rng.randint(10, 300)) + f" tag{uuid.uuid4().hex[:10]}"


def near_copy(text: str, corpus: Corpus, rng: random.Random) -> str:
    """``text`` with up to 40 % of its words dropped, up to 30 % replaced by corpus words
    and up to 20 % more added (rates drawn per copy)."""
    words = text.split()
    drop, swap, add = rng.uniform(0, 0.4), rng.uniform(0, 0.3), rng.uniform(0, 0.2)
    out = [corpus.text(rng, 1) if rng.random() < swap else w
           for w in words if rng.random() >= drop]
    out += corpus.text(rng, max(1, int(add * len(words)))).split()
    rng.shuffle(out)
    return " ".join(out) or words[0]


def sample_notes(r: Any, ns: str, k: int, rng: random.Random) -> list[Any]:
    """``k`` active notes of the namespace, drawn by ``rng`` from its sorted note ids (HKEYS,
    then HMGET): the same seed draws the same notes (Redis's HRANDFIELD did not, so a small
    run's sample sometimes held no pair at all)."""
    from hivemind_memory.projections.state import unpack_note
    from hivemind_memory.projections.store import keys

    every = sorted(x.decode() for x in r.hkeys(keys.notes(ns)))
    ids = rng.sample(every, min(4 * k, 10_000, len(every)))
    states = [unpack_note(b) for b in r.hmget(keys.notes(ns), ids) if b]
    return [s for s in states if s.active][:k]


@dataclass
class CheckCost:
    cpu_ms: float
    wall_ms: float
    named: float
    script_ms: float | None = None
    """Redis's own time in the lookup script a check (``INFO commandstats``' EVALSHA time
    over the checks; None when the server does not say)."""


def _evalsha_usec(r: Any) -> tuple[float, int] | None:
    """Redis's total microseconds and calls of EVALSHA so far (``INFO commandstats``)."""
    got = r.info("commandstats").get("cmdstat_evalsha")
    return (float(got["usec"]), int(got["calls"])) if got else None


def check_cost(client: Any, ns: str, texts: Sequence[str]) -> CheckCost:
    """Mean CPU and wall time of ``check_duplicates`` in this process, how many notes a
    lookup named on average (before the exact overlap), and Redis's time in the lookup
    script a check (nothing else runs scripts meanwhile: the namespaces are projected)."""
    from hivemind_memory.projections.ranking.dupsketch import probe, spec_of
    from hivemind_memory.projections.store.dupindex import lookup

    cfg = client.config()
    spec = spec_of(cfg)
    named = [len(set((f := lookup(client.store, ns, probe(t, spec, cfg), spec)).near
                     + f.twins)) for t in texts[:50]]
    s0 = _evalsha_usec(client.store)
    c0, t0 = time.process_time(), time.perf_counter()
    for t in texts:
        got = client.check_duplicates(ns, AGENTS[0], t)
        if got.near is None:
            raise RuntimeError(f"check did not run: {got.unchecked}")
    n = len(texts)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    s1 = _evalsha_usec(client.store)
    script = (s1[0] - s0[0]) / 1000 / max(1, s1[1] - s0[1]) if s0 and s1 else None
    return CheckCost(1000 * cpu / n, 1000 * wall / n, statistics.mean(named), script)


@dataclass
class OneStep:
    cpu_ms: float
    wall_ms: float
    one_step: int
    sends: float
    full: int
    script_ms: float | None
    """Redis's own time in ``append_unless_named.lua`` a call (its calls' SLOWLOG
    durations; None when the server keeps no SLOWLOG)."""
    reads: float = 0.0
    """The one-step path's reads of the lookup's buckets (an HMGET of ``dupbands`` outside a
    script) a write."""
    read_ms: float | None = None
    """Redis's own time in such a read, a call (SLOWLOG durations)."""
    redis_ms: float | None = None
    """Redis's time in the one-step path's script calls and bucket reads, a write."""


SLOWLOG_PER_WRITE = 400
"""SLOWLOG entries kept a timed write: the worker projecting the writes and RQ log their
commands there too (about a hundred a write), and an entry pushed out is a call not counted."""


def _sha(source: str) -> bytes:
    import hashlib

    return hashlib.sha1(source.encode()).hexdigest().encode()


def one_step_cost(client: Any, ns: str, texts: Sequence[str]) -> OneStep:
    """What the default ``remember`` of fresh notes costs in this process (``Client.remember``,
    ``report``): CPU and wall time a write; how many took the one-step path, its script's
    calls a write, counted with the SLOWLOG (every command logged with its duration while it
    runs; the server's settings put back after), which also gives Redis's own time in the
    one-step script a call; the rest took the full check."""
    from hivemind_memory.events.codec import parse_json_event
    from hivemind_memory.projections.store import dupappend, keys
    from hivemind_memory.projections.store.scripts import source

    r = client.store
    mine = _sha(source("append_unless_named"))
    try:
        was = r.config_get("slowlog-*")
        r.config_set("slowlog-max-len", SLOWLOG_PER_WRITE * len(texts) + 10_000)
        r.config_set("slowlog-log-slower-than", 0)
        r.slowlog_reset()
    except redis.RedisError:
        was = None
    evs = [parse_json_event(msgspec.json.encode(
        {"type": "note.created", "event_id": f"e{uuid.uuid4().hex}", "ns": ns,
         "note_id": f"w{uuid.uuid4().hex}", "agent": AGENTS[0], "text": t,
         "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})) for t in texts]
    run, done = dupappend.append_unless_named, []

    def counted(*a: Any, **kw: Any) -> Any:
        got = run(*a, **kw)
        done.append(got is not None)
        return got
    dupappend.append_unless_named = counted
    try:
        c0, t0 = time.process_time(), time.perf_counter()
        for ev in evs:
            client.remember(ev)
        cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    finally:
        dupappend.append_unless_named = run
    calls: list[int] = []
    reads: list[int] = []
    bands = keys.dupbands(ns).encode()
    if was is not None:
        log = r.slowlog_get(SLOWLOG_PER_WRITE * len(texts) + 10_000)
        r.config_set("slowlog-log-slower-than", was["slowlog-log-slower-than"])
        r.config_set("slowlog-max-len", was["slowlog-max-len"])
        for e in log:
            cmd = e["command"].split(b" ", 2)
            if cmd[0].upper() == b"EVALSHA" and len(cmd) > 1 and cmd[1] == mine:
                calls.append(int(e["duration"]))
            elif cmd[0].upper() == b"HMGET" and len(cmd) > 1 and cmd[1] == bands:
                reads.append(int(e["duration"]))  # scripts' own commands are not logged
    n = len(texts)
    fast = sum(done)
    return OneStep(1000 * cpu / n, 1000 * wall / n, fast, len(calls) / n, n - fast,
                   statistics.mean(calls) / 1000 if calls else None, len(reads) / n,
                   statistics.mean(reads) / 1000 if reads else None,
                   (sum(calls) + sum(reads)) / 1000 / n if was is not None else None)


@dataclass
class Recall:
    pairs: int
    found: int
    extra: int
    invisible: int
    probes: int


def recall(client: Any, ns: str, corpus: Corpus, probes: int, rng: random.Random) -> Recall:
    """The lookup against the query-based check on near-copies of the namespace's notes."""
    from hivemind_memory.projections.state import unpack_note
    from hivemind_memory.projections.store import keys

    cfg = client.config()
    out = Recall(0, 0, 0, 0, 0)
    for note in sample_notes(client.store, ns, probes, rng):
        text = near_copy(note.text, corpus, rng)
        agent = note.agent if rng.random() < 0.7 else rng.choice(AGENTS)
        ref = {n for n, _ in query_based_check(client, ns, agent, text, cfg)}
        got = client.check_duplicates(ns, agent, text)
        if got.near is None:
            raise RuntimeError(f"check did not run: {got.unchecked}")
        mine = {n for n, _ in got.near}
        out.probes += 1
        out.pairs += len(ref)
        out.found += len(ref & mine)
        out.extra += len(mine - ref)
        blobs = client.store.hmget(keys.notes(ns), sorted(mine)) if mine else []
        states = [unpack_note(b) for b in blobs if b]
        out.invisible += sum(not s.active or (s.scope == "private" and s.agent != agent)
                             for s in states) + (len(mine) - len(states))
    return out


@dataclass
class Rate:
    writes: int
    seconds: float
    latencies: list[float]
    merged: int

    @property
    def per_s(self) -> float:
        return self.writes / self.seconds if self.seconds > 0 else 0.0

    @property
    def p50_ms(self) -> float:
        return 1000 * statistics.median(self.latencies) if self.latencies else 0.0


@dataclass
class Writer:
    """One client's way to write a note (True: it was merged into a twin), and to let go."""

    write: Callable[[str], bool]
    close: Callable[[], None]


def _http_writer(port: int, ns: str, mode: str, agent: str) -> Writer:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    conn.connect()
    # http.client sends a request's headers and body in two writes: with Nagle on, the body
    # waits for the server's delayed ACK of the headers (40 ms on Linux), which the bench would
    # measure instead of the write. HTTP clients set TCP_NODELAY (urllib3, httpx, node).
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def write(text: str) -> bool:
        if mode == "append":
            path = f"/v1/ns/{ns}/events"
            body: Any = [{"type": "note.created", "note_id": f"w{uuid.uuid4().hex}",
                          "agent": agent, "text": text}]
        else:
            path = f"/v1/ns/{ns}/remember"
            body = {"text": text, "agent": agent, "duplicates": mode}
        conn.request("POST", path, body=msgspec.json.encode(body),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200:
            raise RuntimeError(f"POST {path}: {resp.status} {data[:300]!r}")
        return b'"duplicate_of"' in data
    return Writer(write, conn.close)


def _sdk_writer(url: str, ns: str, mode: str, agent: str) -> Writer:
    from hivemind_memory import Memory

    mem = Memory(url, ns=ns, agent=agent)

    def write(text: str) -> bool:
        if mode == "append":
            mem.append([{"type": "note.created", "note_id": f"w{uuid.uuid4().hex}",
                         "text": text}])
            return False
        got = mem.remember(text, duplicates=mode)  # type: ignore[arg-type]
        return got.duplicate_of is not None
    return Writer(write, mem.close)


def write_rate(make: Callable[[str, str], Writer], mode: str, clients: int,
               texts: list[list[str]]) -> Rate:
    """``clients`` threads, each writing its texts with its own writer."""
    writers = [make(mode, f"writer{k}") for k in range(clients)]
    lat: list[list[float]] = [[] for _ in range(clients)]
    merged = [0] * clients
    errors: list[BaseException] = []
    start = threading.Barrier(clients + 1)

    def run(k: int) -> None:
        start.wait()
        try:
            for t in texts[k]:
                t0 = time.perf_counter()
                merged[k] += writers[k].write(t)
                lat[k].append(time.perf_counter() - t0)
        except BaseException as exc:  # reported below, after the others finished
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
    for th in threads:
        th.start()
    start.wait()
    t0 = time.perf_counter()
    for th in threads:
        th.join()
    seconds = time.perf_counter() - t0
    for w in writers:
        w.close()
    if errors:
        raise errors[0]
    return Rate(sum(len(x) for x in lat), seconds, [x for xs in lat for x in xs], sum(merged))


@dataclass
class Options:
    sizes: list[int]
    writes: int
    clients: list[int]
    probes: int
    seed: int
    seed_by: str = "replay"
    rounds: int = 1


def seed_by_replay(rt: Any, ns: str, n: int, corpus: Corpus, seed: int) -> None:
    """``load_namespace``'s notes, appended, then folded and written back as ``hivemind
    replay`` does (one fold of the log, one MULTI that writes the notes and files the
    lookup), instead of batch by batch by a worker; prints what it took."""
    from bench.query import CHUNK, generate_events
    from hivemind_memory.api_stub.client import Client
    from hivemind_memory.api_stub.protocol.messages import utcnow
    from hivemind_memory.projections.ranking.dupsketch import spec_of
    from hivemind_memory.projections.store.rebuild import fold_log, write_back

    client = Client(rt.store, rt.rq, rt.settings)
    rng = random.Random(seed * 1_000_003 + n)
    t = time.perf_counter()
    g = generate_events(ns, n, corpus, rng, utcnow().replace(microsecond=0), client.append)
    append_s = time.perf_counter() - t
    c0, t = time.process_time(), time.perf_counter()
    rb = fold_log(rt.store, ns)
    # one MULTI of every note and lookup member: longer than the store's 10 s socket timeout
    # at 100k notes on a loaded machine, so on a connection of its own without one
    bulk = redis.Redis.from_url(rt.settings.redis_url, socket_timeout=None)
    try:
        if not write_back(bulk, ns, rb, spec=spec_of(client.config())):
            raise RuntimeError(f"replay of {ns} did not write back (projected meanwhile?)")
    finally:
        bulk.close()
    print(f"namespace {ns}: {g.notes:,} notes, {g.events:,} events; generated and appended "
          f"in {append_s:.1f} s (in chunks of {CHUNK:,}), folded and written back as replay "
          f"does in {time.perf_counter() - t:.1f} s ({time.process_time() - c0:.1f} s CPU)")


def run(url: str, opts: Options) -> None:
    from hivemind_memory.api_stub.client import Client
    from hivemind_memory.projections.ranking.dupsketch import band_recall, spec_of
    from hivemind_memory.projections.store import keys
    from hivemind_memory.projections.store.connection import connect
    from hivemind_memory.worker import runtime

    s = Settings.from_env(redis_url=url)
    rt = runtime.build(s, connect(url))
    runtime.install(rt)
    rng = random.Random(opts.seed)
    corpus = Corpus.make(rng)
    client = Client(rt.store, rt.rq, s)
    cfg = client.config()
    spec = spec_of(cfg)
    print(f"near-duplicate lookup: {spec.tag}, threshold {cfg.duplicate_threshold}: a pair at "
          f"the threshold shares a band with probability "
          f"{band_recall(cfg.duplicate_threshold, spec.bands, spec.rows, spec.min_hits):.3f} "
          f"(at least {spec.min_hits} of {spec.bands} bands of {spec.rows} rows)")
    nss = []
    for n in opts.sizes:
        ns = f"bw-{n}"
        if opts.seed_by == "replay":
            seed_by_replay(rt, ns, n, corpus, opts.seed)
        else:
            load_namespace(rt, ns, n, corpus, opts.seed)
        mem = sum(rt.store.memory_usage(k, samples=0) or 0
                  for k in (keys.dupbands(ns), keys.dupnotes(ns)))
        print(f"  lookup of {ns}: {rt.store.hlen(keys.dupbands(ns)):,} buckets, "
              f"{rt.store.hlen(keys.dupnotes(ns)):,} records, {mem / 2**20:,.1f} MiB in Redis "
              f"({mem / n:,.0f} B a note; MEMORY USAGE, every element sampled)")
        nss.append(ns)
    with workers(1, url, rt.rq), server(url) as port:
        for ns, n in zip(nss, opts.sizes, strict=True):
            print(f"== {ns} ({n:,} notes)")
            cost = check_cost(client, ns, [fresh_text(corpus, rng)
                                           for _ in range(opts.probes)])
            script = "?" if cost.script_ms is None else f"{cost.script_ms:.3f}"
            print(f"  check of a fresh note: CPU {cost.cpu_ms:.3f} ms, wall {cost.wall_ms:.3f} ms"
                  f", Redis in the lookup script {script} ms (mean of {opts.probes}); the "
                  f"lookup named {cost.named:.1f} notes")
            one = one_step_cost(client, ns, [fresh_text(corpus, rng)
                                             for _ in range(opts.probes)])
            script = "?" if one.script_ms is None else f"{one.script_ms:.3f}"
            read = "?" if one.read_ms is None else f"{one.read_ms:.3f}"
            both = "?" if one.redis_ms is None else f"{one.redis_ms:.3f}"
            print(f"  default remember of a fresh note, in process: CPU {one.cpu_ms:.3f} ms, "
                  f"wall {one.wall_ms:.3f} ms a write; {one.one_step} of {opts.probes} in one "
                  f"step, {one.full} by the full check; {one.reads:.2f} bucket reads a write, "
                  f"Redis in it {read} ms a call; {one.sends:.2f} one-step script calls a "
                  f"write, Redis in it {script} ms a call; Redis in both {both} ms a write")
            rc = recall(client, ns, corpus, opts.probes, rng)
            share = rc.found / rc.pairs if rc.pairs else 1.0
            print(f"  recall vs the query-based check: {rc.found} of {rc.pairs} pairs "
                  f"({100 * share:.1f} %) over {rc.probes} near-copies; {rc.extra} reported "
                  f"only by the lookup; {rc.invisible} not visible to the writer")
            for clients in opts.clients:
                for path in PATHS:
                    rates = {m: Rate(0, 0.0, [], 0) for m in MODES}

                    def make(m: str, agent: str, _p: str = path, _ns: str = ns) -> Writer:
                        return (_http_writer(port, _ns, m, agent) if _p == "http"
                                else _sdk_writer(url, _ns, m, agent))
                    for k in range(opts.rounds):  # modes take turns: load drifts over all
                        per = opts.writes // opts.rounds + (k < opts.writes % opts.rounds)
                        if not per:
                            continue
                        for mode in MODES if k % 2 == 0 else MODES[::-1]:
                            texts = [[fresh_text(corpus, rng) for _ in range(per)]
                                     for _ in range(clients)]
                            got = write_rate(make, mode, clients, texts)
                            acc = rates[mode]
                            rates[mode] = Rate(acc.writes + got.writes,
                                               acc.seconds + got.seconds,
                                               acc.latencies + got.latencies,
                                               acc.merged + got.merged)
                    for mode in MODES:
                        got = rates[mode]
                        print(f"  {clients} client(s) {path:4} {mode:9} {got.per_s:8.1f} "
                              f"writes/s  p50 {got.p50_ms:7.2f} ms  ({got.writes} writes, "
                              f"{got.merged} merged)")
                    base = rates["ignore"].per_s
                    print(f"  {clients} client(s) {path:4} rate / ignore's: " + ", ".join(
                        f"{m} {rates[m].per_s / base:.2f}" for m in MODES if m != "ignore"))


def _ints(value: str) -> list[int]:
    try:
        out = [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of ints: {value!r}"
                                         ) from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"every count must be >= 1: {value!r}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench writes")
    ap.add_argument("--sizes", type=_ints, default=[10_000, 100_000],
                    help="notes per namespace (default 10000,100000)")
    ap.add_argument("--writes", type=int, default=100,
                    help="writes per client per mode and path (default 100)")
    ap.add_argument("--clients", type=_ints, default=[1, 4],
                    help="concurrent writers (default 1,4)")
    ap.add_argument("--probes", type=int, default=200,
                    help="fresh notes timed, and near-copies checked both ways (default 200)")
    ap.add_argument("--rounds", type=int, default=5,
                    help="each mode's writes in this many turns, the modes alternating, so "
                         "a load that drifts falls on every mode alike (default 5)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--seed-by", choices=("replay", "project"), default="replay",
                    help="fold the generated log as replay does (default), or project it "
                         "batch by batch with a burst worker")
    ap.add_argument("--redis-url", default=None,
                    help="an existing Redis (default: start a private redis-server)")
    args = ap.parse_args(argv)
    if args.writes < 1 or args.probes < 1 or args.rounds < 1:
        ap.error("--writes, --probes and --rounds must be >= 1")
    opts = Options(args.sizes, args.writes, args.clients, args.probes, args.seed, args.seed_by,
                   args.rounds)
    if args.redis_url:
        run(args.redis_url, opts)
        return 0
    with private_redis() as url:
        run(url, opts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
