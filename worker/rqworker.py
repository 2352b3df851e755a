"""The RQ worker hivemind runs: allowlisted jobs only, and a killed job retried in seconds.

RQ's defaults suit long jobs: a ``SimpleWorker`` marks its job alive for ``job timeout + 60``
seconds (660 s here) and cleans its registries every 10 minutes, so a job whose worker was
SIGKILLed sat ~625 s in the started ("wip") registry before anyone retried it. This worker
instead keeps a short heartbeat TTL alive from a thread while a job runs, and cleans the
registries often, so an abandoned job is retried within ``RETRY_BOUND_S`` of its worker's
death (given a live worker):

    HEARTBEAT_TTL_S  (the dead job's heartbeat expires)
  + MAINTENANCE_S    (some worker's next registry cleanup after that)
  + DEQUEUE_BLOCK_S  (a worker idle in its blocking dequeue notices the tick)
  [+ the job a busy worker is running: maintenance runs between jobs]
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from typing import Any

import structlog
from redis.exceptions import RedisError
from rq import SimpleWorker
from rq.executions import Execution
from rq.job import Job
from rq.queue import Queue
from rq.utils import now
from rq.worker.base import WorkerStatus

from hivemind_memory.api_stub.protocol.jobs import SafeJob
from hivemind_memory.api_stub.protocol.serializer import JSONSerializer

log = structlog.get_logger("hivemind.worker")

HEARTBEAT_TTL_S = 10
"""A running job's heartbeat lives this long; a dead worker's job counts as abandoned after."""
HEARTBEAT_EVERY_S = 3.0
"""How often a thread renews the heartbeat of the running job (well inside the TTL)."""
MAINTENANCE_S = 5
"""Seconds between registry cleanups (abandoned jobs retried, expired entries dropped)."""
DEQUEUE_BLOCK_S = 5
"""Longest blocking dequeue (BLPOP) of an idle worker; RQ sets its socket timeout above it."""
RETRY_BOUND_S = HEARTBEAT_TTL_S + MAINTENANCE_S + DEQUEUE_BLOCK_S
"""Bound on the delay before a killed job is requeued, with an idle worker alive (20 s)."""
BEAT_GAP_S = 1.0
"""The worker's own heartbeat is not sent again this soon after the last one."""
PUBSUB_STOP_S = 10.0
"""How long stopping a worker waits for its pubsub thread (woken by the UNSUBSCRIBE's reply)
to end; one still running after that closes its connection itself when it ends."""


