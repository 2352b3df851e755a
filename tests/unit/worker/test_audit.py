"""Audit replay on the embedded store, through the CLI in process: listing, exact reproduction,
the causes of differences (tampered config history, rewritten log, note forgotten since),
show, sweep, export/import and ``notes --json`` text."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.messages import QueryServed, encode
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.events.positions import parse_pos
from hivemind_memory.projections.ranking.config import DEFAULT, RankingConfig
from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.connection import connect
from hivemind_memory.worker import runtime
from hivemind_memory.worker.audit.reproduce import Auditor, all_served
from hivemind_memory.worker.cli.main import main
from hivemind_memory.worker.engine import run_rank
from hivemind_memory.worker.loop import run_worker
from hivemind_memory.worker.ops import logs
from tests.support.factories import T0, created, forgotten, iso, used


@pytest.fixture(autouse=True)
def _no_log_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """``main`` configures structlog onto this test's captured stderr: keep it out."""
    monkeypatch.setattr(logs, "configure", lambda **_: None)


class World:
    """A namespace on a private embedded store, served by an in-process burst worker."""

    def __init__(self, where: Path, cfg_path: str | None = None) -> None:
        # memory://PATH: a store of its own (plain memory:// is one per process)
        self.url = f"memory://{where / ('store-' + uuid.uuid4().hex[:8])}"
        self.r = connect(self.url)
        self.settings = Settings(redis_url=self.url, config_path=cfg_path)
        self.client = Client(self.r, settings=self.settings)

    def serve(self, reqs: list[dict[str, Any]], cfg_path: str | None = None) -> list[str]:
        ids = self.client.submit_batch(reqs)
        s = Settings(redis_url=self.url, config_path=cfg_path)
        rt = runtime.build(s, self.r)
        runtime.install(rt)
        assert run_worker(rt, burst=True) == 0
        for qid in ids:
            assert "error" not in self.client.result(qid, timeout=5)
        return ids

    def cli(self, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
        code = main([*args, "--redis-url", self.url])
        out = capsys.readouterr()
        return code, out.out, out.err


def _history(w: World) -> list[str]:
    w.client.append([
        created("old", at=T0 - timedelta(days=400), text="redis aof persistence old note"),
        created("new", at=T0 - timedelta(days=2), text="redis aof persistence fresh " * 3),
        created("scr", at=T0 - timedelta(days=1), kind="scratch", text="redis scratch aof"),
        created("priv", agent="alice", scope="private", at=T0, text="redis aof private"),
        *[used("old", f"u{i}", at=T0 - timedelta(days=300 - i)) for i in range(5)],
    ])
    ids = w.serve([
        {"ns": "t", "text": "redis aof", "budget": 40, "agent": "alice"},
        {"ns": "t", "text": "redis aof", "budget": 60, "as_of": iso(T0), "explain": True},
    ])
    # a back-dated note arrives after those queries, then more queries
    w.client.append([created("back", at=T0 - timedelta(days=30), text="redis aof backdated")])
    ids += w.serve([
        {"ns": "t", "text": "redis aof persistence", "budget": 50,
         "config": {"short": {"floor": 0.1}}, "explain": True},
        {"ns": "t", "text": "aof", "budget": 30, "embedding": [0.5, 0.25]},
    ])
    return ids


def _filed(w: World, key: str, digest: str) -> list[tuple[bytes, dict[bytes, bytes]]]:
    return [(e, f) for e, f in w.r.xrange(key) if f[b"digest"] == digest.encode()]


def test_every_served_query_reproduces_and_lists(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    w = World(tmp_path)
    ids = _history(w)
    code, out, err = w.cli(capsys, "audit", "reproduce", "--ns", "t", "--all")
    assert code == 0, out + err
    assert out.count("identical") == 4 and "4 identical, 0 different" in err
    code, out, _ = w.cli(capsys, "audit", "reproduce", "--ns", "t", ids[1], "--json")
    assert code == 0 and json.loads(out)["identical"] is True
    # newest first, with what each was shown; filters and pages
    code, out, _ = w.cli(capsys, "audit", "list", "--ns", "t")
    assert code == 0
    assert [ln.split()[1] for ln in out.splitlines() if ln.startswith("20")] == ids[::-1]
    code, out, _ = w.cli(capsys, "audit", "list", "--ns", "t", "--agent", "alice", "--json")
    [row] = [json.loads(ln) for ln in out.splitlines()]
    assert row["query_id"] == ids[0] and row["live"] is True
    assert "priv" in [c[0] for c in row["chosen"]]
    code, out, _ = w.cli(capsys, "audit", "list", "--ns", "t", "--limit", "3")
    nxt = out.strip().splitlines()[-1].split("--before ")[1]
    code, out, _ = w.cli(capsys, "audit", "list", "--ns", "t", "--before", nxt)
    assert [ln.split()[1] for ln in out.splitlines() if ln.startswith("20")] == [ids[0]]
    served = all_served(w.r, "t")
    code, out, _ = w.cli(capsys, "audit", "list", "--ns", "t", "--since",
                         iso(served[2].served_at))
    assert [ln.split()[1] for ln in out.splitlines() if ln.startswith("20")] == ids[:1:-1]


def test_live_query_does_not_see_a_back_dated_note_ingested_later(tmp_path: Path) -> None:
    """The reason reproduction folds up to a position: an ``--as-of`` fold of today's log at
    the served time lets the back-dated note in, and would not reproduce the answer."""
    w = World(tmp_path)
    _history(w)
    first = all_served(w.r, "t")[0]
    assert first.live and "back" not in [n for n, _ in first.event.chosen]
    a = Auditor(w.r, "t", DEFAULT)
    rep = a.reproduce_one(first)
    assert rep.identical and rep.result is not None
    req, cfg, causes = a.inputs(first.event)
    assert causes == []
    tail = a.states.pos  # fold the whole log
    a.states.live(max(tail, *(parse_pos(e) for e, _ in w.r.xrange(keys.stream("t")))))
    idx, _ = a.states.as_of(a.states.pos, first.event.as_of)
    naive = run_rank(idx, msgspec.structs.replace(req, explain=True), cfg, first.event.as_of)
    assert "back" in [c.note_id for c in naive.candidates]  # let in (an older version now)


def test_tampered_config_history_is_a_readable_difference(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    w = World(tmp_path)
    _history(w)
    digest = all_served(w.r, "t")[2].event.config_digest
    [(eid, fields)] = _filed(w, keys.configs("t"), digest)
    raw = json.loads(fields[b"value"])
    raw["short"]["floor"] = 0.9  # rewrite the entry in place: delete it, file the altered one
    w.r.xdel(keys.configs("t"), eid)
    w.r.xadd(keys.configs("t"), {"digest": digest, "value": json.dumps(raw)})
    code, out, err = w.cli(capsys, "audit", "reproduce", "--ns", "t", "--all")
    assert code == 1
    assert f"config history entry {digest} was altered" in out
    assert "DIFFERENT" in out and "not from intact inputs" in out and "1 different" in err
    # a missing config: re-run under the current one (here another), said so
    w.r.xdel(keys.configs("t"), *(e for e, _ in _filed(w, keys.configs("t"), digest)))
    cfg = tmp_path / "now.toml"
    cfg.write_text("[short]\nhalf_life_days = 5\n")
    code, out, _ = w.cli(capsys, "audit", "reproduce", "--ns", "t", "--all",
                         "--config", str(cfg))
    assert code == 1 and f"config {digest} is missing from the config history" in out
    assert "config changed" in out and "score of" in out


def test_a_missing_query_embedding_is_a_cause(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    w = World(tmp_path)
    _history(w)
    [emb] = [x.event.embedding_digest for x in all_served(w.r, "t") if x.event.embedding_digest]
    [(eid, _)] = _filed(w, keys.query_embeddings("t"), emb)
    w.r.xdel(keys.query_embeddings("t"), eid)
    w.r.xadd(keys.query_embeddings("t"), {"digest": emb, "value": "[0.5,0.26]"})
    code, out, _ = w.cli(capsys, "audit", "reproduce", "--ns", "t", "--all")
    assert code == 1 and f"query embedding {emb} is missing or altered" in out


def test_rewritten_log_and_forgotten_since_are_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    w = World(tmp_path)
    _history(w)
    entries = w.r.xrange(keys.stream("t"))
    [(eid, _)] = [(e, f) for e, f in entries if b"c-new" in f[b"d"]]
    w.r.xdel(keys.stream("t"), eid)
    w.client.append([forgotten("new", "f-new", at=T0)])
    rt = runtime.build(w.settings, w.r)
    runtime.install(rt)
    assert run_worker(rt, burst=True) == 0
    code, out, _ = w.cli(capsys, "audit", "reproduce", "--ns", "t", "--all")
    assert code == 1
    assert "notes out: new" in out
    assert "note new is not in the log up to" in out and "(log rewritten)" in out
    assert "note new forgotten since" in out
    # the live projection still has 'new' (forgotten), the log has no created event for it:
    # replay --verify says so, naming the note
    code, out, err = w.cli(capsys, "replay", "--ns", "t", "--verify")
    assert code == 1 and "new: only live" in err


def test_tampered_projection_key_fails_replay_verify(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from hivemind_memory.projections.state import pack_note, unpack_note

    w = World(tmp_path)
    _history(w)
    n = unpack_note(w.r.hget(keys.notes("t"), "old"))  # type: ignore[arg-type]
    w.r.hset(keys.notes("t"), "old", pack_note(msgspec.structs.replace(n, uses=1)))
    code, _, err = w.cli(capsys, "replay", "--ns", "t", "--verify")
    assert code == 1 and "old: uses live=1 rebuilt=5" in err


def test_config_change_between_queries_still_reproduces(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    w = World(tmp_path)
    w.client.append([created("a", at=T0 - timedelta(days=200), text="redis stream a"),
                     created("b", at=T0 - timedelta(days=5), text="redis stream b " * 4)])
    cfg = tmp_path / "c.toml"
    cfg.write_text("[short]\nhalf_life_days = 10\nfloor = 0.0\n")
    w.serve([{"ns": "t", "text": "redis stream", "budget": 12}], cfg_path=str(cfg))
    w.serve([{"ns": "t", "text": "redis stream", "budget": 12}], cfg_path=None)
    a, b = (x.event for x in all_served(w.r, "t"))
    assert a.config_digest != b.config_digest and a.chosen != b.chosen  # the config mattered
    code, out, _ = w.cli(capsys, "audit", "reproduce", "--ns", "t", "--all")
    assert code == 0 and out.count("identical") == 2


def test_legacy_audit_events_are_skipped_by_all_and_fail_by_id(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    w = World(tmp_path)
    _history(w)
    old = QueryServed(query_id="t.legacy", agent="", text="x", as_of=T0, budget=5,
                      position="1-0", config_digest="abc", method="exact", chosen=[])
    w.r.xadd(keys.audit("t"), {b"d": encode(old)})
    code, out, err = w.cli(capsys, "audit", "reproduce", "--ns", "t", "--all")
    assert code == 0 and "1 legacy" in err
    code, out, _ = w.cli(capsys, "audit", "reproduce", "--ns", "t", "t.legacy")
    assert code == 1 and "served before audit replay" in out
    code, _, err = w.cli(capsys, "audit", "reproduce", "--ns", "t", "t.nope")
    assert code == 1 and "not in the audit" in err


def test_show_notes_text_and_sweep(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    w = World(tmp_path)
    ids = _history(w)
    code, out, _ = w.cli(capsys, "show", "--ns", "t", "old")
    assert code == 0 and "redis aof persistence old note" in out
    assert "events (6, log order)" in out and out.count("note.used") == 5
    code, out, _ = w.cli(capsys, "show", "--ns", "t", "old", "--json")
    shown = json.loads(out)
    assert {s["query_id"] for s in shown["served"]} <= set(ids) and shown["served"]
    code, _, err = w.cli(capsys, "show", "--ns", "t", "ghost")
    assert code == 1 and "not in namespace" in err
    code, out, _ = w.cli(capsys, "notes", "--ns", "t", "--json")
    rows = {json.loads(ln)["note_id"]: json.loads(ln) for ln in out.splitlines()}
    assert rows["back"]["text"] == "redis aof backdated"
    # sweep: the serving configs reproduce (0 changed); 5%/day changes answers
    code, out, _ = w.cli(capsys, "sweep", "--ns", "t", "--set", "short.half_life_days=180,13.5134",
                         "--set", "short.floor=0.35,0", "--json")
    assert code == 0
    rows_ = [json.loads(ln) for ln in out.splitlines()]
    assert rows_[0]["config"] == "as served"
    assert len(rows_) == 5 and all(r["queries"] == 4 for r in rows_)
    by = {r["config"]: r for r in rows_}
    assert by["short.half_life_days=13.5134 short.floor=0"]["value"] < rows_[0]["value"]
    assert sum(rows_[0]["served_configs"].values()) == 4 and len(rows_[0]["served_configs"]) == 2
    code, out, _ = w.cli(capsys, "sweep", "--ns", "t", "--set", "short.floor=0.35",
                         "--queries", "1")
    assert code == 0 and "1/1" not in out and "0/1" in out
    assert "served under config " + DEFAULT.digest() + " (1 query)" in out
    code, _, err = w.cli(capsys, "sweep", "--ns", "t", "--set", "short.flor=1")
    assert code == 2 and "flor" in err


def test_export_import_roundtrip_and_ingestable_export(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    w = World(tmp_path)
    _history(w)
    arch = tmp_path / "a.jsonl"
    code, _, err = w.cli(capsys, "export", "--ns", "t", "--with-audit", "-o", str(arch))
    assert code == 0 and "4 served" in err
    # --until: the log appended by then (a prefix), and the queries served by then
    served = all_served(w.r, "t")
    cut = parse_pos(served[1].audit_id).ms
    before_back = [e for e, f in w.r.xrange(keys.stream("t")) if parse_pos(e).ms <= cut]
    part = tmp_path / "part.jsonl"
    until = iso(datetime.fromtimestamp(cut / 1000, UTC))
    code, _, err = w.cli(capsys, "export", "--ns", "t", "--with-audit", "--until", until,
                         "-o", str(part))
    lines = [json.loads(ln) for ln in part.read_text().splitlines()]
    assert code == 0 and "2 served" in err
    assert sum(ln["type"].startswith("note.") for ln in lines) == len(before_back)
    plain = tmp_path / "p.jsonl"
    code, _, _ = w.cli(capsys, "export", "--ns", "t", "-o", str(plain))
    w2 = World(tmp_path)
    code, _, err = w2.cli(capsys, "ingest", str(plain), "--no-schedule")
    assert code == 0 and f"appended {len(plain.read_text().splitlines())}" in err
    w3 = World(tmp_path)
    code, _, err = w3.cli(capsys, "import", str(arch))
    assert code == 0, err
    rt = runtime.build(w3.settings, w3.r)
    runtime.install(rt)
    assert run_worker(rt, burst=True) == 0
    code, _, err = w3.cli(capsys, "audit", "reproduce", "--ns", "t", "--all")
    assert code == 0 and "4 identical, 0 different" in err
    code, _, err = w3.cli(capsys, "import", str(arch))
    assert code == 1 and "empty namespace" in err
    bad = tmp_path / "b.jsonl"
    bad.write_text(arch.read_text() + '{"type":"query.whatever"}\n')
    code, _, err = World(tmp_path).cli(capsys, "import", str(bad))
    assert code == 1 and "unknown line type" in err


def test_config_history_entry_hashes_to_its_key(tmp_path: Path) -> None:
    w = World(tmp_path)
    _history(w)
    hist = [(f[b"digest"].decode(), f[b"value"]) for _, f in w.r.xrange(keys.configs("t"))]
    for d, raw in hist:
        assert msgspec.json.decode(raw, type=RankingConfig).digest() == d
    # each config once (the worker files a digest once), the worker's own among them
    assert len(hist) == len({d for d, _ in hist}) == 2
    assert DEFAULT.digest() in {d for d, _ in hist}
    assert w.r.xlen(keys.query_embeddings("t")) == 1


@pytest.mark.parametrize("tries", [None, 0])
def test_a_refresh_raced_by_a_commit_is_refreshed_until_exact(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tries: int | None) -> None:
    """A batch committed between the index reading the changes and the notes leaves a note
    newer than the index's checkpoint; the engine refreshes again, so the recorded position
    is the state the query really saw and the reproduction is identical (``tries=0``: the
    engine without that second refresh records a position its answer does not match)."""
    from hivemind_memory.api_stub.protocol.messages import Envelope
    from hivemind_memory.projections.store import index_loader
    from hivemind_memory.projections.store.log import tail
    from hivemind_memory.projections.store.readmodel import read_notes
    from hivemind_memory.worker import engine as engine_mod
    from hivemind_memory.worker.engine import QueryEngine
    from hivemind_memory.worker.projector import ensure_projected

    if tries is not None:
        monkeypatch.setattr(engine_mod, "REFRESH_TRIES", tries)
    w = World(tmp_path)
    eng = QueryEngine(w.r, DEFAULT, w.settings)

    def serve_direct() -> None:
        w.client.submit_batch([{"ns": "t", "text": "redis stream", "budget": 3}])
        for job in w.client._qq.jobs:
            eng.serve([msgspec.convert(e, Envelope) for e in job.args[0]])
            job.delete()

    # same text and length: the newer note wins until the older one is used 5 times
    w.client.append([created("old", text="redis stream", at=T0, tokens=3),
                     created("new", text="redis stream", at=T0 + timedelta(days=300),
                             tokens=3)])
    serve_direct()
    w.client.append([used("old", f"u{i}") for i in range(5)])
    ensure_projected(w.r, "t", tail(w.r, "t"), w.settings)
    real = index_loader.refresh_index
    calls: list[int] = []

    def racy(r: Any, idx: Any, embedder: Any = None, **kw: Any) -> None:
        calls.append(1)
        if len(calls) == 1:  # as if HMGET saw the new commit and XRANGE did not
            idx.put(read_notes(r, "t")["old"])
            return
        real(r, idx, embedder, **kw)

    monkeypatch.setattr(engine_mod, "refresh_index", racy)
    serve_direct()
    first, second = all_served(w.r, "t")
    assert [n for n, _ in first.event.chosen] == ["new"]
    assert [n for n, _ in second.event.chosen] == ["old"]  # what the agent was shown
    reps = list(Auditor(w.r, "t", DEFAULT).reproduce([first, second]))
    if tries is None:
        assert len(calls) == 2 and parse_pos(second.event.seen) == tail(w.r, "t")
        assert [r.identical for r in reps] == [True, True]
    else:
        assert len(calls) == 1 and parse_pos(second.event.seen) < tail(w.r, "t")
        assert [r.identical for r in reps] == [True, False]
        assert "notes out: old" in reps[1].differences


def test_persistent_embedded_store_keeps_what_reproduction_needs(tmp_path: Path) -> None:
    """``memory://PATH`` persists stream appends only: the audit, the config history and the
    query embeddings are streams, so a served query reproduces in a later process."""
    import os
    import subprocess

    from tests.support import HIVEMIND

    url = f"memory://{tmp_path / 'store'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIVEMIND_")}
    demo = subprocess.run([*HIVEMIND, "demo", "--store", url], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    assert demo.returncode == 0, demo.stderr[-2000:]
    rep = subprocess.run([*HIVEMIND, "audit", "reproduce", "--ns", "demo", "--all",
                          "--redis-url", url], capture_output=True, text=True, env=env,
                         timeout=120, check=False)
    assert rep.returncode == 0, rep.stdout + rep.stderr[-2000:]
    import re

    m = re.search(r"audit reproduce: (\d+) identical, 0 different", rep.stderr)
    assert m is not None and int(m.group(1)) >= 3, rep.stderr[-2000:]  # the demo's queries


class _Shifted:
    """Another embedder: the bundled one's vectors, turned (another digest, other cosines)."""

    name = "shifted"

    def __init__(self) -> None:
        from hivemind_memory.projections.ranking.embedders import embedder_for

        base = embedder_for("wordllama")
        assert base is not None
        self.base = base
        self.dim = base.dim

    def digest(self) -> str:
        return "shifted:1"

    def embed(self, texts: list[str]) -> Any:
        import numpy as np

        v = np.asarray(self.base.embed(texts))
        return np.roll(v, 1, axis=1) + 0.3 * np.sign(v)


def test_the_embedder_is_recorded_and_a_change_is_named_as_a_cause(tmp_path: Path) -> None:
    from hivemind_memory.projections.ranking.embedders import embedder_for

    w = World(tmp_path)
    w.client.append([created(f"n{i}", at=T0 - timedelta(days=i, minutes=90 * i), text=t,
                             tokens=k)
                     for i, (t, k) in enumerate([
                         ("fixing the car at the garage", 30), ("automobile repair shop", 8),
                         ("lunch menu on tuesday", 12), ("the mechanic replaced a tire", 40),
                         ("pottery class with the kids", 20), ("repair of the engine", 25)])])
    w.serve([{"ns": "t", "text": "car repair mechanic", "budget": 45, "explain": True},
             {"ns": "t", "text": "car repair mechanic", "budget": 45,
              "config": {"relevance": "bm25"}}])
    calibrated, lexical = all_served(w.r, "t")
    bundled = embedder_for("wordllama")
    assert bundled is not None
    assert calibrated.event.embedder_digest == bundled.digest()
    assert lexical.event.embedder_digest == ""  # bm25 relevance uses no embedder
    same = Auditor(w.r, "t", DEFAULT)
    assert all(r.identical for r in same.reproduce([calibrated, lexical]))
    other = Auditor(w.r, "t", DEFAULT, embedder=_Shifted())
    rep = other.reproduce_one(calibrated)
    assert not rep.identical
    assert any(c.startswith(f"embedder changed: served with {bundled.digest()}, re-ran "
                            "with shifted:1") for c in rep.causes), rep.causes
    assert other.reproduce_one(lexical).identical  # the lexical answer owes it nothing


def test_a_job_embeds_its_queries_in_one_call_and_one_product(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from hivemind_memory.projections.ranking import vectors
    from hivemind_memory.projections.ranking.embedders import WordLlamaEmbedder
    from hivemind_memory.worker import engine as engine_mod

    w = World(tmp_path)
    w.client.append([created(f"n{i}", text=f"redis note {i} about streams") for i in range(30)])
    calls: list[int] = []
    products: list[int] = []
    real_embed, real_cos = WordLlamaEmbedder.embed, vectors.DerivedVectors.cosines

    def embed(self: Any, texts: Any) -> Any:
        calls.append(len(texts))
        return real_embed(self, texts)

    def cosines(self: Any, queries: Any, n: int) -> Any:
        products.append(len(queries))
        return real_cos(self, queries, n)

    monkeypatch.setattr(WordLlamaEmbedder, "embed", embed)
    monkeypatch.setattr(vectors.DerivedVectors, "cosines", cosines)
    reqs = [{"ns": "t", "text": f"redis streams {i}", "budget": 50} for i in range(25)]
    w.serve(reqs)
    queries = [c for c in calls if c != 30]  # (the notes are embedded once, at the load)
    assert queries == [25] and products == [25]  # the whole job: 25 queries x 30 notes
    # where queries x notes would pass PRIME_FLOATS, a wave (or more) at a time
    calls.clear()
    products.clear()
    wave = engine_mod.WAVE
    monkeypatch.setattr(engine_mod, "PRIME_FLOATS", wave * 30)
    w.serve(reqs)
    assert calls == [wave, 25 - wave] and products == [wave, 25 - wave]


def test_sweep_varies_the_calibration_and_the_relevance_mode(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    w = World(tmp_path)
    _history(w)
    capsys.readouterr()  # the worker's log lines
    lt = DEFAULT.calibration.log_tokens
    code, out, err = w.cli(capsys, "sweep", "--ns", "t", "--set",
                           f"calibration.log_tokens={lt},-3", "--set",
                           "relevance=calibrated,bm25", "--json")
    assert code == 0, err
    by = {r["config"]: r for r in map(json.loads, out.splitlines())}
    served = by["as served"]
    same = by[f"calibration.log_tokens={lt} relevance=calibrated"]
    assert same["changed"] == 0 and same["value"] == pytest.approx(served["value"])
    assert by["calibration.log_tokens=-3 relevance=calibrated"]["changed"] > 0
    assert by["calibration.log_tokens=-3 relevance=bm25"] == {
        **by[f"calibration.log_tokens={lt} relevance=bm25"],
        "config": "calibration.log_tokens=-3 relevance=bm25",
        "overrides": {"calibration.log_tokens": -3, "relevance": "bm25"}}  # unread there


def test_a_question_that_names_a_time_reproduces_with_its_window(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """"Two weeks ago" is relative to the served query's time, not the replay's: an as-of
    query and a live one that name it reproduce to the byte later (the live one's window is
    of its served clock), and the as-of answer holds the note written in its window, with
    ``explain``'s window."""
    w = World(tmp_path)
    w.client.append([
        *[created(f"f{i}", at=T0 - timedelta(days=1 + i * 0.3),
                  text=f"question about laptop battery item {i}") for i in range(80)],
        created("planted", at=T0 - timedelta(days=14),
                text="I just planted 12 new tomato saplings in the backyard today."),
    ])
    q = "What gardening-related activity did I do two weeks ago?"
    ids = w.serve([
        {"ns": "t", "text": q, "budget": 200, "as_of": iso(T0), "explain": True},
        {"ns": "t", "text": q, "budget": 200},
    ])
    body = json.loads(w.client.result_json(ids[0], timeout=5))
    [window] = body["time_windows"]
    assert window["words"] == "two weeks ago" and "planted" in window["notes"]
    assert "planted" in [n["note_id"] for n in body["notes"]]
    code, out, err = w.cli(capsys, "audit", "reproduce", "--ns", "t", "--all")
    assert code == 0, out + err
    assert "2 identical, 0 different" in err
