"""Honest liveness: ``/readyz``, ``/metrics`` and ``hivemind status`` count the same worker
heartbeats; a SIGKILLed ``hivemind worker`` counts as dead within 15 s (the issue's bound;
the design's is ``keys.WORKER_BEAT_TTL_SECONDS``), not after RQ's 80 s worker key TTL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hivemind_memory.projections.store import keys
from tests.support import HIVEMIND, RedisProc
from tests.support.frontdoor import OPS, call, start_live

DEAD_WITHIN_S = 15.0
"""The issue's bound from SIGKILL to readiness 503."""


def _workers_metric(base: str) -> float:
    with urllib.request.urlopen(urllib.request.Request(
                base + "/metrics", headers={"Authorization": f"Bearer {OPS}"}), timeout=30) as resp:
        text = resp.read().decode()
    [fam] = [f for f in text_string_to_metric_families(text) if f.name == "hivemind_workers"]
    return fam.samples[0].value


def _until(cond: Callable[[], bool], within_s: float, what: str) -> float:
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < within_s, f"{what}: not within {within_s} s"
        time.sleep(0.1)  # polling another process's state, bounded by the deadline
    return time.monotonic() - t0


def test_on_the_embedded_store_metrics_readyz_and_status_count_the_in_process_worker(
        tmp_path: Path) -> None:
    srv = start_live(f"memory://{tmp_path / 'store'}")
    try:
        st, h = call(srv.base, "GET", "/readyz")
        assert (st, h["detail"]) == (200, "1 worker(s)")
        assert _workers_metric(srv.base) == 1  # between bursts too: the thread's heartbeat
        workers = srv.served.client.rq.smembers(keys.WORKERS)
        assert len(workers) == 1
    finally:
        srv.stop()
    # a stopped server's worker is gone at once (its heartbeat deleted, not left to expire)
    assert not srv.served.client.rq.exists(keys.worker_beat(next(iter(workers)).decode()))


@pytest.mark.redis_server
def test_a_sigkilled_worker_counts_as_dead_within_the_bound(
        redis_factory: Callable[..., RedisProc], tmp_path: Path) -> None:
    rp = redis_factory(appendonly=False)
    srv = start_live(rp.url)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("HIVEMIND_")},
           "HIVEMIND_REDIS_URL": rp.url}
    w = subprocess.Popen([*HIVEMIND, "worker"], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    try:
        assert call(srv.base, "GET", "/readyz")[0] in (200, 503)
        _until(lambda: call(srv.base, "GET", "/readyz")[0] == 200, 60, "the worker to start")
        assert _workers_metric(srv.base) == 1
        status = subprocess.run([*HIVEMIND, "status", "--json"], env=env, capture_output=True,
                                text=True, timeout=60, check=True)
        [wk] = json.loads(status.stdout)["workers"]
        assert (wk["pid"], wk["kind"]) == (w.pid, "worker")
        w.send_signal(signal.SIGKILL)
        w.wait(timeout=10)
        took = _until(lambda: call(srv.base, "GET", "/readyz")[0] == 503, DEAD_WITHIN_S,
                      "readyz 503 after SIGKILL")
        st, h = call(srv.base, "GET", "/readyz")
        assert st == 503 and "no worker" in h["detail"]
        assert _workers_metric(srv.base) == 0
        status = subprocess.run([*HIVEMIND, "status", "--json"], env=env, capture_output=True,
                                text=True, timeout=60, check=True)
        assert json.loads(status.stdout)["workers"] == []
        print(f"SIGKILL -> /readyz 503 in {took:.1f} s "
              f"(bound {keys.WORKER_BEAT_TTL_SECONDS} s)")
        assert took <= keys.WORKER_BEAT_TTL_SECONDS + 1
    finally:
        if w.poll() is None:
            w.kill()
            w.wait(timeout=10)
        srv.stop()
