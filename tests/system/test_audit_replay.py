"""Audit replay at scale, on real Redis: a generated log of thousands of events (varied ages,
lengths, uses, agents, scopes, kinds, embeddings, duplicates, dead letters) with back-dated
notes ingested between rounds of queries, served by a worker whose config file changes between
rounds. Every live and as-of query is reproduced identically by ``audit reproduce --all``; also
after ``replay``, and after ``export --with-audit`` + ``import`` into a fresh redis-server.

``HIVEMIND_AUDIT_ROUNDS`` (default 8) scales it up for a longer run.
"""

from __future__ import annotations

import os
import random
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.events.positions import parse_pos
from hivemind_memory.projections.ranking.config import DEFAULT
from hivemind_memory.projections.store import keys
from hivemind_memory.worker import runtime
from hivemind_memory.worker.audit.reproduce import Auditor, all_served
from hivemind_memory.worker.engine import run_rank
from hivemind_memory.worker.loop import run_worker
from tests.support import HIVEMIND, RedisProc
from tests.support.factories import iso

pytestmark = pytest.mark.redis_server

NS = "hist"
ROUNDS = int(os.environ.get("HIVEMIND_AUDIT_ROUNDS", "8"))
AGENTS = ["", "alice", "bob", "carol", "dave"]
VOCAB = [f"w{i}" for i in range(120)] + ["redis", "aof", "stream", "deploy", "worker"]
T_BASE = datetime(2026, 6, 1, tzinfo=UTC)
CONFIGS = [None, "longterm_uses = 3\n[short]\nhalf_life_days = 60\nfloor = 0.2\n",
           'order = "chronological"\nper_note_overhead_tokens = 5\n']


def _words(rng: random.Random, n: int) -> str:
    # a skewed vocabulary: low words are common, so queries match many notes
    return " ".join(VOCAB[min(int(rng.expovariate(1 / 25)), len(VOCAB) - 1)] for _ in range(n))


