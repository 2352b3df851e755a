"""hivemind's RQ worker: one heartbeat thread renews whichever job runs, and never after
that job ended; the worker's own heartbeat goes out in one pipeline and still sets its TTL."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from hivemind_memory.api_stub.protocol.jobs import enqueue_projection
from hivemind_memory.api_stub.protocol.settings import Settings
from hivemind_memory.worker import jobs as jobs_mod
from hivemind_memory.worker import rqworker, runtime
from hivemind_memory.worker.rqworker import HivemindWorker


def test_one_heartbeat_thread_renews_each_running_job_and_stops_with_it(
        store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rqworker, "HEARTBEAT_EVERY_S", 0.02)
    beats: list[tuple[str, int, float]] = []
    ended: dict[str, float] = {}
    real_beat = HivemindWorker.maintain_heartbeats
    real_ended = HivemindWorker.handle_execution_ended

    def beat(self: HivemindWorker, job: Any, execution: Any) -> None:
        beats.append((job.id, threading.get_ident(), time.monotonic()))
        real_beat(self, job, execution)

    def end(self: HivemindWorker, job: Any, queue: Any, ttl: int) -> None:
        real_ended(self, job, queue, ttl)
        ended[job.id] = time.monotonic()

    def slow(r: Any, q: Any, ns: str, s: Settings) -> dict[str, str]:
        time.sleep(0.3)
        return {"ns": ns}

    monkeypatch.setattr(HivemindWorker, "maintain_heartbeats", beat)
    monkeypatch.setattr(HivemindWorker, "handle_execution_ended", end)
    monkeypatch.setattr(jobs_mod, "run_projection", slow)
    rt = runtime.build(Settings(), store)
    runtime.install(rt)
    q = rt.project_queue
    enqueue_projection(q, "a")
    enqueue_projection(q, "b")
    w = HivemindWorker([q], rt.rq)
    assert w.work(burst=True)
    assert len(ended) == 2
    for job_id, at in ended.items():
        mine = [t for j, _, t in beats if j == job_id]
        assert len(mine) >= 3  # renewed while it ran
        assert max(mine) < at  # and never once it had ended
    assert len({ident for _, ident, _ in beats}) == 1  # one thread for both jobs
    assert not [t for t in threading.enumerate() if t.name.startswith("heartbeat-")]


def test_worker_heartbeat_in_one_pipeline_sets_the_same_keys(store: Any) -> None:
    rt = runtime.build(Settings(), store)
    w = HivemindWorker([rt.project_queue], rt.rq)
    w.register_birth()
    rt.rq.hdel(w.key, "last_heartbeat")
    rt.rq.persist(w.key)
    w.heartbeat(123)
    assert rt.rq.hget(w.key, "last_heartbeat")
    assert 0 < rt.rq.ttl(w.key) <= 123


def test_repeated_heartbeats_and_states_are_not_sent_again(
        store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    rt = runtime.build(Settings(), store)
    w = HivemindWorker([rt.project_queue], rt.rq)
    w.register_birth()
    w.heartbeat()
    rt.rq.persist(w.key)
    w.heartbeat()  # right after the last one: nothing sent
    assert rt.rq.ttl(w.key) == -1
    monkeypatch.setattr(rqworker, "BEAT_GAP_S", 0.0)
    w.heartbeat()
    assert rt.rq.ttl(w.key) > 0
    w.set_state("idle")
    assert rt.rq.hget(w.key, "state") == b"idle"
    rt.rq.hdel(w.key, "state")
    w.set_state("idle")  # unchanged: not written again
    assert rt.rq.hget(w.key, "state") is None and w.get_state() == "idle"
    w.set_state("busy")
    assert rt.rq.hget(w.key, "state") == b"busy"


@pytest.mark.parametrize("both_queues", [False, True])
def test_a_job_starts_in_one_multi_and_finishes_as_rq_records_it(
        store: Any, monkeypatch: pytest.MonkeyPatch, both_queues: bool) -> None:
    from rq.job import JobStatus
    from rq.worker.base import BaseWorker

    seen: list[str] = []
    real_prepare = BaseWorker.prepare_job_execution

    def prepare(self: Any, job: Any, remove: bool = False) -> None:
        seen.append(job.id)  # RQ's own second round trip: must not run
        real_prepare(self, job, remove)

    def job_body(r: Any, q: Any, ns: str, s: Settings) -> dict[str, str]:
        from rq import get_current_job

        me = get_current_job()
        assert me is not None
        started = rt.rq.hgetall(me.key)
        assert started[b"status"] == b"started" and started[b"worker_name"]
        assert me.started_job_registry.count == 1
        return {"ns": ns}

    monkeypatch.setattr(BaseWorker, "prepare_job_execution", prepare)
    monkeypatch.setattr(jobs_mod, "run_projection", job_body)
    rt = runtime.build(Settings(), store)
    runtime.install(rt)
    q = rt.project_queue
    enqueue_projection(q, "a")
    [job_id] = q.job_ids
    w = HivemindWorker([rt.query_queue, q] if both_queues else [q], rt.rq)
    assert w.work(burst=True)
    assert seen == []
    job = q.fetch_job(job_id)
    assert job is not None and job.get_status() == JobStatus.FINISHED
    assert job.started_at is not None and job.ended_at is not None
    assert job.worker_name == w.name
    assert q.started_job_registry.count == 0 and q.finished_job_registry.count == 1
    assert rt.rq.llen(q.intermediate_queue_key) == 0
    assert job.latest_result() is not None


def test_a_pubsub_thread_late_to_wake_keeps_its_connection_until_it_ends(
        store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stopping a worker waits ``PUBSUB_STOP_S`` for its pubsub thread; one not scheduled
    by then (a loaded machine) finds its connection still open when it wakes, reads the
    UNSUBSCRIBE's reply and ends without an exception, closing the connection itself. (RQ
    closed it under the thread after ``join(timeout=1)``: the thread then died raising
    "pubsub connection not set" in whatever ran next.)"""
    from redis.client import PubSub, PubSubWorkerThread

    monkeypatch.setattr(rqworker, "PUBSUB_STOP_S", 0.05)
    wake = threading.Event()
    real = PubSub.parse_response

    def late(self: PubSub, *a: Any, **kw: Any) -> Any:
        if isinstance(threading.current_thread(), PubSubWorkerThread):
            wake.wait(30)  # not scheduled until the test lets it run
        return real(self, *a, **kw)

    monkeypatch.setattr(PubSub, "parse_response", late)
    raised: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))
    rt = runtime.build(Settings(), store)
    w = HivemindWorker([rt.project_queue], rt.rq)
    w.subscribe()  # type: ignore[no-untyped-call]
    thread, pubsub = w.pubsub_thread, w.pubsub
    assert thread is not None and pubsub is not None
    w.unsubscribe()
    assert thread.is_alive() and pubsub.connection is not None  # left to the thread
    wake.set()
    thread.join(30)
    assert not thread.is_alive() and raised == []
    assert pubsub.connection is None  # closed by the thread on its way out


