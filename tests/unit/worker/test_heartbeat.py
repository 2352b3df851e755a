"""Worker heartbeats: a live worker counts from its first moment, a clean stop removes it at
once, one that stops beating without a word (SIGKILL) drops out when its key expires, and dead
names are pruned by the next worker; ``status`` and the metrics read the same records."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import fakeredis
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hivemind_memory.projections.store import keys
from hivemind_memory.worker.ops import metrics
from hivemind_memory.worker.ops.heartbeat import Doing, Heartbeat, live_count, read_beats
from hivemind_memory.worker.ops.status import live_workers


@pytest.fixture
def rq() -> Any:
    return fakeredis.FakeRedis(server=fakeredis.FakeServer())


def _until(cond: Callable[[], bool], within_s: float) -> float:
    """Seconds until ``cond()`` held (fails after ``within_s``)."""
    t0 = time.monotonic()
    while not cond():
        assert time.monotonic() - t0 < within_s, "condition not reached in time"
        time.sleep(0.02)  # waiting for a key to expire on the store's clock
    return time.monotonic() - t0


def _killed(hb: Heartbeat) -> None:
    """What SIGKILL leaves behind: the thread gone, the record still there."""
    hb._stop.set()
    hb._thread.join(5)


def test_a_worker_counts_from_start_and_is_gone_at_once_after_a_clean_stop(rq: Any) -> None:
    assert live_count(rq) == 0 and live_workers(rq) == []
    hb = Heartbeat(rq, "w1", "in-process", ["q1", "q2"],
                   describe=lambda: Doing("busy", 3, 1)).start()
    [beat] = read_beats(rq)
    assert (beat.name, beat.kind, beat.queues, beat.state) == ("w1", "in-process",
                                                               ["q1", "q2"], "busy")
    assert 0 < rq.ttl(keys.worker_beat("w1")) <= keys.WORKER_BEAT_TTL_SECONDS
    [w] = live_workers(rq)  # no RQ hash of that name: the worker's own figures
    assert (w.name, w.kind, w.state, w.successful_jobs, w.failed_jobs) == (
        "w1", "in-process", "busy", 3, 1)
    assert w.last_heartbeat == beat.beat_at
    hb.stop()
    assert live_count(rq) == 0 and not rq.sismember(keys.WORKERS, "w1")


def test_rq_state_and_counters_win_when_rq_has_the_worker(rq: Any) -> None:
    hb = Heartbeat(rq, "w2", "worker", ["q"]).start()
    rq.hset("rq:worker:w2", mapping={"state": "busy", "successful_job_count": 7,
                                     "failed_job_count": 2})
    [w] = live_workers(rq)
    assert (w.state, w.successful_jobs, w.failed_jobs, w.kind) == ("busy", 7, 2, "worker")
    hb.stop()


def test_a_worker_that_stops_beating_is_dead_when_its_key_expires(rq: Any) -> None:
    hb = Heartbeat(rq, "w3", "worker", ["q"], every_s=0.1, ttl_s=1).start()
    # renewals keep it alive past its first key's TTL
    _until(lambda: any((b.beat_at - b.started_at).total_seconds() > 1.2
                       for b in read_beats(rq)), 5)
    assert live_count(rq) == 1
    _killed(hb)
    took = _until(lambda: live_count(rq) == 0, 3)
    assert took <= 1.2  # the TTL, not RQ's worker_ttl + 60
    # the name stays in the set until a worker starts: readers never write
    assert rq.sismember(keys.WORKERS, "w3")
    other = Heartbeat(rq, "w4", "worker", ["q"]).start()
    assert not rq.sismember(keys.WORKERS, "w3") and rq.sismember(keys.WORKERS, "w4")
    other.stop()


def test_an_unhealthy_owner_stops_the_beat_so_the_worker_counts_as_dead(rq: Any) -> None:
    alive = [True]
    hb = Heartbeat(rq, "w5", "in-process", ["q"], healthy=lambda: alive[0], every_s=0.1,
                   ttl_s=1).start()
    alive[0] = False  # the worker thread died; the heartbeat thread must not keep it "alive"
    _until(lambda: live_count(rq) == 0, 3)
    hb.stop()


def test_the_metrics_count_the_same_heartbeats(rq: Any) -> None:
    def workers() -> float:
        fams = {f.name: f for f in text_string_to_metric_families(metrics.render().decode())}
        return fams["hivemind_workers"].samples[0].value

    metrics.watch_store(rq, rq)
    assert workers() == 0
    hbs = [Heartbeat(rq, f"m{i}", "worker", ["q"]).start() for i in range(2)]
    assert workers() == 2 == live_count(rq)
    hbs[0].stop()
    assert workers() == 1 == live_count(rq)
    hbs[1].stop()