class Gen:
    """Rounds of events; each round's notes are dated before the queries already served."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.notes: list[str] = []
        self.n = 0

    def eid(self, kind: str) -> str:
        self.n += 1
        return f"{kind}-{self.n}"

    def round(self, r: int) -> list[dict[str, Any]]:
        rng, out = self.rng, []
        for i in range(140):
            nid = f"n{r}-{i}"
            back = r > 0 and i < 25  # back-dated: far older than anything queried so far
            age = rng.uniform(200, 800) if back else rng.uniform(0, 300)
            ev: dict[str, Any] = {
                "type": "note.created", "event_id": self.eid("c"), "ns": NS, "note_id": nid,
                "agent": rng.choice(AGENTS[1:]), "at": iso(T_BASE - timedelta(days=age)),
                "text": _words(rng, rng.choice([2, 5, 12, 40, 150]))}
            if rng.random() < 0.1:
                ev["scope"] = "private"
            if rng.random() < 0.15:
                ev["kind"] = "scratch"
            if rng.random() < 0.2:
                ev["embedding"] = [rng.uniform(-1, 1) for _ in range(8)]
            if rng.random() < 0.2:
                ev["tokens"] = rng.randint(1, 900)
            out.append(ev)
            self.notes.append(nid)
        hot = rng.sample(self.notes, min(25, len(self.notes)))
        for _ in range(260):
            nid = rng.choice(hot) if rng.random() < 0.5 else rng.choice(self.notes)
            out.append({"type": "note.used", "event_id": self.eid("u"), "ns": NS,
                        "note_id": nid, "agent": rng.choice(AGENTS[1:]),
                        "at": iso(T_BASE - timedelta(days=rng.uniform(0, 200)))})
        for nid in rng.sample(self.notes, 8):
            out.append({"type": "note.forgotten", "event_id": self.eid("f"), "ns": NS,
                        "note_id": nid, "agent": "alice", "at": iso(T_BASE)})
        out += [dict(e) for e in rng.sample(out, 8)]  # redeliveries: applied once
        out += [{"type": "note.used", "event_id": self.eid("g"), "ns": NS, "note_id": "ghost",
                 "agent": "bob", "at": iso(T_BASE)} for _ in range(3)]  # dead letters
        rng.shuffle(out)
        return out

    def queries(self) -> list[dict[str, Any]]:
        rng, out = self.rng, []
        for i in range(12):
            q: dict[str, Any] = {"ns": NS, "text": _words(rng, rng.randint(1, 4)),
                                 "budget": rng.choice([15, 60, 300, 2000]),
                                 "agent": rng.choice(AGENTS)}
            if i % 3 == 0:
                q["as_of"] = iso(T_BASE - timedelta(days=rng.uniform(0, 400)))
            if i % 4 == 1:
                q["explain"] = True
            if i % 6 == 2:
                q["embedding"] = [rng.uniform(-1, 1) for _ in range(8)]
            if i % 5 == 3:
                q["config"] = rng.choice([{"short": {"floor": 0.05}}, {"order": "score"},
                                          {"min_relevance": 0.2}])
            out.append(q)
        return out


def _cli(url: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HIVEMIND_REDIS_URL": url}
    return subprocess.run([*HIVEMIND, *args], capture_output=True, text=True, env=env,
                          timeout=timeout, check=False)


def test_every_served_query_reproduces_after_config_change_replay_and_export_import(
        redis_server: RedisProc, redis_factory: Callable[..., RedisProc],
        tmp_path: Path) -> None:
    r = redis_server.client()
    r.flushall()
    gen = Gen(seed=10)
    client = Client(r, settings=Settings(redis_url=redis_server.url))
    rt: runtime.Runtime | None = None
    cfg_for_round: str | None = "unset"
    ids: list[str] = []
    for rnd in range(ROUNDS):
        text = CONFIGS[min(rnd * len(CONFIGS) // ROUNDS, len(CONFIGS) - 1)]
        if text != cfg_for_round:  # the config file changed: the worker restarts with it
            path = None
            if text is not None:
                path = str(tmp_path / f"cfg{rnd}.toml")
                Path(path).write_text(text)
            rt = runtime.build(Settings(redis_url=redis_server.url, config_path=path), r)
            runtime.install(rt)
            cfg_for_round = text
        assert rt is not None
        client.append(gen.round(rnd))
        batch = client.submit_batch(gen.queries())
        assert run_worker(rt, burst=True) == 0
        for qid in batch:
            assert "error" not in client.result(qid, timeout=30), qid
        ids += batch
    events = int(r.xlen(keys.stream(NS)))
    served = all_served(r, NS)
    assert events >= 3000 and len(served) == len(ids) == 12 * ROUNDS
    live = [x for x in served if x.live]
    assert live and len(live) < len(served)
    assert len({x.event.config_digest for x in served}) >= 4  # 3 configs + overrides
    assert any(x.event.embedding_digest for x in served)

    # in process: every answer identical
    a = Auditor(r, NS, DEFAULT)
    reps = list(a.reproduce(served))
    assert [rep.differences for rep in reps if not rep.identical] == []
    # the data exercise the hazard: an --as-of fold of the whole log at a live query's time
    # lets in back-dated notes ingested after it, and changes some live answers
    tail = parse_pos(r.xrevrange(keys.stream(NS), count=1)[0][0])
    changed = 0
    for x in live[:24]:
        req, cfg, _ = a.inputs(x.event)
        idx, _ = a.states.as_of(tail, x.event.as_of)
        naive = [n.note_id for n in run_rank(idx, req, cfg, x.event.as_of).notes]
        changed += naive != [nid for nid, _ in x.event.chosen]
    assert changed > 0

    # the CLI, after a worker restart and a replay write-back
    out = _cli(redis_server.url, "replay", "--ns", NS)
    assert out.returncode == 0, out.stderr
    out = _cli(redis_server.url, "audit", "reproduce", "--ns", NS, "--all")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert f"{len(ids)} identical, 0 different" in out.stderr

    # archive -> a fresh redis-server -> the same answers
    arch = tmp_path / "hist.jsonl"
    out = _cli(redis_server.url, "export", "--ns", NS, "--with-audit", "-o", str(arch))
    assert out.returncode == 0, out.stderr
    fresh = redis_factory(appendonly=False)
    out = _cli(fresh.url, "import", str(arch))
    assert out.returncode == 0, out.stderr
    out = _cli(fresh.url, "audit", "reproduce", "--ns", NS, "--all")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert f"{len(ids)} identical, 0 different" in out.stderr
    r.flushall()
    r.close()

