"""hivemind on a real Redis Cluster (3 masters, RQ on a plain Redis beside it): URLs and
settings, one slot per call over many namespaces, many workers, the lease fencing a stale
projector, and the CLI giving the same bytes as on one Redis."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from rq import Worker

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.events.errors import ConfigError, StoreError
from hivemind_memory.projections.store import keys, readmodel
from hivemind_memory.projections.store.cluster import (
    append_replicated,
    namespace_slot,
    parse_cluster_url,
)
from hivemind_memory.projections.store.ingest import ingest
from hivemind_memory.projections.store.lease import try_lease
from hivemind_memory.projections.store.log import append, namespaces, tail
from hivemind_memory.projections.store.readmodel import (
    checkpoint,
    commit,
    prepare_batch,
    read_notes,
)
from hivemind_memory.projections.store.rebuild import fold_log, live_snapshot, write_back
from hivemind_memory.worker import runtime
from hivemind_memory.worker.loop import run_worker
from hivemind_memory.worker.ops.status import read_status
from hivemind_memory.worker.projector import behind, run_projection
from tests.support import (
    HIVEMIND,
    ClusterProc,
    RedisProc,
    SlotRecorder,
    rq_for,
    wait_until,
)
from tests.support.beats import wait_for_workers
from tests.support.factories import T0, created, ev, forgotten, iso, jsonl, used

# --- URLs and settings (no server needed) ---------------------------------------------------


def test_cluster_urls_parse_into_startup_nodes_and_options() -> None:
    nodes, opts = parse_cluster_url("redis+cluster://127.0.0.1:7000, 10.0.0.2:7001")
    assert [(n.host, n.port) for n in nodes] == [("127.0.0.1", 7000), ("10.0.0.2", 7001)]
    assert opts == {}
    nodes, opts = parse_cluster_url("rediss+cluster://me:s%40cret@h:7000")
    assert [(n.host, n.port) for n in nodes] == [("h", 7000)]
    assert opts == {"ssl": True, "username": "me", "password": "s@cret"}
    for bad in ("redis+cluster://h", "redis+cluster://h:x", "redis+cluster://:7000",
                "redis+cluster://h:70000", "redis://h:7000"):
        with pytest.raises(ConfigError):
            parse_cluster_url(bad)


def test_a_cluster_store_needs_a_plain_redis_for_rq() -> None:
    url = "redis+cluster://127.0.0.1:7000"
    with pytest.raises(ConfigError, match="HIVEMIND_RQ_URL"):
        Settings.from_env({"HIVEMIND_REDIS_URL": url})
    s = Settings.from_env({"HIVEMIND_REDIS_URL": url, "HIVEMIND_RQ_URL": "redis://h:6379/0"})
    assert (s.redis_url, s.rq_url) == (url, "redis://h:6379/0")
    with pytest.raises(ConfigError, match="plain Redis"):
        Settings.from_env({"HIVEMIND_REDIS_URL": url}, rq_url=url)
    assert Settings.from_env({}).rq_url is None  # one plain Redis carries both
    with pytest.raises(ConfigError, match="wait_replicas"):
        Settings.from_env({"HIVEMIND_WAIT_REPLICAS": "-1"})




def _log(nss: list[str]) -> list[dict[str, Any]]:
    """A log over ``nss`` whose notes differ in age, length, uses, scope, kind and fate."""
    out: list[dict[str, Any]] = []
    for k, ns in enumerate(nss):
        for i in range(4):
            out.append(created(f"n{i}", ns=ns, text=f"redis note {i} of {ns} " + "w " * (i * k % 7),
                               at=T0 + timedelta(days=i * 13 + k),
                               scope="private" if i == 3 else "shared",
                               kind="scratch" if i == 2 else "note"))
        for j in range(k % 5):
            out.append(used(f"n{j % 4}", f"u{j}", ns=ns))
        if k % 3 == 0:
            out.append(forgotten("n1", "f1", ns=ns))
        out.append(used("ghost", "ug", ns=ns))  # a dead letter
    return out


# --- one slot per call ----------------------------------------------------------------------


@pytest.mark.redis_cluster
@pytest.mark.redis_server
def test_every_call_touches_one_slot_over_many_namespaces(
        cluster_store: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    rec = SlotRecorder([])
    rec.install(monkeypatch)
    r, rq = cluster_store, rq_for(cluster_store)
    nss = [f"ns{i:03d}" for i in range(120)]
    assert len({namespace_slot(ns) for ns in nss}) > 100  # they really spread over slots
    s = Settings(batch_size=7, max_batches_per_job=2)
    rt = runtime.build(s, r, rq)
    runtime.install(rt)
    c = Client(r, rq, settings=s)
    f = tmp_path / "ev.jsonl"
    f.write_text(jsonl(_log(nss[:60])))
    ingest(r, str(f), on_error=pytest.fail)
    c.append(_log(nss[60:]))
    assert sorted(behind(r)) == nss  # cross-namespace: SSCAN + pipelined single-key reads
    assert run_worker(rt, burst=True) == 0
    reqs = [{"ns": ns, "text": "redis note", "budget": 40, "agent": "a"} for ns in nss[::7]]
    reqs += [{"ns": ns, "text": "redis", "budget": 25, "as_of": iso(T0 + __import__(
        "datetime").timedelta(days=20))} for ns in nss[::11]]
    ids = c.submit_batch(reqs)
    assert run_worker(rt, burst=True) == 0
    bodies = [json.loads(b) for b in c.batch_results(ids, 30)]
    assert all("error" not in b for b in bodies) and any(b["notes"] for b in bodies)
    for ns in nss[:3]:  # replay's WATCH/MULTI write-back and the snapshot MULTI
        assert write_back(r, ns, fold_log(r, ns))
        cp, live = live_snapshot(r, ns)
        assert cp == tail(r, ns) and live == fold_log(r, ns).projection.notes
    assert namespaces(r) == nss
    st = read_status(r, rq, datetime.now(UTC))  # `hivemind status`: one MULTI per namespace
    assert [n.ns for n in st.namespaces] == nss and all(n.lag_entries == 0 for n in st.namespaces)

    per_call = rec.slots_per_call()
    crossing = [(name, slots) for name, slots in per_call if len(slots) != 1]
    assert crossing == []
    kinds = Counter(name for name, _ in per_call)
    assert kinds["MULTI"] >= 60 and kinds["EVALSHA"] >= 240 and kinds["XADD"] >= 500
    assert len({next(iter(slots)) for _, slots in per_call}) > 100
    registry = [ks for _, ks in rec.calls if keys.NAMESPACES.encode() in ks]
    assert registry and all(ks == [keys.NAMESPACES.encode()] for ks in registry)


# --- many workers, one projector per namespace -----------------------------------------------


@pytest.mark.redis_cluster
@pytest.mark.redis_server
def test_a_projector_that_lost_its_lease_mid_batch_cannot_commit(cluster_store: Any) -> None:
    r = cluster_store
    append(r, [ev(d) for d in _log(["t"])])
    a = try_lease(r, "t", 60_000)
    assert a is not None
    prep = prepare_batch(r, "t", 5)  # A folds a batch ...
    assert prep is not None
    r.pexpire(keys.lock("t"), 1)  # ... its lease expires (a long GC pause, a partition) ...
    r.delete(keys.lock("t"))
    b = try_lease(r, "t", 60_000)  # ... and B takes it, but has committed nothing yet
    assert b is not None
    assert commit(r, prep, 1, a.token) is False  # fenced: A cannot commit
    assert checkpoint(r, "t") == (0, 0) and not r.exists(keys.notes("t"))
    assert not a.renew()
    again = prepare_batch(r, "t", 5)
    assert again is not None and commit(r, again, 2, b.token) is True


@pytest.mark.redis_cluster
@pytest.mark.redis_server
def test_threads_never_fold_one_namespace_at_once(cluster_store: Any,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    r, rq = cluster_store, rq_for(cluster_store)
    nss = [f"p{i}" for i in range(6)]
    evs = [d for ns in nss for d in _log([ns]) * 1]
    evs += [used(f"n{i % 4}", f"x{i}", ns=ns) for ns in nss for i in range(60)]
    append(r, [ev(d) for d in evs])
    s = Settings(batch_size=4, max_batches_per_job=1000)
    rt = runtime.build(s, r, rq)
    active: Counter[str] = Counter()
    overlaps: list[str] = []
    guard = threading.Lock()
    orig = readmodel.Folder.step
    steps: Counter[str] = Counter()

    def instrumented(self: readmodel.Folder, more: bool = True) -> Any:
        ns = self.ns
        with guard:
            active[ns] += 1
            steps[ns] += 1
            if active[ns] > 1:
                overlaps.append(ns)
        try:
            return orig(self, more)
        finally:
            with guard:
                active[ns] -= 1

    monkeypatch.setattr(readmodel.Folder, "step", instrumented)
    outcomes: list[dict[str, Any]] = []
    errors: list[BaseException] = []

    def work(order: list[str]) -> None:
        try:
            for ns in order:
                outcomes.append(run_projection(r, rt.project_queue, ns, s))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(nss[k:] + nss[:k],)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and not overlaps
    assert all(steps[ns] > 1 for ns in nss)  # the instrumented fold really ran
    assert sum(o["events"] for o in outcomes) == len(evs)  # every event folded exactly once
    for ns in nss:
        assert read_notes(r, ns) == fold_log(r, ns).projection.notes


def _run(env: dict[str, str], *args: str, stdin: str | None = None,
         timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HIVEMIND, *args], input=stdin, capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=timeout, check=False)


@pytest.mark.redis_cluster
@pytest.mark.redis_server
def test_worker_processes_share_namespaces_and_never_collide(
        cluster_store: Any, redis_cluster: ClusterProc, rq_redis: RedisProc,
        tmp_path: Path) -> None:
    env = {"HIVEMIND_REDIS_URL": redis_cluster.url, "HIVEMIND_RQ_URL": rq_redis.url,
           "HIVEMIND_BATCH_SIZE": "5", "HIVEMIND_MAX_BATCHES_PER_JOB": "2"}
    nss = [f"w{i:02d}" for i in range(24)]
    f = tmp_path / "ev.jsonl"
    f.write_text(jsonl(_log(nss) + [used(f"n{i % 4}", f"more{i}", ns=ns)
                                    for ns in nss for i in range(30)]))
    procs = [subprocess.Popen([*HIVEMIND, "worker"], env={**os.environ, **env},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for _ in range(3)]
    try:
        rq = rq_for(cluster_store)
        wait_until(lambda: len(Worker.all(connection=rq)) == 3, "3 idle workers")
        got = _run(env, "ingest", str(f))  # schedules one projection job per namespace
        assert got.returncode == 0, got.stderr
        wait_until(lambda: not behind(cluster_store), "every namespace projected")
    finally:
        for p in procs:
            p.terminate()  # RQ's warm shutdown: a running job finishes first
    logs = []
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err[-2000:]
        logs.append([json.loads(x) for x in err.splitlines() if x.startswith("{")])
    batches = [[e for e in lg if e.get("event") == "projection_batch"] for lg in logs]
    assert all(b["committed"] for bs in batches for b in bs)  # no fold ever lost a race
    assert sum(1 for bs in batches if bs) >= 2  # the work really was shared
    assert {b["ns"] for bs in batches for b in bs} == set(nss)
    for ns in nss:
        assert checkpoint(cluster_store, ns) == tail(cluster_store, ns)
        assert read_notes(cluster_store, ns) == fold_log(cluster_store, ns).projection.notes


# --- the CLI: same bytes as on one Redis --------------------------------------------------------


def _cli_session(env: dict[str, str], events: Path, queries: Path, nss: list[str]) -> list[str]:
    outs = []
    got = _run(env, "ingest", str(events))
    assert got.returncode == 0, got.stderr
    got = _run(env, "worker", "--burst")
    assert got.returncode == 0, got.stderr[-2000:]
    for ns in nss[:3]:
        outs.append(_run(env, "notes", "--ns", ns, "--json").stdout)
    w = subprocess.Popen([*HIVEMIND, "worker"], env={**os.environ, **env},
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_workers(redis.Redis.from_url(env.get("HIVEMIND_RQ_URL")
                                              or env["HIVEMIND_REDIS_URL"]))
        q = _run(env, "query", "redis note", "--ns", nss[1], "--budget", "30", "--agent", "a",
                 "--as-of", iso(T0 + timedelta(days=30)), "--json",
                 "--explain")
        assert q.returncode == 0, q.stderr
        outs.append(q.stdout)
        b = _run(env, "batch", str(queries), "--timeout", "60")
        assert b.returncode == 0, b.stderr
        outs.append(b.stdout)
    finally:
        w.terminate()
        w.wait(timeout=30)
    return outs


@pytest.mark.redis_cluster
@pytest.mark.redis_server
def test_cli_gives_the_same_bytes_on_the_cluster_as_on_one_redis(
        cluster_store: Any, redis_cluster: ClusterProc, rq_redis: RedisProc,
        redis_factory: Any, tmp_path: Path) -> None:
    nss = [f"c{i}" for i in range(9)]
    events = tmp_path / "ev.jsonl"
    events.write_text(jsonl(_log(nss)))
    queries = tmp_path / "q.jsonl"
    asof = [iso(T0 + timedelta(days=d)) for d in (5, 20, 400)]
    queries.write_text("".join(
        json.dumps({"ns": ns, "text": "redis note of", "budget": 10 + 7 * k, "agent": "a",
                    "as_of": asof[k % 3]}) + "\n" for k, ns in enumerate(nss)))
    one = redis_factory(appendonly=False)
    single = _cli_session({"HIVEMIND_REDIS_URL": one.url}, events, queries, nss)
    cluster = _cli_session({"HIVEMIND_REDIS_URL": redis_cluster.url,
                            "HIVEMIND_RQ_URL": rq_redis.url}, events, queries, nss)
    assert all(x.strip() for x in single)
    assert cluster == single
    no_rq = _run({"HIVEMIND_REDIS_URL": redis_cluster.url, "HIVEMIND_RQ_URL": ""}, "query", "x",
                 "--ns", "t", "--budget", "5")
    assert no_rq.returncode == 2 and "HIVEMIND_RQ_URL" in no_rq.stderr


# --- appends that wait for replicas (WAIT) ---------------------------------------------------


@pytest.mark.redis_server
def test_append_replicated_returns_once_a_replica_has_the_events(redis_factory: Any) -> None:
    primary, replica = redis_factory(appendonly=False), redis_factory(appendonly=False)
    r, rr = primary.client(), replica.client()
    rr.replicaof("127.0.0.1", primary.port)
    wait_until(lambda: rr.info("replication").get("master_link_status") == "up", "the link")
    evs = [ev(d) for d in _log(["a", "b"])]
    ids = append_replicated(r, evs, 1, 5000)
    for ns in ("a", "b"):  # the ids are the entries, in order
        assert [i for i, e in zip(ids, evs, strict=True) if e.ns == ns] == \
            [x.decode() for x, _ in r.xrange(keys.stream(ns))]
    # acknowledged by the replica: it holds every entry now, without waiting any further
    assert rr.xlen(keys.stream("a")) + rr.xlen(keys.stream("b")) == len(evs)
    assert rr.smembers(keys.NAMESPACES) == {b"a", b"b"}
    with pytest.raises(StoreError, match="only 1 of 2 replica"):
        append_replicated(r, evs[:1], 2, 50)
    assert r.xlen(keys.stream("a")) == len([e for e in evs if e.ns == "a"]) + 1  # still in
    assert append_replicated(r, [], 2, 50) == []


@pytest.mark.redis_cluster
@pytest.mark.redis_server
def test_append_replicated_on_a_cluster_without_replicas_fails_clearly(
        cluster_store: Any) -> None:
    evs = [ev(d) for d in _log([f"r{i}" for i in range(12)])]
    ids = append_replicated(cluster_store, evs, 0, 50)  # 0: a plain append
    assert len(ids) == len(evs)
    with pytest.raises(StoreError, match="only 0 of 1 replica"):
        append_replicated(cluster_store, evs, 1, 50)
    for ns in {e.ns for e in evs}:  # the XADDs are in either way (a re-run is deduplicated)
        assert cluster_store.xlen(keys.stream(ns)) >= sum(e.ns == ns for e in evs)


# --- serve, mcp and the SDK on a cluster ---------------------------------------------------------


@pytest.mark.redis_cluster
@pytest.mark.redis_server
def test_serve_on_the_cluster_with_rq_apart(cluster_store: Any, redis_cluster: ClusterProc,
                                            rq_redis: RedisProc, tmp_path: Path) -> None:
    from tests.support.frontdoor import OPS, call, start_serve

    (tmp_path / "tokens.toml").write_text(
        f'[[token]]\nsecret = "{OPS}"\nns = ["*"]\nagent = "ops"\n'
        'rights = ["write", "query", "admin"]\n')
    env = {"HIVEMIND_REDIS_URL": redis_cluster.url, "HIVEMIND_RQ_URL": rq_redis.url}
    worker = subprocess.Popen([*HIVEMIND, "worker"], env={**os.environ, **env},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    srv = start_serve(["--redis-url", redis_cluster.url, "--rq-url", rq_redis.url,
                       "--tokens", "tokens.toml"], tmp_path)
    try:
        wait_for_workers(rq_redis.client())
        events = [{"type": "note.created", "event_id": f"e{i}", "note_id": f"n{i}",
                   "agent": "ops", "at": iso(T0), "text": f"redis cluster note {i}"}
                  for i in range(5)]
        for ns in ("s1", "s2", "s3"):
            assert call(srv.base, "POST", f"/v1/ns/{ns}/events", events, token=OPS)[0] == 200
        q = {"text": "redis cluster", "budget": 40, "as_of": iso(T0 + timedelta(days=1))}
        st, body = call(srv.base, "POST", "/v1/ns/s2/query", q, token=OPS)
        assert st == 200 and len(body["notes"]) >= 2, body
        wait_until(lambda: len(call(srv.base, "GET", "/v1/ns/s3/notes", token=OPS)[1]) == 5,
                   "the worker to project s3")
    finally:
        srv.stop()
        worker.terminate()
        worker.wait(timeout=30)
    assert read_notes(cluster_store, "s1").keys() == {f"n{i}" for i in range(5)}


def test_every_command_takes_rq_url() -> None:
    from hivemind_memory.worker.cli.main import _settings, build_parser

    cl, rq = "redis+cluster://127.0.0.1:7000", "redis://127.0.0.1:6390/0"
    argvs = [["ingest", "f.jsonl"], ["worker"], ["query", "x", "--ns", "t", "--budget", "5"],
             ["batch", "q.jsonl"], ["notes", "--ns", "t"], ["replay", "--ns", "t"],
             ["dead", "--ns", "t"], ["status"], ["serve"], ["mcp", "--ns", "t", "--agent", "a"]]
    for argv in argvs:
        s = _settings(build_parser().parse_args([*argv, "--redis-url", cl, "--rq-url", rq]))
        assert (s.redis_url, s.rq_url) == (cl, rq), argv
