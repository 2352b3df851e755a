"""Shards with real ``hivemind worker`` processes on a private redis-server: each namespace's
index lives in the worker of its shard only; killing a shard's worker gets its queries the
shard's error (never a client timeout) while the other shard is answered as before; a query
queued before the death is answered once a worker serves the shard again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hivemind_memory.api_stub.client import Client
from hivemind_memory.api_stub.protocol.settings import Settings
from tests.support import HIVEMIND, RedisProc
from tests.support.beats import ns_in
from tests.support.factories import created

pytestmark = pytest.mark.redis_server


def _until(cond: Callable[[], bool], what: str, within_s: float = 30.0) -> None:
    deadline = time.monotonic() + within_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)  # polling Redis for a state another process reaches


@pytest.fixture
def sharded(redis_factory: Callable[..., RedisProc], tmp_path: Path) -> Iterator[Any]:
    rp = redis_factory(appendonly=False)
    env = {**os.environ, "HIVEMIND_REDIS_URL": rp.url, "HIVEMIND_SHARDS": "2"}
    procs: list[subprocess.Popen[bytes]] = []

    class Deployment:
        url = rp.url
        client = Client(rp.client(), settings=Settings(redis_url=rp.url, shards=2))

        @staticmethod
        def worker(shards: str) -> subprocess.Popen[bytes]:
            log = open(tmp_path / f"worker-{len(procs)}.log", "wb")  # noqa: SIM115
            p = subprocess.Popen([*HIVEMIND, "worker", "--shards", shards], env=env,
                                 stdout=log, stderr=log)
            log.close()
            procs.append(p)
            return p

        @staticmethod
        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([*HIVEMIND, *args], env=env, capture_output=True, text=True,
                                  timeout=90, check=False)

        @staticmethod
        def status() -> dict[str, Any]:
            out = Deployment.cli("status", "--json")
            assert out.returncode == 0, out.stderr
            got: dict[str, Any] = json.loads(out.stdout)
            return got

    yield Deployment
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)


def _served(d: Any) -> list[int]:
    d.client._served = None  # read the heartbeats now
    return d.client.unserved_shards()  # type: ignore[no-any-return]


def test_a_killed_shard_worker_gets_its_queries_the_error_until_a_worker_serves_it_again(
        sharded: Any) -> None:
    d = sharded
    a, b = ns_in(0, 2), ns_in(1, 2)
    d.client.append([created("na", ns=a, text="alpha redis stream"),
                     created("nb", ns=b, text="beta redis stream")])
    w0, w1 = d.worker("0"), d.worker("1")
    _until(lambda: _served(d) == [], "both shards served")
    for ns, nid in ((a, "na"), (b, "nb")):
        q = d.cli("query", "redis", "--ns", ns, "--budget", "50", "--json")
        assert q.returncode == 0, q.stdout + q.stderr
        assert [n["note_id"] for n in json.loads(q.stdout)["notes"]] == [nid]

    def holders() -> dict[str, list[int]]:
        return {ns: w["shards"] for w in d.status()["workers"] for ns in w["namespaces_held"]}

    # each namespace's index is in the worker of its shard, and only there
    _until(lambda: holders() == {a: [0], b: [1]}, "each worker to announce its namespace")
    st = d.status()
    assert st["unserved_shards"] == [] and st["shard_count"] == 2
    assert all(w["rss_bytes"] > 0 and w["namespace_count"] == 1 for w in st["workers"])

    # shard 1's worker dies without a word; a query is queued before its heartbeat expires
    w1.send_signal(signal.SIGKILL)
    w1.wait(timeout=10)
    queued = d.client.submit_query(b, "redis", 50)
    res = d.client.result(queued, timeout=60)  # the heartbeat expires in <= 10 s: then said
    assert res["error"]["code"] == "shard_unavailable", res
    assert "shard 1 of 2" in res["error"]["message"]
    assert d.status()["unserved_shards"] == [1]
    # meanwhile: shard 1's queries get the error at once through the CLI, shard 0 is answered
    q = d.cli("query", "redis", "--ns", b, "--budget", "50", "--json")
    assert q.returncode == 1 and json.loads(q.stdout)["error"]["code"] == "shard_unavailable"
    q = d.cli("query", "redis", "--ns", a, "--budget", "50", "--json")
    assert q.returncode == 0 and json.loads(q.stdout)["notes"][0]["note_id"] == "na"
    assert w0.poll() is None

    # another worker takes shard 1 over: the query queued meanwhile is answered, and new ones
    d.worker("1")
    _until(lambda: _served(d) == [], "shard 1 served again")
    again = d.client.result(queued, timeout=30)
    assert [n["note_id"] for n in again["notes"]] == ["nb"], again
    q = d.cli("query", "redis", "--ns", b, "--budget", "50", "--json")
    assert q.returncode == 0 and json.loads(q.stdout)["notes"][0]["note_id"] == "nb"


def test_a_worker_given_a_shard_outside_the_count_refuses_to_start(sharded: Any) -> None:
    out = sharded.cli("worker", "--shards", "2", "--burst")
    assert out.returncode == 2
    assert "--shards '2': '2' is not within 0..1 (HIVEMIND_SHARDS=2)" in out.stderr


@pytest.mark.redis_cluster
def test_shards_on_the_cluster_layout_with_the_queues_on_their_own_redis(
        cluster_store: Any) -> None:
    """Data on a Redis Cluster, RQ (the shard queues and the heartbeats) on a plain Redis."""
    from hivemind_memory.worker import runtime
    from hivemind_memory.worker.loop import run_worker
    from hivemind_memory.worker.ops.heartbeat import Heartbeat
    from tests.support import rq_for

    r, rq = cluster_store, rq_for(cluster_store)
    s = Settings(shards=2)
    rt = runtime.build(s, r, rq)
    runtime.install(rt)
    c = Client(r, rq, settings=s)
    a, b = ns_in(0, 2), ns_in(1, 2)
    c.append([created("na", ns=a, text="alpha redis"), created("nb", ns=b, text="beta redis")])
    qa, qb = c.submit_query(a, "redis", 50), c.submit_query(b, "redis", 50)
    assert [len(c.shard_queue(k)) for k in (0, 1)] == [1, 1]
    assert c.result(qb, timeout=30)["error"]["code"] == "shard_unavailable"
    hb = Heartbeat(rq, "w1", "worker", [c.shard_queue(1).name], shards=(1,),
                   shard_count=2).start()
    try:
        assert run_worker(rt, burst=True, shards=(1,)) == 0
        c._served = None
        assert c.unserved_shards() == [0]
        assert [n["note_id"] for n in c.result(qb, timeout=30)["notes"]] == ["nb"]
        assert c.result(qa, timeout=30)["error"]["code"] == "shard_unavailable"
    finally:
        hb.stop()
    assert run_worker(rt, burst=True, shards=(0,)) == 0
    assert [n["note_id"] for n in c.result(qa, timeout=30)["notes"]] == ["na"]