def test_a_pubsub_thread_that_starts_late_still_stops_with_the_worker(
        store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``subscribe`` returns once the pubsub thread runs its loop: a thread scheduled only
    after the stop (an empty burst on a loaded machine) would set its running flag again on
    entry and loop for good. Held back at its start, it still ends with ``unsubscribe``."""
    from redis.client import PubSubWorkerThread

    monkeypatch.setattr(rqworker, "PUBSUB_STOP_S", 5.0)
    real = PubSubWorkerThread.run

    def late(self: PubSubWorkerThread) -> None:
        time.sleep(0.3)  # not scheduled at once
        real(self)

    monkeypatch.setattr(PubSubWorkerThread, "run", late)
    rt = runtime.build(Settings(), store)
    w = HivemindWorker([rt.project_queue], rt.rq)
    w.subscribe()
    thread = w.pubsub_thread
    assert thread is not None
    w.unsubscribe()  # at once: the burst had nothing to do
    assert not thread.is_alive()


@pytest.mark.parametrize("store", ["fakeredis"], indirect=True)  # the race is fakeredis's
def test_the_pubsub_thread_closes_its_connection_only_after_the_unsubscribe_is_written(
        store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``unsubscribe`` writes UNSUBSCRIBE on the pubsub connection while the pubsub thread,
    woken by its reply, may already be closing that connection: on the embedded store
    (fakeredis: the command runs inside the writer's ``sendall``) the close then met the
    command still running ("generator already executing", raised in the thread: pytest
    failed whatever test ran then). Forced here: the writer waits, right after the reply
    went out, for the thread to close the connection; the close waits for the write."""
    import fakeredis
    from fakeredis._socket._base import BaseFakeSocket
    from redis.client import PubSubWorkerThread

    assert isinstance(store, fakeredis.FakeRedis)  # a real socket's close runs no write
    main = threading.current_thread()
    armed, closing = threading.Event(), threading.Event()
    put, shutdown = BaseFakeSocket.put_response, BaseFakeSocket.shutdown

    def reply(self: Any, msg: Any) -> None:
        put(self, msg)
        if armed.is_set() and threading.current_thread() is main:
            armed.clear()
            closing.wait(1.0)  # the old code: the thread closes the connection meanwhile

    def closed(self: Any, how: Any) -> None:
        if isinstance(threading.current_thread(), PubSubWorkerThread):
            closing.set()
        shutdown(self, how)

    monkeypatch.setattr(BaseFakeSocket, "put_response", reply)
    monkeypatch.setattr(BaseFakeSocket, "shutdown", closed)
    raised: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))
    rt = runtime.build(Settings(), store)
    w = HivemindWorker([rt.project_queue], rt.rq)
    w.subscribe()
    thread, pubsub = w.pubsub_thread, w.pubsub
    assert thread is not None and pubsub is not None
    armed.set()
    w.unsubscribe()
    thread.join(10)
    assert not thread.is_alive() and raised == []
    assert closing.is_set() and pubsub.connection is None
