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
import threading
from typing import Any

import redis
import structlog
from rq import SimpleWorker
from rq.executions import Execution
from rq.job import Job
from rq.queue import Queue

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


class HivemindWorker(SimpleWorker):
    """``SimpleWorker`` (works on the embedded store too) with ``SafeJob``, JSON, short
    heartbeats kept alive while a job runs, and frequent registry cleanup."""

    def __init__(self, queues: list[Queue], connection: Any, name: str | None = None) -> None:
        super().__init__(queues, connection=connection, serializer=JSONSerializer, name=name,
                         job_class=SafeJob, maintenance_interval=MAINTENANCE_S,
                         worker_ttl=DEQUEUE_BLOCK_S + 15,
                         job_monitoring_interval=int(HEARTBEAT_EVERY_S))

    def get_heartbeat_ttl(self, job: Job, working_time: float = 0.0) -> int:
        return HEARTBEAT_TTL_S

    def unsubscribe(self) -> None:
        """RQ's ``unsubscribe`` with the listener thread told to stop *before* the UNSUBSCRIBE.

        RQ sends UNSUBSCRIBE first and stops its pubsub thread after: when the thread reads
        the reply in between, it loops into ``get_message``, finds no subscription and waits
        for one (60 s), so ``join(timeout=1)`` ran out and every other burst run (``worker
        --burst``, the benchmark) took one second longer than its work. Stopped first, the
        thread leaves its loop as soon as the reply wakes it.
        """
        thread = getattr(self, "pubsub_thread", None)
        if thread is not None:
            thread.stop()
        super().unsubscribe()  # type: ignore[no-untyped-call]

    def execute_job(self, job: Job, queue: Queue) -> None:
        why = job.refusal() if isinstance(job, SafeJob) else "not a SafeJob"
        if why is not None:  # RQ fails it without running it (``SafeJob.func`` raises)
            log.error("job_refused", job_id=job.id, queue=queue.name, reason=why)
        stop = threading.Event()
        beat = threading.Thread(target=self._beat, args=(job, stop), daemon=True,
                                name=f"heartbeat-{job.id}")
        beat.start()
        try:
            super().execute_job(job, queue)
        finally:
            stop.set()
            beat.join(timeout=HEARTBEAT_EVERY_S + 5)

    def _beat(self, job: Job, stop: threading.Event) -> None:
        """Renew the running job's heartbeat until ``stop`` (a failed renewal is retried at
        the next tick; the job itself notices a dead Redis soon enough)."""
        while not stop.wait(HEARTBEAT_EVERY_S):
            execution: Execution | None = self.execution
            if execution is None:
                continue
            with contextlib.suppress(redis.RedisError):
                self.maintain_heartbeats(job, execution)