class HivemindWorker(SimpleWorker):
    """``SimpleWorker`` (works on the embedded store too) with ``SafeJob``, JSON, short
    heartbeats kept alive while a job runs, and frequent registry cleanup.

    Savings on RQ's per-job bookkeeping, which is most of what a small job costs (a plain
    ``SimpleWorker`` makes about 17 round trips per job): the worker's own heartbeat (an HSET
    and two EXPIREs, three round trips) goes in one pipeline, and is not sent again within
    ``BEAT_GAP_S`` of the last one (RQ sends it twice in a row between jobs, and again right
    after dequeuing); the worker's state is not written again when it has not changed (RQ
    writes "idle" after a job and again before dequeuing); the execution record and the job's
    start go in one MULTI (RQ sends two back to back: ``prepare_execution``, then
    ``prepare_job_execution``); and one heartbeat thread lives as long as the worker,
    renewing whichever job is running, instead of a thread started and joined for every
    job."""

    def __init__(self, queues: list[Queue], connection: Any, name: str | None = None) -> None:
        super().__init__(queues, connection=connection, serializer=JSONSerializer, name=name,
                         job_class=SafeJob, maintenance_interval=MAINTENANCE_S,
                         worker_ttl=DEQUEUE_BLOCK_S + 15,
                         job_monitoring_interval=int(HEARTBEAT_EVERY_S))
        self._beat_sent = -math.inf
        self._job_started: str | None = None
        self._state_sent: str | None = None
        self._beat_lock = threading.Lock()
        self._beating: Job | None = None
        self._beat_stop = threading.Event()
        self._beat_thread: threading.Thread | None = None
        self._pubsub_writing = threading.RLock()
        """Held while ``unsubscribe`` writes on the pubsub connection; the pubsub thread's
        close of that connection waits for it (``subscribe``)."""

    def get_heartbeat_ttl(self, job: Job, working_time: float = 0.0) -> int:
        return HEARTBEAT_TTL_S

    def heartbeat(self, timeout: int | None = None, pipeline: Any = None) -> None:
        if pipeline is not None:
            super().heartbeat(timeout, pipeline=pipeline)
            return
        if timeout is None and time.monotonic() - self._beat_sent < BEAT_GAP_S:
            return  # the worker's key was renewed a moment ago (its TTL is over a minute)
        p = self.connection.pipeline(transaction=False)
        super().heartbeat(timeout, pipeline=p)
        p.execute()
        self._beat_sent = time.monotonic()

    def prepare_execution(self, job: Job) -> Execution:
        """RQ's ``prepare_execution`` and ``prepare_job_execution`` in one MULTI, in their
        order (a ``SimpleWorker`` runs nothing in between)."""
        with self.connection.pipeline() as p:
            ttl = self.get_heartbeat_ttl(job)
            execution = Execution.create(job, ttl, pipeline=p, worker_name=self.name)
            self.executions[execution.id] = execution
            self.set_state(WorkerStatus.BUSY, pipeline=p)
            self.heartbeat(ttl, pipeline=p)
            job.heartbeat(now(), ttl, pipeline=p)
            job.prepare_for_execution(self.name, pipeline=p)
            p.persist(job.key)
            if len(self.queues) == 1:  # what perform_job passes on to prepare_job_execution
                p.lrem(Queue(job.origin, connection=self.connection).intermediate_queue_key, 1,
                       job.id)
            p.execute()
        self._job_started = job.id
        return execution

    def prepare_job_execution(self, job: Job, remove_from_intermediate_queue: bool = False
                              ) -> None:
        if self._job_started == job.id:  # done in prepare_execution's MULTI
            self._job_started = None
            return
        super().prepare_job_execution(job, remove_from_intermediate_queue)

    def set_state(self, state: str, pipeline: Any = None) -> None:
        if pipeline is None and state == self._state_sent:
            self._state = state
            return
        super().set_state(state, pipeline=pipeline)
        self._state_sent = state

    def subscribe(self) -> None:
        """RQ's ``subscribe``, returning once the pubsub thread runs its loop: a thread that
        started only after ``unsubscribe`` told it to stop would set its running flag again
        (``PubSubWorkerThread.run`` sets it on entry) and loop for good, waiting 60 s at a
        time for a subscription (an empty ``--burst`` on a loaded machine)."""
        super().subscribe()  # type: ignore[no-untyped-call]
        pubsub = self.pubsub
        if pubsub is not None:  # the thread's close (``PubSubWorkerThread.run``) waits for
            close = pubsub.close  # a write of ``unsubscribe`` on the same connection

            def close_after_writes() -> None:
                with self._pubsub_writing:
                    close()

            pubsub.close = close_after_writes  # type: ignore[method-assign]
        running = getattr(self.pubsub_thread, "_running", None)  # redis-py's loop flag
        if running is not None and not running.wait(PUBSUB_STOP_S):
            log.warning("pubsub_thread_not_started", worker=self.name,
                        waited_s=PUBSUB_STOP_S)

    def unsubscribe(self) -> None:
        """RQ's ``unsubscribe`` with the listener thread told to stop *before* the UNSUBSCRIBE,
        and the pubsub connection left to the thread while it runs.

        RQ sends UNSUBSCRIBE first and stops its pubsub thread after: when the thread reads
        the reply in between, it loops into ``get_message``, finds no subscription and waits
        for one (60 s), so ``join(timeout=1)`` ran out and every other burst run (``worker
        --burst``, the benchmark) took one second longer than its work. Stopped first, the
        thread leaves its loop as soon as the reply wakes it, and closes the pubsub itself
        (``PubSubWorkerThread.run``). RQ then closed the pubsub after ``join(timeout=1)``
        whether the thread had ended or not: a thread not scheduled within that second (a
        loaded machine) woke to a closed connection and died raising ("pubsub connection
        not set"), an unhandled exception in a thread of the process (pytest fails whatever
        test is running then). Here the connection is closed only by the ended thread, and
        only once the UNSUBSCRIBE is written: on the embedded store (fakeredis runs the
        command inside ``sendall``) the thread woken by its reply closed the connection
        while the command still ran ("generator already executing", raised in the thread).
        """
        thread, pubsub = getattr(self, "pubsub_thread", None), self.pubsub
        if thread is None or pubsub is None:
            return
        with self._pubsub_writing:  # the woken thread closes the connection after this
            thread.stop()
            pubsub.unsubscribe()  # type: ignore[no-untyped-call]
        thread.join(timeout=PUBSUB_STOP_S)
        if thread.is_alive():  # it closes the connection when it ends
            log.warning("pubsub_thread_still_running", worker=self.name,
                        waited_s=PUBSUB_STOP_S)
            return
        pubsub.close()  # closed already by the thread, unless an exception ended it

    def execute_job(self, job: Job, queue: Queue) -> None:
        why = job.refusal() if isinstance(job, SafeJob) else "not a SafeJob"
        if why is not None:  # RQ fails it without running it (``SafeJob.func`` raises)
            log.error("job_refused", job_id=job.id, queue=queue.name, reason=why)
        if self._beat_thread is None or not self._beat_thread.is_alive():
            self._beat_stop.clear()
            self._beat_thread = threading.Thread(target=self._beat, daemon=True,
                                                 name=f"heartbeat-{self.name}")
            self._beat_thread.start()
        with self._beat_lock:
            self._beating = job
        try:
            super().execute_job(job, queue)
        finally:
            self._stop_beating()

    def handle_execution_ended(self, job: Job, queue: Queue, heartbeat_ttl: int) -> None:
        self._stop_beating()  # no renewal may land after the job ended (RQ removes it)
        super().handle_execution_ended(job, queue, heartbeat_ttl)

    def _stop_beating(self) -> None:
        with self._beat_lock:  # waits for a renewal under way
            self._beating = None

    def teardown(self) -> None:
        self._beat_stop.set()
        if self._beat_thread is not None:
            self._beat_thread.join(timeout=HEARTBEAT_EVERY_S + 5)
            self._beat_thread = None
        super().teardown()  # type: ignore[no-untyped-call]

    def _beat(self) -> None:
        """Renew the running job's heartbeat until the worker stops (a failed renewal is
        retried at the next tick; the job itself notices a dead Redis soon enough)."""
        while not self._beat_stop.wait(HEARTBEAT_EVERY_S):
            with self._beat_lock:
                job, execution = self._beating, self.execution
                if job is None or execution is None:
                    continue
                with contextlib.suppress(RedisError):
                    self.maintain_heartbeats(job, execution)
