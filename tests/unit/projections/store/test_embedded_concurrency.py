"""``memory://PATH`` under concurrent writers, crashed at a random point and restarted: every
acknowledged record is there exactly once, the log is clean (``check``) and every restart
opens. A seeded loop (``tests.support.crashlog``: 200 rounds by default, more with
``HIVEMIND_SOAK=1`` or ``HIVEMIND_LOG_ROUNDS=N``; ``HIVEMIND_LOG_SEED`` replays a run).

A round is cheap: threads write to one store in every shape a client writes (single XADDs,
pipelines, MULTI/EXEC, Lua scripts), mixing source streams with derived ones (dead letters,
changes, RQ's results); meanwhile the log file is copied at a random moment as a SIGKILL
could leave it (what was fsynced, and a random prefix of what was written after, which may
cut a record in half). Then the store is closed and
reopened, and the copy opened as a store of its own. Real processes killed with SIGTERM and
SIGKILL are in ``tests/system/test_embedded_restart.py``; the SDK with its in-process worker
is the second test here."""

from __future__ import annotations

import random
import shutil
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from hivemind_memory import Memory
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.connection import close_embedded, connect
from hivemind_memory.projections.store.log import append_encoded
from hivemind_memory.projections.store.logfile import LOG_NAME, check, scan
from hivemind_memory.projections.store.readmodel import read_notes
from hivemind_memory.projections.store.types import Store
from tests.support.crashlog import SEED, notes_by_event, rounds, stream_keys

ROUNDS = rounds(200, 2000)
SDK_ROUNDS = rounds(6, 60)
NSS = ("a", "b", "c")
_LUA = ("redis.call('XADD', KEYS[2], '*', 'pos', ARGV[2]) "
        "return redis.call('XADD', KEYS[1], '*', 'd', ARGV[1])")


class Writes:
    """Tags of the source records written so far; ``acked`` once the call returned."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.acked: list[bytes] = []
        self.sent: set[bytes] = set()

    def sending(self, tags: list[bytes]) -> None:
        with self.cond:
            self.sent.update(tags)

    def ack(self, tags: list[bytes]) -> None:
        with self.cond:
            self.acked += tags
            self.cond.notify_all()


def _writer(r: Store, rng: random.Random, name: str, n: int, w: Writes) -> None:
    """``n`` client writes of random shapes; each source record carries a unique tag."""
    for i in range(n):
        tag = f"{name}.{i}".encode()
        ns = rng.choice(NSS)
        shape = rng.randrange(5)
        if shape == 0:  # one XADD
            tags = [tag]
            w.sending(tags)
            r.xadd(keys.stream(ns), {b"d": tag})
        elif shape == 1:  # a pipeline of appends to several namespaces (log.append's path)
            tags = [tag + b".%d" % j for j in range(rng.randint(2, 8))]
            w.sending(tags)
            append_encoded(r, [(rng.choice(NSS), t) for t in tags])
        elif shape == 2:  # MULTI/EXEC: audit + config history + a result key + a dead letter
            tags = [tag + b".audit", tag + b".cfg"]
            w.sending(tags)
            p = r.pipeline(transaction=True)
            p.xadd(keys.audit(ns), {b"d": tags[0]})
            p.xadd(keys.configs(ns), {b"digest": tags[1], b"value": b"{}"})
            p.set(keys.result(ns, tag.decode()), b"{}", ex=60)
            p.xadd(keys.dead(ns), {b"entry": b"1-0", b"reason": tag})
            p.execute()
        elif shape == 3:  # a Lua script: a source and a derived XADD (commit_batch's kind)
            tags = [tag]
            w.sending(tags)
            r.eval(_LUA, 2, keys.stream(ns), keys.changes(ns), tag, b"1-0")
        else:  # RQ's result stream (derived) and an embedding filed for a query
            tags = [tag]
            w.sending(tags)
            r.xadd(f"rq:results:{name}.{i}", {b"data": b"x" * rng.randint(10, 400)}, maxlen=10)
            r.xadd(keys.query_embeddings(ns), {b"digest": tag, b"value": b"[0.5]"})
        w.ack(tags)


def _tags(r: Store) -> Counter[bytes]:
    """Every tag in the store's source streams (and none may be in a derived one)."""
    out: Counter[bytes] = Counter()
    for key in stream_keys(r):
        assert keys.is_source_stream(key), f"derived stream {key!r} came back from the log"
        for _, fields in r.xrange(key):
            out[fields.get(b"d") or fields[b"digest"]] += 1
    return out


