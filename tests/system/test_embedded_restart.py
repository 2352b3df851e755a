"""``memory://PATH`` in real processes killed at random points: SDK writers in threads
(``tests.support.sdk_writer``) and concurrent HTTP writers against ``hivemind serve``, each
process stopped by SIGTERM or SIGKILL after a random number of acknowledged writes, then the
store restarted: it opens, every acknowledged event is in the log exactly once (an
in-flight one at most once) and the rebuilt notes hold them. Also: ``serve`` on a log the
writer before this version broke names the file and ``fsck``; ``fsck --repair`` fixes it.

Rounds: 4 SDK + 2 HTTP by default (each signal on each path); ``HIVEMIND_SOAK=1`` for 40 + 20
(``HIVEMIND_KILL_ROUNDS=N`` sets both). The cheap many-round check of the same property is
``tests/unit/projections/store/test_embedded_concurrency.py``."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from hivemind_memory import Memory
from hivemind_memory.events.codec import encode_event
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.connection import close_embedded, connect
from hivemind_memory.projections.store.log import FIELD
from hivemind_memory.projections.store.logfile import LOG_NAME, check, scan
from hivemind_memory.projections.store.readmodel import read_notes
from tests.support import HIVEMIND
from tests.support.crashlog import SEED, events_by_id, exactly_once, notes_by_event, rounds
from tests.support.factories import created, ev
from tests.support.frontdoor import call, start_serve
from tests.support.legacy_log import race

SDK_ROUNDS = rounds(4, 40, "HIVEMIND_KILL_ROUNDS")
HTTP_ROUNDS = rounds(2, 20, "HIVEMIND_KILL_ROUNDS")
SIGNALS = (signal.SIGTERM, signal.SIGKILL)
REPO = Path(__file__).resolve().parents[2]
OPS = "ops-secret-00000000000"


class Lines:
    """A child's stdout, read line by line in a thread (a torn last line is dropped)."""

    def __init__(self, stream: IO[str]) -> None:
        self.cond = threading.Condition()
        self.lines: list[str] = []
        self.eof = False
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            with self.cond:
                if line.endswith("\n"):
                    self.lines.append(line.rstrip("\n"))
                self.cond.notify_all()
        with self.cond:
            self.eof = True
            self.cond.notify_all()

    def wait_for(self, pred: Callable[[list[str]], bool], timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: self.eof or pred(self.lines), timeout)

    def join(self) -> list[str]:
        self._thread.join(30)
        return list(self.lines)


def _opens_with_at_most_a_torn_tail(d: Path, where: str, acked: int, sent: int) -> None:
    found = check(scan((d / LOG_NAME).read_bytes()))
    assert found.openable and all(p.startswith("torn tail") for p in found.problems), (
        where, found.problems)
    print(f"{where}: {acked} acknowledged, {sent - acked} in flight, log {found.size} bytes, "
          f"torn tail {found.torn_tail_bytes} bytes")


def _sdk_round(tmp_path: Path, rnd: int) -> None:
    rng = random.Random(SEED * 31 + rnd)
    sig = SIGNALS[rnd % 2]
    where = f"sdk round {rnd} ({sig.name}, HIVEMIND_LOG_SEED={SEED})"
    d = tmp_path / f"sdk{rnd}"
    url = f"memory://{d}"
    threads, writers, notes = rng.randint(2, 4), rng.randint(1, 3), rng.randint(4, 12)
    kill_after = rng.randint(1, threads * writers * notes)
    with (tmp_path / f"sdk{rnd}.err").open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.sdk_writer", url, str(SEED + rnd),
             str(threads), str(writers), str(notes)],
            cwd=REPO, stdout=subprocess.PIPE, stderr=err, text=True,
            env={k: v for k, v in os.environ.items() if not k.startswith("HIVEMIND_")})
    assert proc.stdout is not None
    out = Lines(proc.stdout)
    out.wait_for(lambda ls: sum(x.startswith("ack ") for x in ls) >= kill_after, 120)
    alive = proc.poll() is None
    proc.send_signal(sig)
    proc.wait(30)
    lines = out.join()
    proc.stdout.close()
    assert alive or "done" in lines, (where, (tmp_path / f"sdk{rnd}.err").read_text()[-2000:])
    acked = {tuple(x.split()[1:]) for x in lines if x.startswith("ack ")}
    sent = {tuple(x.split()[1:]) for x in lines if x.startswith("sent ")}

    _opens_with_at_most_a_torn_tail(d, where, len(acked), len(sent))
    r = connect(url)
    try:
        made = notes_by_event(r)
        twice = [k for k, n in made.items() if n > 1]
        got = {(ns, nid) for ns, _, nid in made}
        assert not twice and acked <= got <= sent, (where, twice, acked - got, got - sent)
    finally:
        close_embedded(url)
    with Memory(url, ns="n0", agent="reader") as again:  # what a user's restart rebuilds
        for ns in sorted({ns for ns, _ in got}):
            again.batch([{"ns": ns, "text": "deploys", "budget": 10}])  # catches ns up
            notes_now = set(read_notes(connect(url), ns))
            assert notes_now == {nid for n, nid in got if n == ns}, where
    close_embedded(url)


def test_sdk_writers_killed_at_random_points_lose_and_repeat_nothing(tmp_path: Path) -> None:
    for rnd in range(SDK_ROUNDS):
        _sdk_round(tmp_path, rnd)


