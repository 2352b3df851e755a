"""The worker process: sweep for namespaces left behind, then work the queues.

One RQ worker, one name, for the life of the process: an idle worker re-sweeps from inside
its dequeue loop instead of quitting and registering again, so RQ's registry and the
worker's job counters stay continuous. Its heartbeat (``worker.ops.heartbeat``) lives as long as
the process works, so readiness and ``status`` count it. It logs one line when it starts
(name, queues, store, config digest, what is behind) and one when it stops (reason, jobs
done).
"""

from __future__ import annotations

import os
import signal
import socket
import uuid
from collections.abc import Callable
from typing import Any

import structlog
from rq.queue import Queue

from hivemind_memory.projections.store import keys
from hivemind_memory.projections.store.log import namespaces
from hivemind_memory.projections.store.types import Store
from hivemind_memory.projections.store.urls import redact_url
from hivemind_memory.worker import runtime
from hivemind_memory.worker.memory import default_budget_mib, reported
from hivemind_memory.worker.ops.heartbeat import Doing, Heartbeat, held
from hivemind_memory.worker.projector import behind, enqueue_behind
from hivemind_memory.worker.rqworker import HivemindWorker

log = structlog.get_logger("hivemind.worker")

SWEEP_INTERVAL_S = keys.SWEEP_INTERVAL_S
"""A long-running worker re-sweeps for namespaces left behind after this long idle."""


def worker_name() -> str:
    """``hivemind-<host>-<pid>-<random>``: unique per process, stable for its life."""
    return f"hivemind-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class LoopWorker(HivemindWorker):
    """hivemind's RQ worker (allowlist, heartbeats) that re-sweeps when idle (never quits for
    being idle) and counts its jobs and the signal that stopped it."""

    def __init__(self, queues: list[Queue], connection: Store, *, name: str,
                 on_idle: Callable[[], object] | None = None,
                 idle_s: int = SWEEP_INTERVAL_S) -> None:
        super().__init__(queues, connection, name=name)
        self.on_idle = on_idle
        self.idle_s = idle_s
        self.jobs_done = 0
        self.stop_signal: str | None = None

    def dequeue_job_and_maintain_ttl(self, timeout: int | None,
                                     max_idle_time: int | None = None) -> Any:
        if timeout is None or self.on_idle is None:  # burst: return when the queues are empty
            return super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)
        while True:
            got = super().dequeue_job_and_maintain_ttl(timeout, self.idle_s)
            if got is not None or self._stop_requested:
                return got
            self.on_idle()

    def execute_job(self, job: Any, queue: Any) -> Any:
        self.jobs_done += 1
        return super().execute_job(job, queue)

    def request_stop(self, signum: int, frame: Any) -> None:
        self.stop_signal = signal.Signals(signum).name
        super().request_stop(signum, frame)  # type: ignore[no-untyped-call]


def run_worker(rt: runtime.Runtime, burst: bool, idle_s: int = SWEEP_INTERVAL_S,
               shards: tuple[int, ...] | None = None) -> int:
    """Sweep for namespaces left behind, then work; in burst mode loop until all projected.

    It answers the queries of ``shards`` (None: every shard of ``rt.settings.shards``), their
    queues first, and folds any namespace (one projection queue: the read model lives in
    Redis, the lease and the checkpoint's compare-and-set keep a fold exactly-once whichever
    worker runs it, and a shard without its worker still gets its writes projected).

    A long-running worker sweeps again whenever it has been idle for ``idle_s`` (a job that
    failed for good leaves its namespace behind until someone sweeps), and exits on
    SIGINT/SIGTERM (RQ's warm shutdown: the current job finishes first).
    """
    served = tuple(range(rt.settings.shards)) if shards is None else shards
    queues = [*rt.query_queues(served), rt.project_queue]
    name = worker_name()
    late = enqueue_behind(rt.store, rt.project_queue)
    log.info("worker_started", name=name, queues=[q.name for q in queues],
             shards=list(served), shard_count=rt.settings.shards,
             store=redact_url(rt.settings.redis_url), config_digest=rt.cfg.digest(),
             namespaces=len(namespaces(rt.store)), behind=late, burst=burst,
             idle_sweep_s=None if burst else idle_s, pid=os.getpid(),
             memory_budget_mib=rt.settings.memory_budget_mib or default_budget_mib())
    beat = Heartbeat(rt.rq, name, "worker", [q.name for q in queues], shards=served,
                     shard_count=rt.settings.shards,
                     describe=lambda: held(rt, Doing(memory=reported(rt.cache)))).start()
    try:
        return _work(rt, queues, name, burst, idle_s)
    finally:
        beat.stop()


def _work(rt: runtime.Runtime, queues: list[Queue], name: str, burst: bool,
          idle_s: int) -> int:
    jobs = 0
    rounds_without_progress = 0
    first = True
    while True:
        if not first:
            enqueue_behind(rt.store, rt.project_queue)
        first = False
        w = LoopWorker(queues, rt.rq, name=name,
                       on_idle=None if burst else
                       lambda: enqueue_behind(rt.store, rt.project_queue),
                       idle_s=idle_s)
        try:
            w.work(burst=burst, with_scheduler=False, logging_level="WARNING")
        finally:
            jobs += w.jobs_done
        if not burst:
            if w.stop_signal is not None or w._stop_requested \
                    or getattr(w, "_shutdown_requested_date", None) is not None:
                log.info("worker_stopped", name=name, reason=f"signal {w.stop_signal or '?'}",
                         jobs=jobs)
                return 0
            log.warning("worker_restarting", name=name, jobs=jobs)  # RQ gave up (e.g. Redis)
            continue
        late = behind(rt.store)
        if not late:
            log.info("worker_stopped", name=name, reason="burst_done", jobs=jobs)
            return 0
        rounds_without_progress += 1
        if rounds_without_progress > 5:
            log.error("worker_stopped", name=name, reason="burst_stuck", namespaces=late,
                      jobs=jobs)
            return 1