def _check_store(url: str, must: list[bytes], may: set[bytes], where: str) -> None:
    r = connect(url)  # opens: a refused replay raises here
    try:
        found = _tags(r)
        lost = set(must) - set(found)
        twice = [t for t, n in found.items() if n > 1]
        stray = set(found) - may
        assert not lost and not twice and not stray, (
            f"{where}: lost {sorted(lost)[:3]}, twice {twice[:3]}, never sent {sorted(stray)[:3]}")
    finally:
        close_embedded(url)


def _copy_at(src: Path, dst: Path, w: Writes, after: int, done: threading.Event,
             cut: float) -> list[bytes]:
    """Once ``after`` records are acknowledged (or the writers are done), copy the log as a
    SIGKILL could leave it: every byte fsynced by then, and of what came later a prefix
    (``cut``: how much of it, so a record may be torn in half). Returns the records
    acknowledged before."""
    with w.cond:
        w.cond.wait_for(lambda: len(w.acked) >= after or done.is_set(), timeout=30)
        before = list(w.acked)
        durable = (src / LOG_NAME).stat().st_size  # acknowledged means fsynced: all in here
    data = (src / LOG_NAME).read_bytes()
    dst.mkdir()
    (dst / LOG_NAME).write_bytes(data[:durable + int((len(data) - durable) * cut)])
    return before


def _round(tmp_path: Path, rnd: int) -> tuple[int, int]:
    """One round: writers, a crash copy, a restart; returns the log's size and the torn
    tail the crash copy had."""
    rng = random.Random(SEED * 1_000_003 + rnd)
    where = f"round {rnd} (HIVEMIND_LOG_SEED={SEED})"
    store, crash = tmp_path / f"r{rnd}", tmp_path / f"r{rnd}-crash"
    url = f"memory://{store}"
    r = connect(url)
    w = Writes()
    done = threading.Event()
    threads = [threading.Thread(target=_writer, args=(r, random.Random(rng.random()),
                                                      f"t{t}", rng.randint(2, 10), w))
               for t in range(rng.randint(2, 6))]
    for t in threads:
        t.start()
    snap: list[list[bytes]] = []
    after, cut = rng.randint(0, 40), rng.random()
    copier = threading.Thread(target=lambda: snap.append(
        _copy_at(store, crash, w, after, done, cut)))
    copier.start()
    for t in threads:
        t.join(60)
    done.set()
    with w.cond:
        w.cond.notify_all()
    copier.join(60)
    close_embedded(url)
    data = (store / LOG_NAME).read_bytes()
    found = check(scan(data))
    assert not found.problems and found.derived_records == 0, f"{where}: {found.problems}"

    torn = check(scan((crash / LOG_NAME).read_bytes())).torn_tail_bytes
    _check_store(url, w.acked, w.sent, where + ", restart")
    _check_store(f"memory://{crash}", snap[0], w.sent, where + ", crash copy")
    shutil.rmtree(store)
    shutil.rmtree(crash)
    return len(data), torn


@pytest.mark.slow
def test_concurrent_writers_then_a_crash_or_a_restart_keep_every_acknowledged_record_once(
        tmp_path: Path) -> None:
    started = time.perf_counter()
    got = [_round(tmp_path, rnd) for rnd in range(ROUNDS)]
    per_round = (time.perf_counter() - started) / ROUNDS
    sizes = [size for size, _ in got]
    print(f"\n{ROUNDS} rounds, {per_round * 1000:.1f} ms a round, logs of "
          f"{min(sizes)}..{max(sizes)} bytes, {sum(1 for _, t in got if t)} crash copies "
          "with a torn tail")