def _tokens(path: Path, agents: list[str]) -> None:
    rows = [f'[[token]]\nsecret = "{a}-secret-0000000000000"\nns = ["*"]\nagent = "{a}"\n'
            'rights = ["write", "query"]\n' for a in agents]
    rows.append(f'[[token]]\nsecret = "{OPS}"\nns = ["*"]\nagent = "ops"\n'
                'rights = ["write", "query", "admin"]\n')
    path.write_text("\n".join(rows))


class HttpWrites:
    """Event ids sent, and acknowledged (200), by the HTTP writer threads."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.sent: set[str] = set()
        self.acked: dict[str, tuple[str, str]] = {}  # event_id -> (ns, note_id)
        self.refused: list[Any] = []

    def writer(self, base: str, agent: str, name: str, n: int, seed: int) -> None:
        rng = random.Random(seed)
        token = f"{agent}-secret-0000000000000"
        for i in range(n):
            ns = rng.choice(["h0", "h1"])
            batch = [created(f"{name}-{i}-{j}@@{agent}", ns=ns, agent=agent, eid=f"{name}-{i}-{j}",
                             text=f"note {name} {i} {j} about deploys")
                     for j in range(rng.randint(1, 4))]
            with self.cond:
                self.sent.update(e["event_id"] for e in batch)
            try:
                status, body = call(base, "POST", f"/v1/ns/{ns}/events", batch, token=token)
            except Exception:  # the server went away mid-request: not acknowledged
                return
            with self.cond:
                if status == 200:
                    self.acked.update({e["event_id"]: (ns, e["note_id"]) for e in batch})
                else:
                    self.refused.append((status, body))
                self.cond.notify_all()


def _http_round(tmp_path: Path, rnd: int) -> None:
    rng = random.Random(SEED * 53 + rnd)
    sig = SIGNALS[rnd % 2]
    where = f"http round {rnd} ({sig.name}, HIVEMIND_LOG_SEED={SEED})"
    agents = [f"agent{m}" for m in range(rng.randint(2, 3))]
    _tokens(tmp_path / "tokens.toml", agents)
    d = tmp_path / f"http{rnd}"
    args = ["--redis-url", f"memory://{d.name}", "--tokens", "tokens.toml"]
    srv = start_serve(args, tmp_path)
    w = HttpWrites()
    per = rng.randint(5, 15)
    threads = [threading.Thread(target=w.writer,
                                args=(srv.base, a, f"{a}t{t}", per, SEED + rnd * 100 + t))
               for a in agents for t in range(rng.randint(2, 4))]
    kill_after = rng.randint(1, len(threads) * per)  # acknowledged batches, roughly
    for t in threads:
        t.start()
    with w.cond:
        w.cond.wait_for(lambda: len(w.acked) >= kill_after, 120)
    srv.proc.send_signal(sig)
    srv.proc.wait(30)
    for t in threads:
        t.join(120)
    assert not w.refused, (where, w.refused[:3])

    _opens_with_at_most_a_torn_tail(d, where, len(w.acked), len(w.sent))
    srv = start_serve(args, tmp_path)  # the restart opens (healthz answers)
    try:
        for ns in ("h0", "h1"):
            status, rows = call(srv.base, "GET", f"/v1/ns/{ns}/notes", token=OPS)
            assert status == 200, (where, rows)
            have = {row["note_id"] for row in rows}
            want = {nid for n, nid in w.acked.values() if n == ns}
            assert want <= have, (where, sorted(want - have)[:5])
            # each note is one a writer sent (its id: the event id and the writer's suffix)
            assert {h.rsplit("@@", 1)[0] for h in have} <= w.sent, where
    finally:
        srv.stop()
    r = connect(f"memory://{d}")
    try:
        exactly_once(events_by_id(r), w.acked, may=w.sent, where=where)
    finally:
        close_embedded(f"memory://{d}")


def test_http_writers_and_a_killed_serve_lose_and_repeat_nothing(tmp_path: Path) -> None:
    for rnd in range(HTTP_ROUNDS):
        _http_round(tmp_path, rnd)


def test_serve_on_a_log_the_old_writer_broke_names_fsck_which_repairs_it(
        tmp_path: Path) -> None:
    d = tmp_path / "data"
    stream = keys.stream("t").encode()
    pairs = [((stream, [FIELD, encode_event(ev(created(f"a{n}", ns="t")))]),
              (stream, [FIELD, encode_event(ev(created(f"b{n}", ns="t")))])) for n in range(6)]
    race(d, pairs)
    _tokens(tmp_path / "tokens.toml", [])
    args = ["--redis-url", "memory://data", "--tokens", "tokens.toml", "--port", "0"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIVEMIND_")}
    got = subprocess.run([*HIVEMIND, "serve", *args], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60, check=False, env=env)
    assert got.returncode == 2
    assert f"{d / LOG_NAME}" in got.stderr or "data/streams.log" in got.stderr, got.stderr
    assert "hivemind fsck --store memory://data" in got.stderr, got.stderr
    assert "XADD" not in got.stderr  # not the bare Redis error of before

    fsck = subprocess.run([*HIVEMIND, "fsck", "--store", "memory://data", "--repair"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          check=False, env=env)
    assert fsck.returncode == 0 and "repaired: wrote 12 record(s)" in fsck.stdout, fsck
    srv = start_serve(args[:-2], tmp_path)
    try:
        status, rows = call(srv.base, "GET", "/v1/ns/t/notes", token=OPS)
        assert status == 200
        assert {row["note_id"] for row in rows} == {f"{x}{n}" for x in "ab" for n in range(6)}
    finally:
        srv.stop()