class _SdkWrites:
    """What the SDK writers were told succeeded: events by (ns, type, note_id)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: Counter[tuple[str, str, str]] = Counter()

    def work(self, mem: Memory, seed: float, name: str) -> None:
        wr = random.Random(seed)
        for i in range(wr.randint(3, 8)):
            nid = mem.remember(f"note {name} {i} about deploys", note_id=f"{name}-{i}")
            with self.lock:
                self.acked[mem.ns, "NoteCreated", nid] += 1
            if wr.random() < 0.3:
                mem.used(nid)
                with self.lock:
                    self.acked[mem.ns, "NoteUsed", nid] += 1
            if wr.random() < 0.15:
                mem.recall("deploys", budget=50)  # audit + config history + RQ's result


@pytest.mark.slow
def test_sdk_writers_in_threads_restart_with_every_acknowledged_event_once(
        tmp_path: Path) -> None:
    """N threads x M writers through ``Memory("memory://DIR")`` (its in-process worker
    projecting meanwhile), a restart, then the notes rebuilt from the replayed log."""
    for rnd in range(SDK_ROUNDS):
        rng = random.Random(SEED * 7 + rnd)
        where = f"sdk round {rnd} (HIVEMIND_LOG_SEED={SEED})"
        url = f"memory://{tmp_path / f's{rnd}'}"
        writers = [Memory(url, ns=rng.choice(NSS[:2]), agent=f"agent{m}")
                   for m in range(rng.randint(2, 3))]
        w = _SdkWrites()
        threads = [threading.Thread(target=w.work, args=(m, rng.random(), f"w{j}t{t}"))
                   for j, m in enumerate(writers) for t in range(rng.randint(2, 3))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        for m in writers:
            m.close()
        close_embedded(url)

        r = connect(url)
        try:
            found = notes_by_event(r)  # each event written once: nothing lost, nothing twice
            assert found == w.acked, f"{where}: {(found - w.acked)=} {(w.acked - found)=}"
        finally:
            close_embedded(url)
        with Memory(url, ns=NSS[0], agent="reader") as again:  # the restart, as a user has it
            for ns in sorted({ns for ns, _, _ in w.acked}):
                again.batch([{"ns": ns, "text": "deploys", "budget": 10}])  # catches ns up
                got = read_notes(connect(url), ns)
                want = {nid for (n, _, nid) in w.acked if n == ns}
                assert set(got) == want, where
                assert all(got[nid].uses == w.acked[ns, "NoteUsed", nid] for nid in want), where
        close_embedded(url)


@pytest.mark.parametrize("made", ["fake_server", "memory://"])
def test_first_connections_opened_at_once_share_one_database(made: str) -> None:
    """fakeredis makes a database when a first connection to it opens, outside its lock: two
    threads connecting first at once each made one, and the writes of the one replaced were
    lost (under load, two checked writers of one note id both "won"). The embedded store's
    server, and the tests' (``fake_server``), have it made before anyone connects. Forced
    here: both threads are held inside fakeredis's database factory together (on a plain
    ``FakeServer`` one of the two keys is lost: the control)."""
    import contextlib

    import fakeredis

    from hivemind_memory.projections.store.embedded import Embedded, fake_server

    def lost_keys(server: fakeredis.FakeServer) -> list[str]:
        meet = threading.Barrier(2, timeout=1.0)
        make = server.dbs.default_factory
        assert make is not None

        def together() -> object:
            with contextlib.suppress(threading.BrokenBarrierError):
                meet.wait()  # both first connections inside the factory at once
            return make()

        server.dbs.default_factory = together
        clients = [fakeredis.FakeRedis(server=server) for _ in range(2)]
        threads = [threading.Thread(target=c.set, args=(f"k{i}", i))
                   for i, c in enumerate(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        reader = fakeredis.FakeRedis(server=server)
        return [k for k in ("k0", "k1") if reader.get(k) is None]

    assert lost_keys(fakeredis.FakeServer()) != []  # the race, as fakeredis has it
    store = Embedded("memory://") if made == "memory://" else None
    assert lost_keys(store.server if store is not None else fake_server()) == []
